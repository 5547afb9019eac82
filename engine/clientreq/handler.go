package clientreq

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/ringstream/ringstream/engine/stream"
	"github.com/ringstream/ringstream/shard"
	"github.com/ringstream/ringstream/wire"
)

// Handler is the node's shard.ClientHandler: metadata requests (create, delete, list, lookup)
// go to the metadata service (service.go); data requests (produce, fetch, cursors) go to the
// copy of their stream on the shard they arrive on (ShardOf), whose replies come back through
// StreamReply. Every request is answered exactly once.
type Handler struct {
	n        *node
	shards   []clientShard
	produces atomic.Int64  // produces handed to a copy and not yet answered
	received atomic.Uint64 // client requests received
	draining atomic.Bool   // Shutdown: new produces are refused
}

// clientShard is one shard's table of data requests in flight, used on that shard's goroutine only.
// A request's token (stream.Message.Client) is its slot index and the slot's generation, so a reply
// for a slot reused since (it never happens: a copy answers each request once) cannot reach the
// wrong connection.
type clientShard struct {
	slots []clientSlot
	free  []uint32
	msg   stream.Message
	held  []heldProduce    // produces held for the end of the turn (batch.go)
	arena []byte           // their payloads
	msgs  []stream.Message // scratch for StepAll
	frame []byte
	retry []pendingReply // replies the cross-shard queue refused, sent again on a later turn
	armed bool           // a retry is queued with Node.Run
}

type clientSlot struct {
	req   shard.ClientRequest
	start int64 // time.Now().UnixNano() when the request reached the copy
	// A produce traced by engine/stagetrace: when it was decoded (CLOCK_MONOTONIC ns, 0: not
	// traced), its producer id and sequence.
	traced        int64
	producer, seq uint64
	gen           uint32
	kind          wire.Command
	used          bool
	produce       bool
}

type pendingReply struct {
	req   shard.ClientRequest
	frame []byte
}

func newHandler(n *node) *Handler {
	return &Handler{n: n, shards: make([]clientShard, n.cfg.ShardCount)}
}

// OnClientRequest implements shard.ClientHandler.
func (c *Handler) OnClientRequest(s *shard.Shard, req shard.ClientRequest, h *wire.Header, body []byte) {
	c.received.Add(1)
	c.n.metrics.countRequest(h.Command)
	switch h.Command {
	case wire.CommandCreateStream, wire.CommandDeleteStream, wire.CommandListStreams, wire.CommandLookupStream,
		wire.CommandCreateStreams, wire.CommandDeleteStreams:
		c.n.metaSvc.submitClient(s, req, h, body)
	case wire.CommandProduce, wire.CommandFetch, wire.CommandCommitCursor, wire.CommandGetCursor,
		wire.CommandListCursors, wire.CommandDeleteCursor:
		c.data(s, req, h, body)
	default:
		c.refuse(s, req, wire.CodeInvalidRequest, 0, fmt.Sprintf("%s is not a client request", h.Command))
	}
}

// data hands a produce, fetch or cursor request to the stream's copy on s.
func (c *Handler) data(s *shard.Shard, req shard.ClientRequest, h *wire.Header, body []byte) {
	cs := &c.shards[s.Index()]
	m := &cs.msg
	*m = stream.Message{}
	var err error
	switch h.Command {
	case wire.CommandProduce:
		if c.draining.Load() {
			c.refuse(s, req, wire.CodeUnavailable, 0, fmt.Sprintf("node %d is shutting down; produce to the stream's next owner", c.n.id))
			return
		}
		m.Kind = stream.KindProduce
		m.Produce, err = wire.DecodeProduce(h, body)
	case wire.CommandFetch:
		m.Kind = stream.KindFetch
		m.Fetch, err = wire.DecodeFetch(h, body)
	case wire.CommandCommitCursor:
		m.Kind = stream.KindCommitCursor
		m.Cursor, err = wire.DecodeCommitCursor(h, body)
	case wire.CommandGetCursor:
		m.Kind = stream.KindGetCursor
		m.Cursor, err = wire.DecodeGetCursor(h, body)
	case wire.CommandListCursors:
		m.Kind = stream.KindListCursors
		m.CursorList, err = wire.DecodeListCursors(h, body)
	case wire.CommandDeleteCursor:
		m.Kind = stream.KindDeleteCursor
		m.Cursor, err = wire.DecodeDeleteCursor(h, body)
	}
	if err != nil {
		c.refuse(s, req, wire.CodeOf(err), 0, err.Error())
		return
	}
	if have, ok := c.n.streams.Incarnation(s, req.Stream); ok && h.Incarnation > have {
		// The copy here is an older incarnation's (being deleted, or the delete not applied yet): the
		// metadata says whether the one asked for exists (not yet here) or not (final).
		c.noCopy(s, req, h.Incarnation)
		return
	}
	tok := cs.acquire(req, h.Command)
	m.Client = tok
	if h.Command == wire.CommandProduce {
		if tr := c.n.stages.Shard(s.Index()); tr.On() {
			sl := &cs.slots[uint32(tok)]
			sl.traced, sl.producer, sl.seq = tr.Now(), m.Produce.ProducerID, m.Produce.Sequence
		}
		c.produces.Add(1)
		c.holdProduce(s, cs, req, m)
		return
	}
	if err := c.n.streams.Step(s, req.Stream, m); err != nil {
		cs.take(tok)
		c.noCopy(s, req, h.Incarnation)
	}
}

// acquire takes a slot for req and returns its token.
func (cs *clientShard) acquire(req shard.ClientRequest, kind wire.Command) uint64 {
	var i uint32
	if n := len(cs.free); n > 0 {
		i = cs.free[n-1]
		cs.free = cs.free[:n-1]
	} else {
		cs.slots = append(cs.slots, clientSlot{})
		i = uint32(len(cs.slots) - 1)
	}
	sl := &cs.slots[i]
	sl.gen++
	sl.req, sl.kind, sl.used, sl.produce = req, kind, true, kind == wire.CommandProduce
	sl.traced = 0
	sl.start = time.Now().UnixNano()
	return uint64(sl.gen)<<32 | uint64(i)
}

// take frees the slot of tok and returns it; false when tok names no slot in use.
func (cs *clientShard) take(tok uint64) (clientSlot, bool) {
	i := uint32(tok)
	if int(i) >= len(cs.slots) {
		return clientSlot{}, false
	}
	sl := &cs.slots[i]
	if !sl.used || sl.gen != uint32(tok>>32) {
		return clientSlot{}, false
	}
	out := *sl
	sl.used = false
	cs.free = append(cs.free, i)
	return out, true
}

// StreamReply is streamhost.Config.Replies: a copy's answer, on the shard goroutine of its stream.
// The reply's slices alias the host's buffers: it is encoded before this returns.
func (c *Handler) StreamReply(streamID uint64, r *stream.Reply) {
	i := shard.ShardOf(streamID, len(c.shards))
	cs := &c.shards[i]
	sl, ok := cs.take(r.Client)
	if !ok {
		c.n.metrics.orphanReplies.Inc()
		return
	}
	if sl.produce {
		c.produces.Add(-1)
	}
	rid := sl.req.RequestID
	switch r.Kind {
	case stream.ReplyProduce:
		r.Produce.RequestID = rid
		cs.frame = wire.AppendProduceReply(cs.frame[:0], c.n.from, &r.Produce)
	case stream.ReplyFetch:
		r.Fetch.RequestID = rid
		cs.frame = wire.AppendFetchReply(cs.frame[:0], c.n.from, &r.Fetch)
	case stream.ReplyCommitCursor:
		r.Cursor.RequestID = rid
		cs.frame = wire.AppendCommitCursorReply(cs.frame[:0], c.n.from, &r.Cursor)
	case stream.ReplyGetCursor:
		r.Cursor.RequestID = rid
		cs.frame = wire.AppendGetCursorReply(cs.frame[:0], c.n.from, &r.Cursor)
	case stream.ReplyListCursors:
		r.CursorList.RequestID = rid
		cs.frame = wire.AppendListCursorsReply(cs.frame[:0], c.n.from, &r.CursorList, r.Cursors)
	case stream.ReplyDeleteCursor:
		r.Cursor.RequestID = rid
		cs.frame = wire.AppendDeleteCursorReply(cs.frame[:0], c.n.from, &r.Cursor)
	default:
		r.Error.RequestID, r.Error.Stream = rid, streamID
		cs.frame = wire.AppendErrorReply(cs.frame[:0], c.n.from, &r.Error)
		c.n.metrics.countError(r.Error.Code)
	}
	if r.Kind != stream.ReplyError {
		c.n.metrics.observe(sl.kind, sl.start)
	}
	c.send(c.n.shard.Shards()[i], cs, sl.req, cs.frame)
	if sl.traced != 0 && r.Kind == stream.ReplyProduce {
		if tr := c.n.stages.Shard(i); tr.On() {
			tr.Request(streamID, sl.producer, sl.seq, sl.traced, tr.Now())
		}
	}
}

// send hands frame to req's connection from shard s; a full cross-shard queue keeps a copy for a
// later turn.
func (c *Handler) send(s *shard.Shard, cs *clientShard, req shard.ClientRequest, frame []byte) {
	err := s.ReplyClient(req, frame)
	if err == nil {
		return
	}
	if !errors.Is(err, shard.ErrOutboxFull) {
		c.n.metrics.repliesLost.Inc()
		return
	}
	cs.retry = append(cs.retry, pendingReply{req: req, frame: append([]byte(nil), frame...)})
	c.armRetry(s.Index(), cs)
}

func (c *Handler) armRetry(i int, cs *clientShard) {
	if cs.armed {
		return
	}
	cs.armed = true
	if err := c.n.shard.Run(i, func(s *shard.Shard) { c.retry(s, cs) }); err != nil {
		cs.armed = false // the node is stopping: the replies go with its connections
	}
}

// retry sends the replies a full queue refused, in order, until the queue refuses again.
func (c *Handler) retry(s *shard.Shard, cs *clientShard) {
	cs.armed = false
	k := 0
	for ; k < len(cs.retry); k++ {
		p := &cs.retry[k]
		if err := s.ReplyClient(p.req, p.frame); errors.Is(err, shard.ErrOutboxFull) {
			break
		}
	}
	cs.retry = append(cs.retry[:0], cs.retry[k:]...)
	if len(cs.retry) > 0 {
		c.armRetry(s.Index(), cs)
	}
}

// refuse answers req from s with an error reply.
func (c *Handler) refuse(s *shard.Shard, req shard.ClientRequest, code wire.ErrorCode, owner uint16, msg string) {
	c.n.metrics.countError(code)
	frame := errorFrame(nil, c.n.from, req.RequestID, req.Stream, code, owner, msg)
	c.send(s, &c.shards[s.Index()], req, frame)
}

// errorFrame appends an error reply; msg is cut to wire.MessageSizeMax.
func errorFrame(dst []byte, from wire.From, requestID, streamID uint64, code wire.ErrorCode, owner uint16, msg string) []byte {
	if len(msg) > wire.MessageSizeMax {
		msg = msg[:wire.MessageSizeMax]
	}
	return wire.AppendErrorReply(dst, from, &wire.ErrorReply{RequestID: requestID, Stream: streamID, Code: code,
		Owner: owner, Message: []byte(msg)})
}

// noCopy answers a data request for incarnation (0: the current one) of a stream this node holds no
// serving copy of, or only an older incarnation's copy of. A metadata replica looks the stream up in
// its applied state (on shard 0) and names the owner (CodeNotOwner), or, when this node is the owner
// and its copy is not open yet, answers CodeNotYet (a passing state: the client retries); only the
// primary says a stream or an incarnation it does not know is unknown (a backup may trail it), and
// that is final. A node without a replica, or a backup that does not know the stream, answers
// CodeNotOwner without an owner: the client looks it up.
func (c *Handler) noCopy(s *shard.Shard, req shard.ClientRequest, incarnation uint32) {
	if c.n.meta == nil {
		c.refuse(s, req, wire.CodeNotOwner, 0, fmt.Sprintf("node %d holds no copy of stream %d; look up its owner", c.n.id, req.Stream))
		return
	}
	err := c.n.shard.Run(0, func(*shard.Shard) {
		code, owner, msg := c.n.ownerOf(req.Stream, incarnation)
		_ = c.n.shard.Run(req.Shard, func(rs *shard.Shard) { c.refuse(rs, req, code, owner, msg) })
	})
	if err != nil {
		c.refuse(s, req, wire.CodeUnavailable, 0, fmt.Sprintf("node %d is stopping", c.n.id))
	}
}

// ownerOf says who owns incarnation (0: the current one) of streamID in this node's applied metadata
// state (shard 0's goroutine).
func (n *node) ownerOf(streamID uint64, incarnation uint32) (wire.ErrorCode, uint16, string) {
	st := n.meta.State()
	s, ok := st.StreamByID(streamID)
	if !ok || incarnation > s.Incarnation {
		if n.meta.Status().Primary {
			return wire.CodeUnknownStream, 0, fmt.Sprintf("no stream has id %d and incarnation %d", streamID, incarnation)
		}
		// A backup may not have applied the op that created it yet: only the primary's state is the last word.
		return wire.CodeNotOwner, 0, fmt.Sprintf("node %d knows no stream %d at incarnation %d (its metadata may trail the primary's); look it up",
			n.id, streamID, incarnation)
	}
	if incarnation != 0 && incarnation < s.Incarnation {
		return wire.CodeStaleIncarnation, 0, fmt.Sprintf("stream %d is at incarnation %d; look it up", streamID, s.Incarnation)
	}
	if _, ok := st.RecoveryOf(streamID); ok {
		return wire.CodeUnavailable, 0, fmt.Sprintf("stream %d is recovering (its owner was lost); retry", streamID)
	}
	a, _ := st.Assignment(streamID)
	if a.Owner == n.id {
		return wire.CodeNotYet, 0, fmt.Sprintf("stream %d's copy of incarnation %d on node %d is not open yet; retry", streamID, s.Incarnation, n.id)
	}
	return wire.CodeNotOwner, a.Owner, fmt.Sprintf("node %d owns stream %d at epoch %d", a.Owner, streamID, a.Epoch)
}

// drainQuietMax bounds the wait for client connections to go quiet once the produces are answered.
const drainQuietMax = 200 * time.Millisecond

// Drain refuses new produces and waits until every produce handed to a copy was answered, or ctx ends.
// Then it waits, at most drainQuietMax, until no client request arrived for three ticks, so requests a
// client had sent before the shutdown (still in the socket) are read and answered, refused, rather
// than lost with the connection.
func (c *Handler) Drain(ctx context.Context) error {
	c.draining.Store(true)
	t := time.NewTicker(2 * time.Millisecond)
	defer t.Stop()
	for c.produces.Load() > 0 {
		select {
		case <-ctx.Done():
			return fmt.Errorf("engine: %d produces unanswered: %w", c.produces.Load(), ctx.Err())
		case <-t.C:
		}
	}
	quiet := 3 * time.Duration(c.n.cfg.File.Cluster.TickMs) * time.Millisecond
	deadline := time.Now().Add(drainQuietMax)
	seen, since := c.received.Load(), time.Now()
	for time.Now().Before(deadline) && (time.Since(since) < quiet || c.produces.Load() > 0) {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if r := c.received.Load(); r != seen {
			seen, since = r, time.Now()
		}
	}
	return nil
}

// errorCodeName names an error code for metrics labels.
func errorCodeName(c wire.ErrorCode) string {
	switch c {
	case wire.CodeNotOwner:
		return "not_owner"
	case wire.CodeUnknownStream:
		return "unknown_stream"
	case wire.CodeStreamExists:
		return "stream_exists"
	case wire.CodeInvalidRequest:
		return "invalid_request"
	case wire.CodeUnavailable:
		return "unavailable"
	case wire.CodeFenced:
		return "fenced"
	case wire.CodeOverloaded:
		return "overloaded"
	case wire.CodeInternal:
		return "internal"
	case wire.CodeStaleIncarnation:
		return "stale_incarnation"
	case wire.CodeBatchTooLarge:
		return "batch_too_large"
	case wire.CodeSequenceGap:
		return "sequence_gap"
	case wire.CodeProducerFenced:
		return "producer_fenced"
	case wire.CodeLogFailed:
		return "log_failed"
	case wire.CodeNotYet:
		return "not_yet"
	case wire.CodeBadStreamName:
		return "bad_stream_name"
	case wire.CodeBadConsumerName:
		return "bad_consumer_name"
	case wire.CodeBadCopies:
		return "bad_copies"
	case wire.CodeBadPolicy:
		return "bad_policy"
	case wire.CodeBadCount:
		return "bad_count"
	case wire.CodeBadSize:
		return "bad_size"
	}
	return "other"
}
