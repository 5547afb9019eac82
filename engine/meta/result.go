package meta

import (
	"encoding/binary"
	"fmt"

	"github.com/ringstream/ringstream/internal/assert"
)

// ResultCode is the outcome of applying one op. A code other than ResultOK and ResultOKNoStart means
// the op changed nothing but the applied op number. Each refusal names the guard or check that failed.
// The numbers are stable: VSR replies carry them to clients.
type ResultCode uint8

const (
	ResultOK ResultCode = 0
	// ResultOKNoStart: owner loss accepted, and no history start recorded since the new owner had
	// published no tails.
	ResultOKNoStart ResultCode = 1

	ResultMalformed              ResultCode = 10 // op bytes do not decode (or break the op's own rules)
	ResultNodeDecommissioned     ResultCode = 11 // the node was decommissioned and cannot come back
	ResultNodeNotRegistered      ResultCode = 12 // a node the op names is not registered
	ResultNodeInUse              ResultCode = 13 // an assignment or recovery still names the node
	ResultNameInUse              ResultCode = 14 // a live stream already has the name
	ResultStreamNotFound         ResultCode = 15 // no live stream has the id
	ResultIncarnationMismatch    ResultCode = 16 // the stream was deleted and created again since
	ResultEpochMismatch          ResultCode = 17 // the assignment is not at the expected epoch
	ResultEpochExhausted         ResultCode = 18 // the epoch cannot grow past 2^32-1
	ResultRecoveryRecorded       ResultCode = 19 // a recovery is recorded for the stream (pending, or withdrawn but not replaced)
	ResultRecoveryMismatch       ResultCode = 20 // the stream's recovery is not the one the op names
	ResultRecoveryNotPending     ResultCode = 21 // the named recovery was withdrawn
	ResultStartsVersionMismatch  ResultCode = 22 // the history starts changed since the decision
	ResultNeedsRecovery          ResultCode = 23 // the change drops the owner or a follower, or needs more copies to confirm
	ResultSealedNotCopy          ResultCode = 24 // a sealed node holds no copy under the assignment
	ResultTooFewSealed           ResultCode = 25 // fewer than R sealed copies
	ResultBelowConfirmedPrefix   ResultCode = 26 // the new owner's record tail is below the latest history start
	ResultOwnerNotProposedMember ResultCode = 27 // accept owner loss names an owner the recovery did not propose
	ResultTooManyCopies          ResultCode = 28 // the committed assignment would exceed CopiesMax copies
	ResultIDsExhausted           ResultCode = 29 // no stream id is left to give a new name
)

func (c ResultCode) String() string {
	switch c {
	case ResultOK:
		return "ok"
	case ResultOKNoStart:
		return "ok_no_start"
	case ResultMalformed:
		return "malformed"
	case ResultNodeDecommissioned:
		return "node_decommissioned"
	case ResultNodeNotRegistered:
		return "node_not_registered"
	case ResultNodeInUse:
		return "node_in_use"
	case ResultNameInUse:
		return "name_in_use"
	case ResultStreamNotFound:
		return "stream_not_found"
	case ResultIncarnationMismatch:
		return "incarnation_mismatch"
	case ResultEpochMismatch:
		return "epoch_mismatch"
	case ResultEpochExhausted:
		return "epoch_exhausted"
	case ResultRecoveryRecorded:
		return "recovery_recorded"
	case ResultRecoveryMismatch:
		return "recovery_mismatch"
	case ResultRecoveryNotPending:
		return "recovery_not_pending"
	case ResultStartsVersionMismatch:
		return "starts_version_mismatch"
	case ResultNeedsRecovery:
		return "needs_recovery"
	case ResultSealedNotCopy:
		return "sealed_not_copy"
	case ResultTooFewSealed:
		return "too_few_sealed"
	case ResultBelowConfirmedPrefix:
		return "below_confirmed_prefix"
	case ResultOwnerNotProposedMember:
		return "owner_not_proposed_member"
	case ResultTooManyCopies:
		return "too_many_copies"
	case ResultIDsExhausted:
		return "ids_exhausted"
	default:
		return fmt.Sprintf("result(%d)", uint8(c))
	}
}

// Result is what applying one op returns: a code and a message for people. Both are a function of
// the op and the state only, so every replica returns the same result for the same op.
//
// A batch op (RecordRecoveries, CommitRecoveries, SetAssignments) that decodes is applied entry by
// entry: its Code is ResultOK and Entries holds each entry's outcome, in entry order. An op refused
// whole (ResultMalformed) and every single op have no Entries.
type Result struct {
	Code    ResultCode
	Message string
	Entries []EntryResult
}

// EntryResult is the outcome of one entry of a batch op: the code its single op would have returned.
type EntryResult struct {
	Stream uint64
	Code   ResultCode
}

// OK reports whether the entry took effect.
func (e EntryResult) OK() bool { return e.Code == ResultOK || e.Code == ResultOKNoStart }

// Entry returns the outcome of stream's entry, when r is a batch op's result with one for it.
func (r Result) Entry(stream uint64) (EntryResult, bool) {
	for _, e := range r.Entries {
		if e.Stream == stream {
			return e, true
		}
	}
	return EntryResult{}, false
}

// OK reports whether the op took effect.
func (r Result) OK() bool { return r.Code == ResultOK || r.Code == ResultOKNoStart }

func (r Result) String() string { return r.Code.String() + ": " + r.Message }

func refuse(code ResultCode, format string, args ...any) Result {
	return Result{Code: code, Message: fmt.Sprintf(format, args...)}
}

func done(format string, args ...any) Result {
	return Result{Code: ResultOK, Message: fmt.Sprintf(format, args...)}
}

// ResultMessageBytesMax bounds the message AppendResult encodes; a longer one is cut there.
const ResultMessageBytesMax = 1024

// AppendResult appends r's encoding to dst: code u8 | message length u16 | message bytes, little
// endian, and for a batch op's result, entry count u16 | per entry stream u64 | code u8. A result
// without entries encodes as it did before batch ops existed. It is what Apply hands the replication
// layer for the client's reply.
func AppendResult(dst []byte, r Result) []byte {
	assert.True(len(r.Entries) <= BatchEntriesMax, "meta: result with more entries than a batch holds")
	msg := r.Message
	if len(msg) > ResultMessageBytesMax {
		msg = msg[:ResultMessageBytesMax]
	}
	dst = append(dst, uint8(r.Code))
	dst = binary.LittleEndian.AppendUint16(dst, uint16(len(msg)))
	dst = append(dst, msg...)
	if len(r.Entries) == 0 {
		return dst
	}
	dst = binary.LittleEndian.AppendUint16(dst, uint16(len(r.Entries)))
	for _, e := range r.Entries {
		dst = binary.LittleEndian.AppendUint64(dst, e.Stream)
		dst = append(dst, uint8(e.Code))
	}
	return dst
}

// DecodeResult reads a Result encoded by AppendResult (a client or controller reading its reply). It
// never panics; it returns ErrResult on bytes that are not exactly one result.
func DecodeResult(b []byte) (Result, error) {
	d := decoder{buf: b}
	code := ResultCode(d.u8())
	n := int(d.u16())
	msg := d.take(n)
	if d.short || n > ResultMessageBytesMax {
		return Result{}, fmt.Errorf("%w: %d bytes", ErrResult, len(b))
	}
	r := Result{Code: code, Message: string(msg)}
	if d.done() {
		return r, nil
	}
	count := int(d.u16())
	if count == 0 || count > BatchEntriesMax {
		return Result{}, fmt.Errorf("%w: %d entries (1..%d)", ErrResult, count, BatchEntriesMax)
	}
	r.Entries = make([]EntryResult, 0, count)
	for range count {
		r.Entries = append(r.Entries, EntryResult{Stream: d.u64(), Code: ResultCode(d.u8())})
	}
	if !d.done() {
		return Result{}, fmt.Errorf("%w: %d bytes", ErrResult, len(b))
	}
	return r, nil
}
