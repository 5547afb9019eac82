package client

import (
	"errors"
	"fmt"

	"github.com/ringstream/ringstream/wire"
)

// Sentinel errors. Each has one meaning; errors.Is matches them through every wrapping, and a node's
// refusal (*Error) matches the sentinel of its code.
var (
	// ErrClosed: the Client or the Producer was closed.
	ErrClosed = errors.New("client: closed")
	// ErrConfig: a Config, ProducerConfig or FetchOptions breaks a rule (the message names the field).
	ErrConfig = errors.New("client: invalid configuration")
	// ErrNoOwner: the cluster has no owner for the stream (a recovery is pending, or the owner's address
	// is unknown) and none appeared within the retries.
	ErrNoOwner = errors.New("client: the stream has no owner")
	// ErrOwnerUnreachable: the cluster's metadata names an owner for the stream, but the client could
	// not reach it (refused or lost connections, a silent node) within the retries: the owner's node is
	// down and the cluster has not moved the stream (a one-copy stream waits for its node).
	ErrOwnerUnreachable = errors.New("client: the stream's owner cannot be reached")
	// ErrProtocol: a node sent bytes that are not a valid reply (bad frame, checksum, wrong command or
	// request id, contents that break the protocol). The connection is closed.
	ErrProtocol = errors.New("client: protocol error from the node")
	// ErrCorruptBatch: a fetched batch or its records do not decode (checksum, framing, codec).
	ErrCorruptBatch = errors.New("client: corrupt record batch")
	// ErrRecordTooLarge: a record does not fit in one batch of ProducerConfig.BatchBytesMax.
	ErrRecordTooLarge = errors.New("client: record too large")
	// ErrInvalidName: a stream or consumer name is empty, longer than 255 bytes, not UTF-8 or holds a
	// control character.
	ErrInvalidName = errors.New("client: invalid name")

	// Sentinels of the node's refusals (wire.ErrorCode), matched by *Error.
	ErrNotOwner          = errors.New("client: node does not own the stream")
	ErrUnknownStream     = errors.New("client: unknown stream")
	ErrStreamExists      = errors.New("client: stream exists")
	ErrInvalidRequest    = errors.New("client: invalid request")
	ErrUnavailable       = errors.New("client: stream unavailable")
	ErrFenced            = errors.New("client: copy fenced by a newer epoch")
	ErrOverloaded        = errors.New("client: node overloaded")
	ErrInternal          = errors.New("client: internal error on the node")
	ErrStaleIncarnation  = errors.New("client: stale stream incarnation")
	ErrBatchTooLarge     = errors.New("client: batch too large for the stream")
	ErrSequenceGap       = errors.New("client: producer sequence gap")
	ErrLogFailed         = errors.New("client: the stream copy's log failed")
	errUnknownRefusalTxt = "client: node refused the request"
)

// codeErrors maps each wire.ErrorCode to its sentinel.
func codeSentinel(c wire.ErrorCode) error {
	switch c {
	case wire.CodeNotOwner:
		return ErrNotOwner
	case wire.CodeUnknownStream:
		return ErrUnknownStream
	case wire.CodeStreamExists:
		return ErrStreamExists
	case wire.CodeInvalidRequest:
		return ErrInvalidRequest
	case wire.CodeUnavailable:
		return ErrUnavailable
	case wire.CodeFenced:
		return ErrFenced
	case wire.CodeOverloaded:
		return ErrOverloaded
	case wire.CodeInternal:
		return ErrInternal
	case wire.CodeStaleIncarnation:
		return ErrStaleIncarnation
	case wire.CodeBatchTooLarge:
		return ErrBatchTooLarge
	case wire.CodeSequenceGap:
		return ErrSequenceGap
	case wire.CodeLogFailed:
		return ErrLogFailed
	}
	return nil
}

// Error is a node's refusal of a request (an ErrorReply). errors.Is(err, ErrUnknownStream) and the like
// match its Code.
type Error struct {
	Code    wire.ErrorCode
	Node    uint16 // the node that refused
	Addr    string // its client address
	Stream  uint64 // the stream the request addressed, or 0
	Owner   uint16 // with CodeNotOwner: the owner the node named, or 0
	Message string // the node's text
}

func (e *Error) Error() string {
	s := errUnknownRefusalTxt
	if sent := codeSentinel(e.Code); sent != nil {
		s = sent.Error()
	}
	s = fmt.Sprintf("%s (node %d at %s, code %d)", s, e.Node, e.Addr, e.Code)
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// Is matches the sentinel of e's code.
func (e *Error) Is(target error) bool {
	sent := codeSentinel(e.Code)
	return sent != nil && sent == target
}

// retryable reports whether a refusal may clear by itself (a failover, a full queue), and whether the
// stream's route must be looked up again first.
func retryable(code wire.ErrorCode) (retry, relookup bool) {
	switch code {
	case wire.CodeNotOwner, wire.CodeFenced, wire.CodeStaleIncarnation, wire.CodeLogFailed, wire.CodeUnavailable:
		return true, true
	case wire.CodeOverloaded:
		return true, false
	}
	return false, false
}
