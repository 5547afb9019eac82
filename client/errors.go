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
	// ErrUnknownFormat: a fetched batch's header names a record format (its version) this client does
	// not read; the message names it. The batch is intact, so it is not ErrCorruptBatch: it was written by
	// a newer producer, and reading it as either known format would return garbage.
	ErrUnknownFormat = errors.New("client: batch of an unknown record format")
	// ErrRecordTooLarge: a record does not fit in one batch of ProducerConfig.BatchBytesMax.
	ErrRecordTooLarge = errors.New("client: record too large")
	// ErrInvalidName: a stream or consumer name breaks wire.StreamNameRule or wire.ConsumerNameRule
	// (1 to 255 bytes of [A-Za-z0-9._-], not "." or ".."); checked before anything is sent, and the
	// sentinel of a node's CodeBadStreamName and CodeBadConsumerName.
	ErrInvalidName = errors.New("client: invalid name")

	// Sentinels of the node's refusals (wire.ErrorCode), matched by *Error.
	ErrNotOwner         = errors.New("client: node does not own the stream")
	ErrUnknownStream    = errors.New("client: unknown stream")
	ErrStreamExists     = errors.New("client: stream exists")
	ErrInvalidRequest   = errors.New("client: invalid request")
	ErrUnavailable      = errors.New("client: stream unavailable")
	ErrFenced           = errors.New("client: copy fenced by a newer epoch")
	ErrOverloaded       = errors.New("client: node overloaded")
	ErrInternal         = errors.New("client: internal error on the node")
	ErrStaleIncarnation = errors.New("client: stale stream incarnation")
	ErrBatchTooLarge    = errors.New("client: batch too large for the stream")
	ErrSequenceGap      = errors.New("client: producer sequence gap")
	ErrLogFailed        = errors.New("client: the stream copy's log failed")
	// ErrNotYet: the node is in a passing state (a new incarnation's copy opening, a metadata primary
	// being elected); returned only once the retries ran out.
	ErrNotYet = errors.New("client: not yet: the node is in a passing state")
	// Sentinels of the refusals of a value that breaks one of wire's rules (rules.go). Each also
	// matches ErrInvalidRequest, and is checked by the client before it sends, where it can be.
	ErrInvalidCopies     = errors.New("client: invalid copy count")
	ErrInvalidPolicy     = errors.New("client: invalid confirm policy")
	ErrInvalidCount      = errors.New("client: invalid count")
	ErrInvalidSize       = errors.New("client: invalid size")
	ErrInvalidFormat     = errors.New("client: invalid record format")
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
	case wire.CodeNotYet:
		return ErrNotYet
	case wire.CodeBadStreamName, wire.CodeBadConsumerName:
		return ErrInvalidName
	case wire.CodeBadCopies:
		return ErrInvalidCopies
	case wire.CodeBadPolicy:
		return ErrInvalidPolicy
	case wire.CodeBadCount:
		return ErrInvalidCount
	case wire.CodeBadSize:
		return ErrInvalidSize
	case wire.CodeBadFormat:
		return ErrInvalidFormat
	}
	return nil
}

// ruleCode reports whether c is the refusal of a value that breaks one of wire's rules.
func ruleCode(c wire.ErrorCode) bool {
	return c >= wire.CodeBadStreamName && c <= wire.CodeBadSize || c == wire.CodeBadFormat
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
	if e.Node != 0 {
		s = fmt.Sprintf("%s (node %d at %s, code %d)", s, e.Node, e.Addr, e.Code)
	} else {
		s = fmt.Sprintf("%s (code %d)", s, e.Code) // one name's outcome in a batched reply
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// Is matches the sentinel of e's code; a rule's refusal also matches ErrInvalidRequest.
func (e *Error) Is(target error) bool {
	if target == ErrInvalidRequest && ruleCode(e.Code) {
		return true
	}
	sent := codeSentinel(e.Code)
	return sent != nil && sent == target
}

// retryable reports whether a refusal may clear by itself (a failover, a full queue, a passing state),
// and whether the stream's route must be looked up again first. CodeNotYet is retried on the same
// route: the node that said it holds the route's copy, or will. CodeUnknownStream and the rules'
// refusals are final.
func retryable(code wire.ErrorCode) (retry, relookup bool) {
	switch code {
	case wire.CodeNotOwner, wire.CodeFenced, wire.CodeStaleIncarnation, wire.CodeLogFailed, wire.CodeUnavailable:
		return true, true
	case wire.CodeOverloaded, wire.CodeNotYet:
		return true, false
	}
	return false, false
}
