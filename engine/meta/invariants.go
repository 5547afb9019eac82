package meta

import (
	"fmt"
	"math"
	"slices"
)

// validate checks every invariant the ops keep. Restore runs it on a decoded snapshot, which is input,
// so it returns an error wrapping ErrSnapshot rather than asserting; tests run it after every op.
func (s *State) validate() error {
	for _, id := range sortedKeys(s.nodes) {
		if err := validateNode(id, s.nodes[id]); err != nil {
			return err
		}
	}
	if len(s.names) != len(s.streams) {
		return fmt.Errorf("%w: %d names for %d streams", ErrSnapshot, len(s.names), len(s.streams))
	}
	ids := make(map[uint64]string, len(s.streams)+len(s.retired))
	for _, id := range sortedKeys(s.streams) {
		e := s.streams[id]
		if err := s.validateStream(e); err != nil {
			return fmt.Errorf("stream %d: %w", id, err)
		}
		ids[id] = e.stream.Name
	}
	for _, name := range sortedKeys(s.retired) {
		r := s.retired[name]
		if ValidateStreamName(name) != nil || r.id == 0 || r.id >= s.nextStreamID || r.incarnation == 0 {
			return fmt.Errorf("%w: retired name %q (id %d incarnation %d)", ErrSnapshot, name, r.id, r.incarnation)
		}
		if _, live := s.names[name]; live {
			return fmt.Errorf("%w: name %q both live and retired", ErrSnapshot, name)
		}
		if other, dup := ids[r.id]; dup {
			return fmt.Errorf("%w: names %q and %q share id %d", ErrSnapshot, other, name, r.id)
		}
		ids[r.id] = name
	}
	return nil
}

func validateNode(id uint16, n Node) error {
	if id == 0 || n.ID != id {
		return fmt.Errorf("%w: node id %d", ErrSnapshot, n.ID)
	}
	if n.Status != NodeRegistered && n.Status != NodeDecommissioned {
		return fmt.Errorf("%w: node %d status %d", ErrSnapshot, id, n.Status)
	}
	if len(n.Address) == 0 {
		return fmt.Errorf("%w: node %d has no address", ErrSnapshot, id)
	}
	return nil
}

func (s *State) validateStream(e *streamEntry) error {
	st := e.stream
	if st.ID == 0 || st.ID >= s.nextStreamID || st.Incarnation == 0 {
		return fmt.Errorf("%w: id %d incarnation %d (next id %d)", ErrSnapshot, st.ID, st.Incarnation, s.nextStreamID)
	}
	if s.names[st.Name] != st.ID || ValidateStreamName(st.Name) != nil {
		return fmt.Errorf("%w: name %q", ErrSnapshot, st.Name)
	}
	if st.Copies == 0 || st.Copies > CopiesMax || st.Policy.Validate() != nil || st.Policy.Kind == PolicyUnset {
		return fmt.Errorf("%w: %d copies, policy %s", ErrSnapshot, st.Copies, st.Policy)
	}
	a := e.assignment
	if a.Epoch == 0 || a.Policy.Validate() != nil || validateCopySet(a.Owner, a.Followers) != nil {
		return fmt.Errorf("%w: assignment epoch %d owner %d followers %v policy %s",
			ErrSnapshot, a.Epoch, a.Owner, a.Followers, a.Policy)
	}
	if !s.allRegistered(a.Owner) || !s.allRegistered(a.Followers...) {
		return fmt.Errorf("%w: assignment names a node that is not registered", ErrSnapshot)
	}
	if e.hasRecovery {
		if err := s.validateRecovery(e); err != nil {
			return err
		}
	}
	return validateStarts(e.starts, a.Epoch)
}

func (s *State) validateRecovery(e *streamEntry) error {
	r, a := e.recovery, e.assignment
	if r.ID == 0 || r.ID > s.appliedOp || r.Stream != e.stream.ID {
		return fmt.Errorf("%w: recovery id %d (applied op %d)", ErrSnapshot, r.ID, s.appliedOp)
	}
	if r.FromEpoch != a.Epoch || a.Epoch == math.MaxUint32 {
		return fmt.Errorf("%w: recovery from epoch %d, assignment at %d", ErrSnapshot, r.FromEpoch, a.Epoch)
	}
	if validateNodeSet(r.Members) != nil || !slices.Contains(r.Members, r.ProposedOwner) ||
		!s.allRegistered(r.Members...) {
		return fmt.Errorf("%w: recovery members %v, proposed owner %d", ErrSnapshot, r.Members, r.ProposedOwner)
	}
	if int(r.SealThreshold) != a.SealThreshold() {
		return fmt.Errorf("%w: recovery seal threshold %d", ErrSnapshot, r.SealThreshold)
	}
	if r.Policy.Validate() != nil || r.Reason == 0 || r.Reason > reasonMax {
		return fmt.Errorf("%w: recovery policy %s reason %d", ErrSnapshot, r.Policy, r.Reason)
	}
	if r.Status != RecoveryPending && r.Status != RecoveryWithdrawn {
		return fmt.Errorf("%w: recovery status %d", ErrSnapshot, r.Status)
	}
	return nil
}

func validateStarts(starts Starts, epoch uint32) error {
	if starts.Version < uint64(len(starts.List)) {
		return fmt.Errorf("%w: starts version %d below %d starts", ErrSnapshot, starts.Version, len(starts.List))
	}
	var prev uint32
	for _, h := range starts.List {
		if h.Epoch <= prev || h.Epoch > epoch || h.Node == 0 {
			return fmt.Errorf("%w: history start epoch %d node %d (assignment epoch %d)",
				ErrSnapshot, h.Epoch, h.Node, epoch)
		}
		prev = h.Epoch
	}
	return nil
}

func (s *State) allRegistered(nodes ...uint16) bool {
	for _, id := range nodes {
		if n, ok := s.nodes[id]; !ok || n.Status != NodeRegistered {
			return false
		}
	}
	return true
}
