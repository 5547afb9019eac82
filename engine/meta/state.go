package meta

import (
	"cmp"
	"slices"
	"strconv"
)

// NodeStatus says whether a node may hold copies.
type NodeStatus uint8

const (
	// NodeRegistered nodes may be placed as owners and followers.
	NodeRegistered NodeStatus = 1
	// NodeDecommissioned nodes hold no copy and may never be registered again, so an id that once
	// held copies never comes back as a different machine.
	NodeDecommissioned NodeStatus = 2
)

func (s NodeStatus) String() string {
	switch s {
	case NodeRegistered:
		return "registered"
	case NodeDecommissioned:
		return "decommissioned"
	default:
		return "node_status(" + strconv.Itoa(int(s)) + ")"
	}
}

// Node is one node of the cluster as the metadata state knows it.
type Node struct {
	ID      uint16
	Address string
	Status  NodeStatus
}

// Stream is a stream's identity and its requested shape. ID is the stream's group id; it is never 0
// (0 is left to the metadata group). Incarnation starts at 1 and grows each time the name is deleted
// and created again, which keeps the same ID.
type Stream struct {
	Name        string
	ID          uint64
	Incarnation uint32
	Copies      uint8
	Policy      Policy
}

// Assignment is where a stream lives at one epoch: its owner, its followers and the confirm policy
// the controller stamped on it. Every stream has one from the op that creates it (epoch 1).
type Assignment struct {
	Epoch     uint32
	Owner     uint16
	Followers []uint16 // ascending node ids, never the owner
	Policy    Policy
}

// Copies is E for this assignment: the owner and its followers.
func (a Assignment) Copies() int { return 1 + len(a.Followers) }

// Includes reports whether node holds a copy under a.
func (a Assignment) Includes(node uint16) bool {
	return a.Owner == node || slices.Contains(a.Followers, node)
}

// ConfirmCount is W for this assignment, by the one rule (StreamConfirmPolicy).
func (a Assignment) ConfirmCount() int { return StreamConfirmPolicy(a.Policy, a.Copies()) }

// RecoveryReason says why the controller recorded a recovery.
type RecoveryReason uint8

const (
	ReasonLivenessExpiry RecoveryReason = 1 // no node heartbeat within node_liveness_timeout
	ReasonEagerFailover  RecoveryReason = 2 // shutdown notice, or links closed past eager_failover_grace
	ReasonOperator       RecoveryReason = 3 // an operator asked for it
	// ReasonPlacement: the owner is alive, but adding copies needs more of them to confirm (W grows),
	// which only a recovery may do (see NeedsNoRecovery).
	ReasonPlacement RecoveryReason = 4
	// ReasonOwnerRestarted: the owner's node restarted within the liveness window and its copy reopened
	// in its own epoch (wire.CopyOwnerRestarted): it may have lost records a follower holds, so the
	// copies are sealed and the furthest promoted, as for a lost owner.
	ReasonOwnerRestarted RecoveryReason = 5
	// ReasonOwnerLogFailed: the owner's node is alive but its copy's log failed (it publishes
	// wire.CopyLogFailed): it confirms nothing more, so the stream fails over as from a lost owner.
	ReasonOwnerLogFailed RecoveryReason = 6

	reasonMax = ReasonOwnerLogFailed
)

func (r RecoveryReason) String() string {
	switch r {
	case ReasonLivenessExpiry:
		return "liveness_expiry"
	case ReasonEagerFailover:
		return "eager_failover"
	case ReasonOperator:
		return "operator"
	case ReasonPlacement:
		return "placement"
	case ReasonOwnerRestarted:
		return "owner_restarted"
	case ReasonOwnerLogFailed:
		return "owner_log_failed"
	default:
		return "reason(" + strconv.Itoa(int(r)) + ")"
	}
}

// RecoveryStatus says whether a recovery is still being worked on.
type RecoveryStatus uint8

const (
	// RecoveryPending recoveries are sealed and committed by the recovery worker.
	RecoveryPending RecoveryStatus = 1
	// RecoveryWithdrawn recoveries were stopped by an operator. They stay listed until the controller
	// records a new recovery that replaces them, or the stream is deleted.
	RecoveryWithdrawn RecoveryStatus = 2
)

func (s RecoveryStatus) String() string {
	switch s {
	case RecoveryPending:
		return "pending"
	case RecoveryWithdrawn:
		return "withdrawn"
	default:
		return "recovery_status(" + strconv.Itoa(int(s)) + ")"
	}
}

// Recovery is a stream's recovery as the controller recorded it. ID is the op number of the op that
// recorded it, so ids are unique for the life of the cluster and grow in log order.
type Recovery struct {
	ID     uint64
	Stream uint64
	// FromEpoch is the assignment epoch being recovered from; the seal fences at FromEpoch+1.
	FromEpoch     uint32
	ProposedOwner uint16
	// Members is the proposed copy set, ProposedOwner included, ascending. Members not in the old
	// assignment join the new one as (empty) followers when the recovery commits.
	Members []uint16
	// SealThreshold is R of the old assignment: the commit needs at least this many sealed copies.
	SealThreshold uint8
	// Policy is what the controller stamps on the assignment the recovery commits.
	Policy Policy
	Reason RecoveryReason
	Status RecoveryStatus
}

// HistoryStart is where one owner's history begins: at Epoch, Node took over holding RecordStart
// records and CursorStart cursor events.
type HistoryStart struct {
	Epoch       uint32
	RecordStart uint64
	CursorStart uint64
	Node        uint16
}

// Starts is a stream's list of history starts in epoch order. Version grows by one on every change to
// the list; the commit-recovery guard checks it, so a recovery decided on one list cannot commit
// against another.
type Starts struct {
	Version uint64
	List    []HistoryStart
}

// Latest returns the last history start, the confirmed-prefix guard's bound.
func (s Starts) Latest() (HistoryStart, bool) {
	if len(s.List) == 0 {
		return HistoryStart{}, false
	}
	return s.List[len(s.List)-1], true
}

// streamEntry is everything the state holds for one live stream.
type streamEntry struct {
	stream      Stream
	assignment  Assignment
	recovery    Recovery
	hasRecovery bool
	starts      Starts
}

// retiredName remembers a deleted stream name so that creating it again keeps its id and takes the
// next incarnation.
type retiredName struct {
	id          uint64
	incarnation uint32
}

// State is the replicated metadata state. The zero value is not usable; call NewState. A State is
// used by one goroutine at a time.
type State struct {
	appliedOp    uint64
	nextStreamID uint64
	nodes        map[uint16]Node
	streams      map[uint64]*streamEntry
	names        map[string]uint64 // live stream name -> id
	retired      map[string]retiredName
}

// NewState returns the empty state a metadata group starts from (op 0 applied).
func NewState() *State {
	return &State{
		nextStreamID: 1,
		nodes:        make(map[uint16]Node),
		streams:      make(map[uint64]*streamEntry),
		names:        make(map[string]uint64),
		retired:      make(map[string]retiredName),
	}
}

// AppliedOp is the op number of the last op applied (or the one a restored snapshot covers).
func (s *State) AppliedOp() uint64 { return s.appliedOp }

// Node returns the node with id.
func (s *State) Node(id uint16) (Node, bool) {
	n, ok := s.nodes[id]
	return n, ok
}

// Nodes returns every node the state knows, registered or decommissioned, in id order.
func (s *State) Nodes() []Node {
	out := make([]Node, 0, len(s.nodes))
	for _, id := range sortedKeys(s.nodes) {
		out = append(out, s.nodes[id])
	}
	return out
}

// StreamByName returns the live stream called name.
func (s *State) StreamByName(name string) (Stream, bool) {
	id, ok := s.names[name]
	if !ok {
		return Stream{}, false
	}
	return s.streams[id].stream, true
}

// StreamByID returns the live stream with id.
func (s *State) StreamByID(id uint64) (Stream, bool) {
	e, ok := s.streams[id]
	if !ok {
		return Stream{}, false
	}
	return e.stream, true
}

// Deleted reports whether the state records incarnation of stream id as deleted: the live stream with
// id is a later incarnation, or no stream with id lives and its retired name was retired at
// incarnation or later. An id the state has never seen is not deleted (a replica that has not applied
// its creation yet). The answer does not depend on the map's iteration order.
func (s *State) Deleted(id uint64, incarnation uint32) bool {
	if e, ok := s.streams[id]; ok {
		return e.stream.Incarnation > incarnation
	}
	for _, r := range s.retired {
		if r.id == id && r.incarnation >= incarnation {
			return true
		}
	}
	return false
}

// Streams returns every live stream in id order.
func (s *State) Streams() []Stream {
	out := make([]Stream, 0, len(s.streams))
	for _, id := range sortedKeys(s.streams) {
		out = append(out, s.streams[id].stream)
	}
	return out
}

// Assignment returns the current assignment of stream id. Followers is a copy the caller may keep.
func (s *State) Assignment(id uint64) (Assignment, bool) {
	e, ok := s.streams[id]
	if !ok {
		return Assignment{}, false
	}
	a := e.assignment
	a.Followers = slices.Clone(a.Followers)
	return a, true
}

// Starts returns stream id's history starts with their version. List is a copy the caller may keep.
func (s *State) Starts(id uint64) (Starts, bool) {
	e, ok := s.streams[id]
	if !ok {
		return Starts{}, false
	}
	return Starts{Version: e.starts.Version, List: slices.Clone(e.starts.List)}, true
}

// LatestStart returns the last history start of stream id: recovery never promotes a copy whose record
// tail is below its RecordStart (stream-failover spec, "The confirmed prefix").
func (s *State) LatestStart(id uint64) (HistoryStart, bool) {
	e, ok := s.streams[id]
	if !ok {
		return HistoryStart{}, false
	}
	return e.starts.Latest()
}

// RecoveryOf returns the recovery recorded for stream id, pending or withdrawn.
func (s *State) RecoveryOf(id uint64) (Recovery, bool) {
	e, ok := s.streams[id]
	if !ok || !e.hasRecovery {
		return Recovery{}, false
	}
	r := e.recovery
	r.Members = slices.Clone(r.Members)
	return r, true
}

// Recoveries returns every recorded recovery, pending and withdrawn, in id order.
func (s *State) Recoveries() []Recovery {
	var out []Recovery
	for _, id := range sortedKeys(s.streams) {
		if r, ok := s.RecoveryOf(id); ok {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b Recovery) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// sortedKeys returns m's keys in ascending order: every walk over a map in this package goes through
// it, so nothing depends on Go's map order.
func sortedKeys[K uint16 | uint64 | string, V any](m map[K]V) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
