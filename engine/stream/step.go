package stream

import (
	"github.com/ringstream/ringstream/wire"
)

// Kind says which message a Message holds.
type Kind uint8

const (
	KindPrepare      Kind = 1 // wire.StreamPrepare from the owner
	KindPrepareOK    Kind = 2 // wire.StreamPrepareOK (and its log epochs) from a follower
	KindProduce      Kind = 3
	KindFetch        Kind = 4
	KindCommitCursor Kind = 5
	KindGetCursor    Kind = 6
	KindListCursors  Kind = 7 // wire.ListCursors in CursorList
	KindDeleteCursor Kind = 8 // wire.CursorRequest in Cursor
)

// Message is one input for Step: a replication message from node From, or a client request whose
// replies go to the host's Client. Only the field of Kind is read. Byte slices alias the frame the
// host received: it keeps them until it has carried out the next Ready's Appends.
type Message struct {
	Kind       Kind
	From       uint16
	Client     uint64
	Prepare    wire.StreamPrepare
	PrepareOK  wire.StreamPrepareOK
	Epochs     wire.LogEpochs
	Produce    wire.Produce
	Fetch      wire.Fetch
	Cursor     wire.CursorRequest
	CursorList wire.ListCursors
}

// Step takes one message. A message the copy cannot use (stale, for another copy, from a node that
// is not the owner) is counted in Stats and dropped; a client request it refuses is answered with an
// error reply naming the cause.
func (c *Copy) Step(m *Message) {
	switch m.Kind {
	case KindPrepare:
		c.onPrepare(m.From, &m.Prepare)
	case KindPrepareOK:
		c.onPrepareOK(m.From, &m.PrepareOK, m.Epochs)
	case KindProduce:
		c.onProduce(m.Client, &m.Produce)
	case KindFetch:
		c.onFetch(m.Client, &m.Fetch)
	case KindCommitCursor:
		c.onCommitCursor(m.Client, &m.Cursor)
	case KindGetCursor:
		c.onGetCursor(m.Client, &m.Cursor)
	case KindListCursors:
		c.onListCursors(m.Client, &m.CursorList)
	case KindDeleteCursor:
		c.onDeleteCursor(m.Client, &m.Cursor)
	default:
		c.stats.Ignored[IgnoreUnknownKind]++
	}
}

// Refusal texts. Replies carry them copied into the effects' reused text buffer, so a refusal
// allocates nothing in steady state.
const (
	msgOpening        = "stream copy is opening"
	msgNotOwner       = "this node does not own the stream"
	msgUnknownStream  = "no copy of that stream or incarnation here"
	msgStale          = "the request names an older incarnation"
	msgSealed         = "the copy is sealed at a newer epoch"
	msgLogFailed      = "the copy's log failed; it serves nothing until reopened"
	msgNotReady       = "the owner's epoch is not durable yet"
	msgRestarted      = "the owner restarted within its epoch and waits for a new assignment"
	msgQuorumLost     = "the owner heard no quorum of its copies within commit_heartbeat_timeout (R24)"
	msgReassigned     = "the copy is taking a new assignment"
	msgNotProven      = "the new owner has not yet confirmed the tail it took over; retry"
	msgTooLarge       = "batch above the stream's batch limit"
	msgOverloaded     = "too many produces wait for confirmation"
	msgSequenceGap    = "producer sequence skips ahead of the last appended batch"
	msgSequenceOld    = "producer sequence older than the producer's remembered batches"
	msgProducerFenced = "kafka producer epoch older than the producer's last appended batch's"
	msgFetchesFull    = "too many fetches wait on this stream"
	msgBelowHead      = "offset below the retained head"
	msgCursorTooFar   = "cursor past the confirmed tail"
	msgDeletesFull    = "too many cursor deletes wait for their copies"
	msgReadFailed     = "reading the log failed"
	msgPendingTooMany = "too many bytes wait for the log"
)

// IgnoreReason names why a message was dropped.
type IgnoreReason uint8

const (
	IgnoreUnknownKind     IgnoreReason = iota // a Kind Step does not know
	IgnoreWrongStream                         // another stream or incarnation
	IgnoreNotFromOwner                        // a prepare from a node that is not the owner
	IgnoreNotFromFollower                     // a prepare-ok from a node that is not a follower
	IgnoreRole                                // the copy's role does not take this message
	IgnoreNewerEpoch                          // a prepare of an epoch this copy was not assigned yet
	IgnoreOlderEpoch                          // a prepare-ok of an older epoch
	IgnoreEpochPending                        // the copy's log-epoch entry is not durable yet
	IgnoreFailed                              // the log failed
	IgnoreStaleRead                           // a read completion for a reset follower or a finished fetch
	IgnoreStaleFollower                       // a follower answered that it is at a newer epoch
	ignoreReasons
)

// Refusal names why a follower refused a prepare. Each refusal leaves the log unchanged.
type Refusal uint8

const (
	RefuseGap            Refusal = iota // the prepare starts past this copy's tail
	RefuseWrongPrevEpoch                // the record before the prepare has another epoch here
	RefuseBadBatch                      // a batch does not decode (checksum, lengths) or breaks the prepare's framing
	RefuseOversize                      // a batch's payload is above BatchBytesMax
	RefuseDivergent                     // a batch this copy already holds has another epoch here
	RefuseBusy                          // the log holds PendingBytesMax not yet durable: no room now
	refusals
)

func (r Refusal) String() string {
	switch r {
	case RefuseGap:
		return "gap"
	case RefuseWrongPrevEpoch:
		return "wrong predecessor epoch"
	case RefuseBadBatch:
		return "bad batch"
	case RefuseOversize:
		return "oversize batch"
	case RefuseDivergent:
		return "divergent record"
	case RefuseBusy:
		return "no room in the log"
	}
	return "refusal(?)"
}

// Stats counts what the copy dropped and refused.
type Stats struct {
	Ignored     [ignoreReasons]uint64
	Refused     [refusals]uint64
	LastRefusal Refusal
	Probes      uint64 // probes sent to followers
	Resets      uint64 // followers probed again after ResendTicks of silence
	Resent      uint64 // follower: last answers sent again when the link to the owner came up
	Catchups    uint64 // catch-up reads issued
	Unsynced    uint64 // followers made live by sending what waits for the owner's group commit
	Duplicates  uint64 // produces answered from the producer table
	Diverged    uint64 // followers found holding a divergent suffix (left for the seal to cut)
}

// Stats returns the counters.
func (c *Copy) Stats() Stats { return c.stats }

// reply helpers.

func (c *Copy) refuse(client uint64, requestID uint64, code wire.ErrorCode, msg string) {
	r := Reply{Client: client, Kind: ReplyError}
	r.Error = wire.ErrorReply{RequestID: requestID, Stream: c.cfg.Stream, Code: code, Message: c.fx.addText(msg)}
	if code == wire.CodeNotOwner {
		r.Error.Owner = c.asg.Owner
	}
	c.fx.Replies = append(c.fx.Replies, r)
}

// refuseRequest checks what every client request needs: this stream and incarnation, an open copy
// that owns the stream at a durable epoch, and a log that has not failed. It answers the refusal
// itself and returns false.
func (c *Copy) refuseRequest(client, requestID, stream uint64, incarnation uint32) bool {
	code, msg := c.requestRefusal(stream, incarnation)
	if code == 0 {
		return true
	}
	c.refuse(client, requestID, code, msg)
	return false
}

// requestRefusal is refuseRequest's check: the code and message of the refusal, code 0 for none.
func (c *Copy) requestRefusal(stream uint64, incarnation uint32) (code wire.ErrorCode, msg string) {
	switch {
	case stream != c.cfg.Stream || incarnation > c.cfg.Incarnation:
		code, msg = wire.CodeUnknownStream, msgUnknownStream
	case incarnation != 0 && incarnation < c.cfg.Incarnation:
		code, msg = wire.CodeStaleIncarnation, msgStale
	case c.role == RoleOpening:
		code, msg = wire.CodeUnavailable, msgOpening
	case c.role == RoleSealed:
		code, msg = wire.CodeFenced, msgSealed
	case c.role == RoleFollower:
		code, msg = wire.CodeNotOwner, msgNotOwner
	case c.failed:
		code, msg = wire.CodeLogFailed, msgLogFailed
	case c.restarted:
		code, msg = wire.CodeUnavailable, msgRestarted
	case c.quorumLost:
		code, msg = wire.CodeUnavailable, msgQuorumLost
	case c.epochPending:
		code, msg = wire.CodeUnavailable, msgNotReady
	}
	return code, msg
}
