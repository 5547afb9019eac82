package meta

import (
	"math"
	"slices"

	"github.com/ringstream/ringstream/internal/assert"
)

// Apply decodes one committed op, applies it at opNumber, appends the encoded Result to result (see
// AppendResult) and returns the extended slice. It is the vsr.StateMachine method. Every replica that
// applies the same ops at the same op numbers holds the same state and returns the same results: Apply
// reads no clock, does no I/O and walks maps only in sorted order. An op whose bytes do not decode, or
// whose guard does not hold, changes nothing but the applied op number and says why in its Result.
// Apply keeps neither op nor result.
//
// opNumber must be above every op number applied before (or covered by a restored snapshot); the
// replication layer guarantees it, so a violation panics.
func (s *State) Apply(op []byte, opNumber uint64, result []byte) []byte {
	return AppendResult(result, s.applyOp(op, opNumber))
}

// applyOp is Apply with the Result as a value.
func (s *State) applyOp(op []byte, opNumber uint64) Result {
	assert.True(opNumber > s.appliedOp, "meta: op number did not grow")
	s.appliedOp = opNumber
	decoded, err := DecodeOp(op)
	if err != nil {
		return refuse(ResultMalformed, "%v", err)
	}
	switch o := decoded.(type) {
	case RegisterNode:
		return s.applyRegisterNode(o)
	case DecommissionNode:
		return s.applyDecommissionNode(o)
	case CreateStream:
		return s.applyCreateStream(o)
	case DeleteStream:
		return s.applyDeleteStream(o)
	case SetAssignment:
		return s.applySetAssignment(o)
	case RecordRecovery:
		return s.applyRecordRecovery(o, opNumber)
	case WithdrawRecovery:
		return s.applyWithdrawRecovery(o)
	case CommitRecovery:
		return s.applyCommitRecovery(o)
	case AcceptOwnerLoss:
		return s.applyAcceptOwnerLoss(o)
	case RecordRecoveries:
		return s.applyRecordRecoveries(o, opNumber)
	case CommitRecoveries:
		return s.applyCommitRecoveries(o)
	case SetAssignments:
		return s.applySetAssignments(o)
	case CreateStreams:
		return s.applyCreateStreams(o)
	case DeleteStreams:
		return s.applyDeleteStreams(o)
	default:
		// DecodeOp returns only the kinds above.
		assert.True(false, "meta: decoded op of no known kind")
		return Result{}
	}
}

func (s *State) applyRegisterNode(o RegisterNode) Result {
	n, known := s.nodes[o.Node]
	if known && n.Status == NodeDecommissioned {
		return refuse(ResultNodeDecommissioned, "node %d was decommissioned", o.Node)
	}
	if known && n.Address == o.Address {
		return done("node %d already registered at %s", o.Node, o.Address)
	}
	s.nodes[o.Node] = Node{ID: o.Node, Address: o.Address, Status: NodeRegistered}
	return done("node %d registered at %s", o.Node, o.Address)
}

func (s *State) applyDecommissionNode(o DecommissionNode) Result {
	n, known := s.nodes[o.Node]
	if !known {
		return refuse(ResultNodeNotRegistered, "node %d is not registered", o.Node)
	}
	if n.Status == NodeDecommissioned {
		return refuse(ResultNodeDecommissioned, "node %d was already decommissioned", o.Node)
	}
	for _, id := range sortedKeys(s.streams) {
		e := s.streams[id]
		if e.assignment.Includes(o.Node) {
			return refuse(ResultNodeInUse, "node %d holds a copy of stream %d", o.Node, id)
		}
		if e.hasRecovery && slices.Contains(e.recovery.Members, o.Node) {
			return refuse(ResultNodeInUse, "node %d is proposed by recovery %d", o.Node, e.recovery.ID)
		}
	}
	n.Status = NodeDecommissioned
	s.nodes[o.Node] = n
	return done("node %d decommissioned", o.Node)
}

func (s *State) applyCreateStream(o CreateStream) Result {
	if id, taken := s.names[o.Name]; taken {
		return refuse(ResultNameInUse, "stream %q exists with id %d", o.Name, id)
	}
	if r, ok := s.checkRegistered(o.Owner, o.Followers); !ok {
		return r
	}
	id, incarnation := s.nextStreamID, uint32(1)
	if old, ok := s.retired[o.Name]; ok && old.incarnation < math.MaxUint32 {
		id, incarnation = old.id, old.incarnation+1
	} else if s.nextStreamID == math.MaxUint64 {
		return refuse(ResultIDsExhausted, "no stream id left for %q", o.Name)
	} else {
		s.nextStreamID++
	}
	delete(s.retired, o.Name)
	s.names[o.Name] = id
	s.streams[id] = &streamEntry{
		stream: Stream{Name: o.Name, ID: id, Incarnation: incarnation, Copies: o.Copies, Policy: o.Policy},
		assignment: Assignment{Epoch: 1, Owner: o.Owner, Followers: slices.Clone(o.Followers),
			Policy: o.Stamped},
	}
	return done("stream %q created: id %d incarnation %d, owner %d", o.Name, id, incarnation, o.Owner)
}

func (s *State) applyDeleteStream(o DeleteStream) Result {
	e, r, ok := s.liveStream(o.Stream, o.Incarnation)
	if !ok {
		return r
	}
	name := e.stream.Name
	delete(s.streams, o.Stream)
	delete(s.names, name)
	s.retired[name] = retiredName{id: o.Stream, incarnation: o.Incarnation}
	return done("stream %q (id %d incarnation %d) deleted with its %d history starts",
		name, o.Stream, o.Incarnation, len(e.starts.List))
}

func (s *State) applySetAssignment(o SetAssignment) Result {
	e, r, ok := s.liveStream(o.Stream, o.Incarnation)
	if !ok {
		return r
	}
	if r, ok := checkEpoch(e, o.ExpectedEpoch); !ok {
		return r
	}
	if e.hasRecovery {
		return refuse(ResultRecoveryRecorded, "stream %d has recovery %d (%s)",
			o.Stream, e.recovery.ID, e.recovery.Status)
	}
	if e.assignment.Epoch == math.MaxUint32 {
		return refuse(ResultEpochExhausted, "stream %d is at the last epoch", o.Stream)
	}
	if r, ok := s.checkRegistered(o.Owner, o.Followers); !ok {
		return r
	}
	next := Assignment{Epoch: e.assignment.Epoch + 1, Owner: o.Owner, Followers: o.Followers, Policy: o.Policy}
	if why, ok := NeedsNoRecovery(e.assignment, next); !ok {
		return refuse(ResultNeedsRecovery, "stream %d: %s", o.Stream, why)
	}
	next.Followers = slices.Clone(o.Followers)
	e.assignment = next
	return done("stream %d assigned at epoch %d: owner %d, %d followers, %s",
		o.Stream, next.Epoch, next.Owner, len(next.Followers), next.Policy)
}

// NeedsNoRecovery reports whether moving a stream from assignment old to next can commit without a
// recovery, and if not, why. It can when next keeps old's owner and every follower and needs no more
// copies to confirm (W' <= W): a record confirmed on W old copies then meets any R' = E' - W' + 1 of
// the new copies, so added copies may start empty and catch up (stream-failover spec, the change that
// commits without recovery). The controller may call it before proposing SetAssignment.
func NeedsNoRecovery(old, next Assignment) (why string, ok bool) {
	if next.Owner != old.Owner {
		return "the owner changes", false
	}
	for _, f := range old.Followers {
		if !next.Includes(f) {
			return "a follower is dropped", false
		}
	}
	if next.ConfirmCount() > old.ConfirmCount() {
		return "it needs more copies to confirm", false
	}
	return "", true
}

func (s *State) applyRecordRecovery(o RecordRecovery, opNumber uint64) Result {
	e, r, ok := s.liveStream(o.Stream, o.Incarnation)
	if !ok {
		return r
	}
	if r, ok := checkEpoch(e, o.ExpectedEpoch); !ok {
		return r
	}
	switch {
	case e.hasRecovery && e.recovery.Status == RecoveryPending:
		return refuse(ResultRecoveryRecorded, "stream %d has pending recovery %d", o.Stream, e.recovery.ID)
	case e.hasRecovery && o.Replaces != e.recovery.ID:
		return refuse(ResultRecoveryMismatch, "stream %d: withdrawn recovery is %d, op replaces %d",
			o.Stream, e.recovery.ID, o.Replaces)
	case !e.hasRecovery && o.Replaces != 0:
		return refuse(ResultRecoveryMismatch, "stream %d has no recovery to replace (op replaces %d)",
			o.Stream, o.Replaces)
	}
	if e.assignment.Epoch == math.MaxUint32 {
		return refuse(ResultEpochExhausted, "stream %d is at the last epoch", o.Stream)
	}
	for _, m := range o.Members {
		if r, ok := s.checkRegistered(m, nil); !ok {
			return r
		}
	}
	threshold := e.assignment.SealThreshold()
	e.recovery = Recovery{
		ID:            opNumber,
		Stream:        o.Stream,
		FromEpoch:     e.assignment.Epoch,
		ProposedOwner: o.ProposedOwner,
		Members:       slices.Clone(o.Members),
		SealThreshold: uint8(threshold),
		Policy:        o.Policy,
		Reason:        o.Reason,
		Status:        RecoveryPending,
	}
	e.hasRecovery = true
	return done("recovery %d of stream %d from epoch %d recorded (%s): seal at least %d of %d copies",
		opNumber, o.Stream, e.assignment.Epoch, o.Reason, threshold, e.assignment.Copies())
}

func (s *State) applyWithdrawRecovery(o WithdrawRecovery) Result {
	e, r, ok := s.liveStream(o.Stream, o.Incarnation)
	if !ok {
		return r
	}
	if r, ok := checkPendingRecovery(e, o.Recovery); !ok {
		return r
	}
	e.recovery.Status = RecoveryWithdrawn
	return done("recovery %d of stream %d withdrawn", o.Recovery, o.Stream)
}

// liveStream finds the stream an op addresses, refusing when it is gone or was created again since.
func (s *State) liveStream(id uint64, incarnation uint32) (*streamEntry, Result, bool) {
	e, ok := s.streams[id]
	if !ok {
		return nil, refuse(ResultStreamNotFound, "no stream with id %d", id), false
	}
	if e.stream.Incarnation != incarnation {
		return nil, refuse(ResultIncarnationMismatch, "stream %d is at incarnation %d, op names %d",
			id, e.stream.Incarnation, incarnation), false
	}
	return e, Result{}, true
}

func checkEpoch(e *streamEntry, expected uint32) (Result, bool) {
	if e.assignment.Epoch != expected {
		return refuse(ResultEpochMismatch, "stream %d is at epoch %d, op expects %d",
			e.stream.ID, e.assignment.Epoch, expected), false
	}
	return Result{}, true
}

func checkPendingRecovery(e *streamEntry, id uint64) (Result, bool) {
	if !e.hasRecovery || e.recovery.ID != id {
		return refuse(ResultRecoveryMismatch, "stream %d has no recovery %d", e.stream.ID, id), false
	}
	if e.recovery.Status != RecoveryPending {
		return refuse(ResultRecoveryNotPending, "recovery %d of stream %d is %s",
			id, e.stream.ID, e.recovery.Status), false
	}
	return Result{}, true
}

// checkRegistered refuses when owner or a follower is not a registered node.
func (s *State) checkRegistered(owner uint16, followers []uint16) (Result, bool) {
	if n, ok := s.nodes[owner]; !ok || n.Status != NodeRegistered {
		return refuse(ResultNodeNotRegistered, "node %d is not registered", owner), false
	}
	for _, f := range followers {
		if n, ok := s.nodes[f]; !ok || n.Status != NodeRegistered {
			return refuse(ResultNodeNotRegistered, "node %d is not registered", f), false
		}
	}
	return Result{}, true
}
