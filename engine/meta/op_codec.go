package meta

import (
	"encoding/binary"
	"fmt"

	"github.com/ringstream/ringstream/internal/assert"
)

// opVersion is the op encoding version, the first byte of every encoded op. An op is
//
//	version u8 | kind u8 | the kind's fields, little endian, in struct order
//
// where a string is u8 length + bytes, a node list is u8 count + u16 ids, a policy is kind u8 + count
// u8, and a bool is one byte, 0 or 1. A batch op (RecordRecoveries, CommitRecoveries, SetAssignments)
// is a u16 entry count followed by each entry encoded as the body of its single op. Nothing may
// follow the last field.
const opVersion = 1

// EncodeOp checks op (Validate) and appends its encoding to dst. An op that breaks a rule is refused
// with Validate's error (matching ErrOpInvalid, and the wire rule it broke when there is one) and dst is
// returned unchanged. Every op built from what a client, an operator or a peer handed the node is
// encoded here before it is proposed, so an invalid op never reaches the log.
func EncodeOp(dst []byte, op Op) ([]byte, error) {
	if err := op.Validate(); err != nil {
		return dst, fmt.Errorf("%s: %w", op.Kind(), err)
	}
	dst = append(dst, opVersion, uint8(op.Kind()))
	return op.appendBody(dst), nil
}

// AppendOp is EncodeOp for an op the caller built from constants of its own (tests, the simulators):
// an op that breaks a rule there is a programmer error, so it panics.
func AppendOp(dst []byte, op Op) []byte {
	dst, err := EncodeOp(dst, op)
	assert.True(err == nil, "meta: encoding an invalid op built from constants")
	return dst
}

// DecodeOp reads one encoded op. It never panics: bytes from the log are input. A decoded op has
// passed Validate; its slices are its own, never aliasing b.
func DecodeOp(b []byte) (Op, error) {
	d := decoder{buf: b}
	version := d.u8()
	kind := OpKind(d.u8())
	if d.short {
		return nil, fmt.Errorf("%w: %d bytes, no op header", ErrOpShort, len(b))
	}
	if version != opVersion {
		return nil, fmt.Errorf("%w: %d", ErrOpVersion, version)
	}
	var op Op
	switch kind {
	case OpRegisterNode:
		op = RegisterNode{Node: d.u16(), Address: d.str()}
	case OpDecommissionNode:
		op = DecommissionNode{Node: d.u16()}
	case OpCreateStream:
		op = d.createStream()
	case OpDeleteStream:
		op = d.deleteStream()
	case OpSetAssignment:
		op = d.setAssignment()
	case OpRecordRecovery:
		op = d.recordRecovery()
	case OpWithdrawRecovery:
		op = WithdrawRecovery{Stream: d.u64(), Incarnation: d.u32(), Recovery: d.u64()}
	case OpCommitRecovery:
		op = d.commitRecovery()
	case OpAcceptOwnerLoss:
		o := AcceptOwnerLoss{Stream: d.u64(), Incarnation: d.u32(), Recovery: d.u64(), Owner: d.u16()}
		published := d.u8()
		o.RecordTail, o.CursorTail = d.u64(), d.u64()
		if published > 1 {
			return nil, fmt.Errorf("%w: tails-published byte %d", ErrOpInvalid, published)
		}
		o.TailsPublished = published == 1
		op = o
	case OpRecordRecoveries:
		op = RecordRecoveries{Entries: decodeEntries(&d, (*decoder).recordRecovery)}
	case OpCommitRecoveries:
		op = CommitRecoveries{Entries: decodeEntries(&d, (*decoder).commitRecovery)}
	case OpSetAssignments:
		op = SetAssignments{Entries: decodeEntries(&d, (*decoder).setAssignment)}
	case OpCreateStreams:
		op = CreateStreams{Entries: decodeEntries(&d, (*decoder).createStream)}
	case OpDeleteStreams:
		op = DeleteStreams{Entries: decodeEntries(&d, (*decoder).deleteStream)}
	default:
		return nil, fmt.Errorf("%w: %d", ErrOpKind, uint8(kind))
	}
	if d.short {
		return nil, fmt.Errorf("%w: %s", ErrOpShort, kind)
	}
	if !d.done() {
		return nil, fmt.Errorf("%w: %s, %d bytes past its end", ErrOpTrailing, kind, len(b)-d.off)
	}
	if err := op.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", kind, err)
	}
	return op, nil
}

func (d *decoder) setAssignment() SetAssignment {
	return SetAssignment{Stream: d.u64(), Incarnation: d.u32(), ExpectedEpoch: d.u32(), Owner: d.u16(),
		Followers: d.nodes(CopiesMax - 1), Policy: d.policy()}
}

func (d *decoder) recordRecovery() RecordRecovery {
	return RecordRecovery{Stream: d.u64(), Incarnation: d.u32(), ExpectedEpoch: d.u32(), Replaces: d.u64(),
		ProposedOwner: d.u16(), Members: d.nodes(CopiesMax), Policy: d.policy(), Reason: RecoveryReason(d.u8())}
}

func (d *decoder) commitRecovery() CommitRecovery {
	return CommitRecovery{Stream: d.u64(), Incarnation: d.u32(), Recovery: d.u64(), ExpectedEpoch: d.u32(),
		ExpectedStartsVersion: d.u64(), Owner: d.u16(), RecordTail: d.u64(), CursorTail: d.u64(),
		Sealed: d.nodes(CopiesMax)}
}

func (o RegisterNode) appendBody(dst []byte) []byte {
	dst = binary.LittleEndian.AppendUint16(dst, o.Node)
	return appendStr(dst, o.Address)
}

func (o DecommissionNode) appendBody(dst []byte) []byte {
	return binary.LittleEndian.AppendUint16(dst, o.Node)
}

func (o CreateStream) appendBody(dst []byte) []byte {
	dst = appendStr(dst, o.Name)
	dst = append(dst, o.Copies)
	dst = appendPolicy(dst, o.Policy)
	dst = binary.LittleEndian.AppendUint16(dst, o.Owner)
	dst = appendNodes(dst, o.Followers)
	return appendPolicy(dst, o.Stamped)
}

func (o DeleteStream) appendBody(dst []byte) []byte {
	dst = binary.LittleEndian.AppendUint64(dst, o.Stream)
	return binary.LittleEndian.AppendUint32(dst, o.Incarnation)
}

func (o SetAssignment) appendBody(dst []byte) []byte {
	dst = binary.LittleEndian.AppendUint64(dst, o.Stream)
	dst = binary.LittleEndian.AppendUint32(dst, o.Incarnation)
	dst = binary.LittleEndian.AppendUint32(dst, o.ExpectedEpoch)
	dst = binary.LittleEndian.AppendUint16(dst, o.Owner)
	dst = appendNodes(dst, o.Followers)
	return appendPolicy(dst, o.Policy)
}

func (o RecordRecovery) appendBody(dst []byte) []byte {
	dst = binary.LittleEndian.AppendUint64(dst, o.Stream)
	dst = binary.LittleEndian.AppendUint32(dst, o.Incarnation)
	dst = binary.LittleEndian.AppendUint32(dst, o.ExpectedEpoch)
	dst = binary.LittleEndian.AppendUint64(dst, o.Replaces)
	dst = binary.LittleEndian.AppendUint16(dst, o.ProposedOwner)
	dst = appendNodes(dst, o.Members)
	dst = appendPolicy(dst, o.Policy)
	return append(dst, uint8(o.Reason))
}

func (o WithdrawRecovery) appendBody(dst []byte) []byte {
	dst = binary.LittleEndian.AppendUint64(dst, o.Stream)
	dst = binary.LittleEndian.AppendUint32(dst, o.Incarnation)
	return binary.LittleEndian.AppendUint64(dst, o.Recovery)
}

func (o CommitRecovery) appendBody(dst []byte) []byte {
	dst = binary.LittleEndian.AppendUint64(dst, o.Stream)
	dst = binary.LittleEndian.AppendUint32(dst, o.Incarnation)
	dst = binary.LittleEndian.AppendUint64(dst, o.Recovery)
	dst = binary.LittleEndian.AppendUint32(dst, o.ExpectedEpoch)
	dst = binary.LittleEndian.AppendUint64(dst, o.ExpectedStartsVersion)
	dst = binary.LittleEndian.AppendUint16(dst, o.Owner)
	dst = binary.LittleEndian.AppendUint64(dst, o.RecordTail)
	dst = binary.LittleEndian.AppendUint64(dst, o.CursorTail)
	return appendNodes(dst, o.Sealed)
}

func (o AcceptOwnerLoss) appendBody(dst []byte) []byte {
	dst = binary.LittleEndian.AppendUint64(dst, o.Stream)
	dst = binary.LittleEndian.AppendUint32(dst, o.Incarnation)
	dst = binary.LittleEndian.AppendUint64(dst, o.Recovery)
	dst = binary.LittleEndian.AppendUint16(dst, o.Owner)
	published := uint8(0)
	if o.TailsPublished {
		published = 1
	}
	dst = append(dst, published)
	dst = binary.LittleEndian.AppendUint64(dst, o.RecordTail)
	return binary.LittleEndian.AppendUint64(dst, o.CursorTail)
}
