package meta

import (
	"fmt"
	"slices"

	"github.com/ringstream/ringstream/wire"
)

// OpKind names an op in its encoding. The numbers are part of the replicated log format: never reuse
// or renumber one.
type OpKind uint8

const (
	OpRegisterNode     OpKind = 1
	OpDecommissionNode OpKind = 2
	OpCreateStream     OpKind = 3
	OpDeleteStream     OpKind = 4
	OpSetAssignment    OpKind = 5
	OpRecordRecovery   OpKind = 6
	OpWithdrawRecovery OpKind = 7
	OpCommitRecovery   OpKind = 8
	OpAcceptOwnerLoss  OpKind = 9
	OpRecordRecoveries OpKind = 10
	OpCommitRecoveries OpKind = 11
	OpSetAssignments   OpKind = 12
	OpCreateStreams    OpKind = 13
	OpDeleteStreams    OpKind = 14
)

func (k OpKind) String() string {
	switch k {
	case OpRegisterNode:
		return "register_node"
	case OpDecommissionNode:
		return "decommission_node"
	case OpCreateStream:
		return "create_stream"
	case OpDeleteStream:
		return "delete_stream"
	case OpSetAssignment:
		return "set_assignment"
	case OpRecordRecovery:
		return "record_recovery"
	case OpWithdrawRecovery:
		return "withdraw_recovery"
	case OpCommitRecovery:
		return "commit_recovery"
	case OpAcceptOwnerLoss:
		return "accept_owner_loss"
	case OpRecordRecoveries:
		return "record_recoveries"
	case OpCommitRecoveries:
		return "commit_recoveries"
	case OpSetAssignments:
		return "set_assignments"
	case OpCreateStreams:
		return "create_streams"
	case OpDeleteStreams:
		return "delete_streams"
	default:
		return fmt.Sprintf("op(%d)", uint8(k))
	}
}

// Limits every op and snapshot is checked against.
const (
	// CopiesMax bounds E, an assignment's copy set and a recovery's proposed members (wire's rule).
	CopiesMax = wire.CopiesMax
	// NameBytesMax bounds a stream name (wire's rule); AddressBytesMax bounds a node address.
	NameBytesMax    = wire.NameSizeMax
	AddressBytesMax = 255
)

// Op is one change to the metadata state. Each op kind is a struct below; AppendOp encodes one and
// DecodeOp reads it back. Validate checks what an op must satisfy on its own, without the state;
// Apply checks it again on decoded input and then checks the op's guards against the state.
type Op interface {
	Kind() OpKind
	Validate() error
	appendBody(dst []byte) []byte
}

// RegisterNode adds a node, or changes the address of a registered one (a node may come back on a
// new address). Guard: the node was never decommissioned.
type RegisterNode struct {
	Node    uint16
	Address string
}

// DecommissionNode retires a node for good. Guards: the node is registered, and no assignment and no
// recovery names it.
type DecommissionNode struct {
	Node uint16
}

// CreateStream creates a stream with its first assignment (epoch 1) on Owner and Followers, stamped
// with Stamped. A name deleted before gets its old id back with the next incarnation. Guards: the
// name is not in use; every member is a registered node. Whether E fits the live nodes is the
// controller's business.
type CreateStream struct {
	Name      string
	Copies    uint8
	Policy    Policy
	Owner     uint16
	Followers []uint16 // ascending
	Stamped   Policy
}

// DeleteStream deletes a stream with its assignment, its history starts and any recovery, so a
// stream created again under the name inherits none of them. Guard: the stream is live at Incarnation.
type DeleteStream struct {
	Stream      uint64
	Incarnation uint32
}

// SetAssignment is the change that needs no recovery (stream-failover spec: a change that keeps the
// owner and every follower and needs no more copies to confirm): it keeps Owner, keeps every follower,
// may add followers, and its W must not exceed the current one. It moves the assignment to
// ExpectedEpoch+1. Guards: the stream is live at Incarnation, its epoch is ExpectedEpoch, no recovery
// is recorded, every member is registered, and the change is one that needs no recovery.
type SetAssignment struct {
	Stream        uint64
	Incarnation   uint32
	ExpectedEpoch uint32
	Owner         uint16
	Followers     []uint16 // ascending
	Policy        Policy
}

// RecordRecovery records a pending recovery of the stream's assignment at ExpectedEpoch. The
// recovery's id is the op number it is applied at; its seal threshold comes from SealThreshold over
// the current assignment. Guards: the stream is live at Incarnation, its epoch is ExpectedEpoch, and
// either no recovery is recorded (Replaces is 0) or the recorded one is withdrawn and has id Replaces.
type RecordRecovery struct {
	Stream        uint64
	Incarnation   uint32
	ExpectedEpoch uint32
	Replaces      uint64
	ProposedOwner uint16
	Members       []uint16 // ascending, ProposedOwner included
	Policy        Policy   // to stamp on the assignment the recovery commits
	Reason        RecoveryReason
}

// WithdrawRecovery stops a pending recovery; it stays listed as withdrawn until replaced. Guard: the
// stream's recovery is pending with id Recovery.
type WithdrawRecovery struct {
	Stream      uint64
	Incarnation uint32
	Recovery    uint64
}

// CommitRecovery is the one guarded write that ends a recovery: the assignment moves to epoch+1 with
// Owner, the other Sealed copies and the members the proposal added as followers; the recovery is
// cleared; {epoch+1, RecordTail, CursorTail, Owner} is appended to the history starts. Guards: the
// stream's recovery is pending with id Recovery, the epoch is ExpectedEpoch, the starts version is
// ExpectedStartsVersion. Checks: Sealed are copies of the current assignment, at least R of them,
// Owner among them and registered, and RecordTail is not below the latest history start.
type CommitRecovery struct {
	Stream                uint64
	Incarnation           uint32
	Recovery              uint64
	ExpectedEpoch         uint32
	ExpectedStartsVersion uint64
	Owner                 uint16
	RecordTail            uint64
	CursorTail            uint64
	Sealed                []uint16 // ascending, Owner included
}

// AcceptOwnerLoss is the operator's move of a stream without a seal: the assignment moves to epoch+1
// with Owner and the recovery's other proposed members as followers, and the recovery is cleared. The
// history start is Owner's tails as it last published them in heartbeats; when TailsPublished is
// false no start is recorded and the result says so. Guard: the stream's recovery is pending with id
// Recovery. Check: Owner is a registered proposed member.
type AcceptOwnerLoss struct {
	Stream         uint64
	Incarnation    uint32
	Recovery       uint64
	Owner          uint16
	TailsPublished bool
	RecordTail     uint64
	CursorTail     uint64
}

func (RegisterNode) Kind() OpKind     { return OpRegisterNode }
func (DecommissionNode) Kind() OpKind { return OpDecommissionNode }
func (CreateStream) Kind() OpKind     { return OpCreateStream }
func (DeleteStream) Kind() OpKind     { return OpDeleteStream }
func (SetAssignment) Kind() OpKind    { return OpSetAssignment }
func (RecordRecovery) Kind() OpKind   { return OpRecordRecovery }
func (WithdrawRecovery) Kind() OpKind { return OpWithdrawRecovery }
func (CommitRecovery) Kind() OpKind   { return OpCommitRecovery }
func (AcceptOwnerLoss) Kind() OpKind  { return OpAcceptOwnerLoss }

func (o RegisterNode) Validate() error {
	if o.Node == 0 {
		return fmt.Errorf("%w: node id 0", ErrOpInvalid)
	}
	if len(o.Address) == 0 || len(o.Address) > AddressBytesMax {
		return fmt.Errorf("%w: address of %d bytes (1..%d)", ErrOpInvalid, len(o.Address), AddressBytesMax)
	}
	return nil
}

func (o DecommissionNode) Validate() error {
	if o.Node == 0 {
		return fmt.Errorf("%w: node id 0", ErrOpInvalid)
	}
	return nil
}

func (o CreateStream) Validate() error {
	if err := ValidateStreamName(o.Name); err != nil {
		return err
	}
	if err := wire.ValidateCopies(o.Copies, 0); err != nil {
		return fmt.Errorf("%w: %w", ErrOpInvalid, err)
	}
	if err := o.Policy.Validate(); err != nil {
		return fmt.Errorf("%w: stream policy: %w", ErrOpInvalid, err)
	}
	if o.Policy.Kind == PolicyUnset {
		return fmt.Errorf("%w: a new stream needs a policy (the controller fills in the cluster default)", ErrOpInvalid)
	}
	if err := o.Stamped.Validate(); err != nil {
		return fmt.Errorf("%w: stamped policy: %w", ErrOpInvalid, err)
	}
	return validateCopySet(o.Owner, o.Followers)
}

func (o DeleteStream) Validate() error {
	return validateStreamRef(o.Stream, o.Incarnation)
}

func (o SetAssignment) Validate() error {
	if err := validateStreamRef(o.Stream, o.Incarnation); err != nil {
		return err
	}
	if o.ExpectedEpoch == 0 {
		return fmt.Errorf("%w: expected epoch 0", ErrOpInvalid)
	}
	if err := o.Policy.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrOpInvalid, err)
	}
	return validateCopySet(o.Owner, o.Followers)
}

func (o RecordRecovery) Validate() error {
	if err := validateStreamRef(o.Stream, o.Incarnation); err != nil {
		return err
	}
	if o.ExpectedEpoch == 0 {
		return fmt.Errorf("%w: expected epoch 0", ErrOpInvalid)
	}
	if err := o.Policy.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrOpInvalid, err)
	}
	if o.Reason == 0 || o.Reason > reasonMax {
		return fmt.Errorf("%w: unknown recovery reason %d", ErrOpInvalid, o.Reason)
	}
	if err := validateNodeSet(o.Members); err != nil {
		return fmt.Errorf("members: %w", err)
	}
	if !slices.Contains(o.Members, o.ProposedOwner) {
		return fmt.Errorf("%w: proposed owner %d is not a proposed member", ErrOpInvalid, o.ProposedOwner)
	}
	return nil
}

func (o WithdrawRecovery) Validate() error {
	if err := validateStreamRef(o.Stream, o.Incarnation); err != nil {
		return err
	}
	if o.Recovery == 0 {
		return fmt.Errorf("%w: recovery id 0", ErrOpInvalid)
	}
	return nil
}

func (o CommitRecovery) Validate() error {
	if err := validateStreamRef(o.Stream, o.Incarnation); err != nil {
		return err
	}
	if o.Recovery == 0 {
		return fmt.Errorf("%w: recovery id 0", ErrOpInvalid)
	}
	if o.ExpectedEpoch == 0 {
		return fmt.Errorf("%w: expected epoch 0", ErrOpInvalid)
	}
	if err := validateNodeSet(o.Sealed); err != nil {
		return fmt.Errorf("sealed: %w", err)
	}
	if !slices.Contains(o.Sealed, o.Owner) {
		return fmt.Errorf("%w: owner %d is not a sealed copy", ErrOpInvalid, o.Owner)
	}
	return nil
}

func (o AcceptOwnerLoss) Validate() error {
	if err := validateStreamRef(o.Stream, o.Incarnation); err != nil {
		return err
	}
	if o.Recovery == 0 {
		return fmt.Errorf("%w: recovery id 0", ErrOpInvalid)
	}
	if o.Owner == 0 {
		return fmt.Errorf("%w: owner node id 0", ErrOpInvalid)
	}
	if !o.TailsPublished && (o.RecordTail != 0 || o.CursorTail != 0) {
		return fmt.Errorf("%w: tails given without tails published", ErrOpInvalid)
	}
	return nil
}

// ValidateStreamName checks a stream name against the one name rule (wire.StreamNameRule, in
// wire.ValidateStreamName): the error matches ErrOpInvalid and the *wire.RuleError.
func ValidateStreamName(name string) error {
	if err := wire.ValidateStreamName(name); err != nil {
		return fmt.Errorf("%w: %w", ErrOpInvalid, err)
	}
	return nil
}

func validateStreamRef(stream uint64, incarnation uint32) error {
	if stream == 0 {
		return fmt.Errorf("%w: stream id 0", ErrOpInvalid)
	}
	if incarnation == 0 {
		return fmt.Errorf("%w: incarnation 0", ErrOpInvalid)
	}
	return nil
}

// validateNodeSet checks a list of 1..CopiesMax node ids, none 0, strictly ascending.
func validateNodeSet(nodes []uint16) error {
	if len(nodes) == 0 || len(nodes) > CopiesMax {
		return fmt.Errorf("%w: %d nodes (1..%d)", ErrOpInvalid, len(nodes), CopiesMax)
	}
	for i, n := range nodes {
		if n == 0 {
			return fmt.Errorf("%w: node id 0", ErrOpInvalid)
		}
		if i > 0 && nodes[i-1] >= n {
			return fmt.Errorf("%w: node ids not strictly ascending", ErrOpInvalid)
		}
	}
	return nil
}

// validateCopySet checks an owner and its followers: owner not 0, followers strictly ascending, none 0
// and none the owner, CopiesMax copies at most.
func validateCopySet(owner uint16, followers []uint16) error {
	if owner == 0 {
		return fmt.Errorf("%w: owner node id 0", ErrOpInvalid)
	}
	if 1+len(followers) > CopiesMax {
		return fmt.Errorf("%w: %d copies (at most %d)", ErrOpInvalid, 1+len(followers), CopiesMax)
	}
	for i, f := range followers {
		if f == 0 {
			return fmt.Errorf("%w: follower node id 0", ErrOpInvalid)
		}
		if f == owner {
			return fmt.Errorf("%w: owner %d is also a follower", ErrOpInvalid, owner)
		}
		if i > 0 && followers[i-1] >= f {
			return fmt.Errorf("%w: followers not strictly ascending", ErrOpInvalid)
		}
	}
	return nil
}
