package shard

import (
	"errors"
	"unsafe"

	"github.com/ringstream/ringstream/internal/assert"
	"github.com/ringstream/ringstream/shard/heartbeat"
	"github.com/ringstream/ringstream/wire"
)

// peerReader is the receive side of one connection from a peer node: a wire.FrameReader that cuts
// frames out of the byte stream, received straight into its buffer, and the shard's handler for them.
// When a cross-shard queue is full the handler stalls (wire.ErrStall): the reader keeps the frame,
// resume keeps its next entry, and the connection stops reading until resumeStalled retries it, so
// back-pressure reaches the peer through TCP and no entry is dropped or handled twice (R16).
type peerReader struct {
	s       *Shard
	from    uint16
	size    int // the reader's buffer size
	frames  *wire.FrameReader
	next    uintptr // where the next received byte lands if the reader moved nothing (see free)
	resume  int     // next entry of the frame the reader holds, while stalled
	stalled bool    // the reader holds a frame the handler stopped on; receive(0) retries it
	done    uint64  // frames handed on or dropped: a change starts a new frame's clock (frameClock)
}

// largeFrameBytes bounds a receive that is not the rest of a large frame (see free): small frames are
// read many per receive, up to this many bytes.
const largeFrameBytes = 64 << 10

// linkRecvBytes is the receive buffer of an outbound link: a peer sends nothing on it after its
// handshake, so it needs no room for data frames.
const linkRecvBytes = 16 << 10

func newPeerReader(s *Shard, from uint16, size int) peerReader {
	return peerReader{s: s, from: from, size: size, frames: wire.NewFrameReader(size, wire.FrameSizeMax)}
}

// free is the space to receive into. It counts the bytes the reader moved to the front of its buffer
// to make room (Stats.RecvBytesMoved): the only copy in user space on the receive path.
func (r *peerReader) free() []byte {
	b := r.frames.Free()
	if len(b) == 0 {
		return b
	}
	// A large frame's rest is read alone, ending on its last byte; any other read takes at most
	// largeFrameBytes. So a large frame starts within largeFrameBytes of where the reader began
	// again at the front, fits behind it when it is at most RecvBufferBytes - largeFrameBytes, and
	// ends the buffer's contents: the reader hands it on and starts at the front again, and no large
	// frame is moved to make room.
	limit := largeFrameBytes
	if p := r.frames.Pending(); p > limit {
		limit = p
	}
	if len(b) > limit {
		b = b[:limit]
	}
	at := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	if pending := r.frames.Buffered(); pending > 0 && r.next != 0 && at != r.next {
		r.s.stats.RecvBytesMoved.Add(uint64(pending))
	}
	r.next = at
	return b
}

// receive hands the frames completed by n bytes just received into frames.Free() to the shard, or
// retries the stalled frame when n is 0. It returns the reader's error on a corrupt header or a frame
// past FrameSizeMax: the stream can no longer be trusted to line up with frames, so the caller closes
// the connection.
func (r *peerReader) receive(n int) error {
	assert.True(n == 0 || !r.stalled, "shard: bytes received while the reader is stalled")
	if r.next != 0 {
		r.next += uintptr(n)
	}
	err := r.frames.Commit(n, r)
	r.stalled = errors.Is(err, wire.ErrStall)
	if r.stalled {
		return nil
	}
	return err
}

// reset readies the reader for a new connection. FrameReader has no reset: a reader that holds bytes
// of the old connection, or stopped on its error, is replaced; an idle one is kept.
func (r *peerReader) reset() {
	if r.frames.Buffered() != 0 || r.frames.Err() != nil {
		r.frames = wire.NewFrameReader(r.size, wire.FrameSizeMax)
	}
	r.resume, r.stalled, r.next = 0, false, 0
}

// HandleFrame hands one whole frame, both checksums checked, to the shard (wire.FrameHandler).
func (r *peerReader) HandleFrame(h wire.Header, body, frame []byte) error {
	// The header lives in the shard, not on the stack: group handlers receive a pointer to it through an
	// interface, which would move a stack copy to the heap on every frame.
	r.s.header = h
	if !r.s.handleFrame(r.from, &r.s.header, body, frame, &r.resume) {
		return wire.ErrStall
	}
	r.resume = 0
	r.done++
	return nil
}

// DropFrame counts a frame whose body failed its checksum; the reader skips it whole and reads on (R15).
func (r *peerReader) DropFrame(h wire.Header, err error) {
	r.s.stats.FramesDropped.Add(1)
	r.done++
}

// handleFrame handles one whole, checked frame received from node from. It returns false when a
// cross-shard queue is full: *resume then holds the first entry not yet handed on, and the caller
// pauses this connection until resumeStalled calls again.
func (s *Shard) handleFrame(from uint16, h *wire.Header, body, frame []byte, resume *int) bool {
	if h.Cluster != s.cfg.Cluster || h.Sender != from {
		s.stats.FramesDropped.Add(1) // R15: dropped whole
		return true
	}
	switch h.Command {
	case wire.CommandCommit:
		return s.handleCommitBatch(from, h, body, resume)
	case wire.CommandCommitReply:
		return s.handleReplyBatch(from, h, body, resume)
	}
	if h.Group == 0 {
		if nh := s.node.nodeHandler; nh != nil {
			s.stats.NodeFrames.Add(1)
			nh.OnNodeFrame(s, from, h, body)
		} else {
			s.stats.FramesUnroutable.Add(1)
		}
		return true
	}
	target := ShardOf(h.Group, len(s.node.shards))
	if target == s.index {
		s.deliverFrame(from, h, body)
		return true
	}
	m := &s.scratch
	*m = message{kind: messageFrame, from: from, frame: append([]byte(nil), frame...)}
	if !s.push(target, m) {
		return false
	}
	return true
}

// handleCommitBatch hands each good entry to the shard that owns its group and rejects bad ones alone
// (R16, R17).
func (s *Shard) handleCommitBatch(from uint16, h *wire.Header, body []byte, resume *int) bool {
	batch, err := wire.DecodeCommitBatch(h, body)
	if err != nil {
		s.stats.FramesDropped.Add(1)
		return true
	}
	shards := len(s.node.shards)
	for i := *resume; i < batch.Len(); i++ {
		e, err := batch.Entry(i)
		if err != nil {
			s.stats.BadCommitEntries.Add(1)
			continue
		}
		target := ShardOf(e.Group, shards)
		if target == s.index {
			s.handleCommit(from, e)
			continue
		}
		m := &s.scratch
		*m = message{kind: messageCommit, from: from, commit: e}
		if !s.push(target, m) {
			*resume = i
			return false
		}
	}
	s.stats.CommitBatchesReceived.Add(1)
	return true
}

// handleReplyBatch is handleCommitBatch for CommitReply batches (R29).
func (s *Shard) handleReplyBatch(from uint16, h *wire.Header, body []byte, resume *int) bool {
	batch, err := wire.DecodeCommitReplyBatch(h, body)
	if err != nil {
		s.stats.FramesDropped.Add(1)
		return true
	}
	shards := len(s.node.shards)
	for i := *resume; i < batch.Len(); i++ {
		e, err := batch.Entry(i)
		if err != nil {
			s.stats.BadReplyEntries.Add(1)
			continue
		}
		target := ShardOf(e.Group, shards)
		if target == s.index {
			s.handleReply(from, e)
			continue
		}
		m := &s.scratch
		*m = message{kind: messageReply, from: from, reply: e}
		if !s.push(target, m) {
			*resume = i
			return false
		}
	}
	s.stats.ReplyBatchesReceived.Add(1)
	return true
}

// handleCommit handles one Commit entry on the shard that owns its group: a newer Commit from the
// current primary restarts the backup's timeout (R8, R22), queues a CommitReply (R27) and reaches the
// group.
func (s *Shard) handleCommit(from uint16, e wire.CommitEntry) {
	s.stats.CommitEntriesReceived.Add(1)
	gs := s.byID[e.Group]
	if gs == nil || gs.role != RoleBackup || e.Incarnation != gs.g.Incarnation() || gs.nodes[gs.primIdx] != from {
		s.stats.CommitEntriesIgnored.Add(1)
		return
	}
	v := gs.backup.OnCommit(s.tick.Number, e.View, e.TimestampMonotonic, heartbeat.State(e.HeartbeatState), e.Replica)
	if !v.Accepted() {
		s.stats.CommitEntriesIgnored.Add(1)
		return
	}
	s.stats.CommitEntriesAccepted.Add(1)
	s.queueReply(from, wire.CommitReplyEntry{Group: e.Group, Incarnation: e.Incarnation, View: e.View,
		TimestampMonotonic: e.TimestampMonotonic, Replica: gs.self})
	s.wake(gs)
	gs.g.OnCommit(from, e)
}

// handleReply handles one CommitReply entry on the shard that owns its group (R24, R29).
func (s *Shard) handleReply(from uint16, e wire.CommitReplyEntry) {
	s.stats.ReplyEntriesReceived.Add(1)
	gs := s.byID[e.Group]
	if gs == nil || gs.role != RolePrimary || e.Incarnation != gs.g.Incarnation() ||
		e.Replica >= heartbeat.MembersMax || gs.nodes[e.Replica] != from {
		s.stats.ReplyEntriesIgnored.Add(1)
		return
	}
	if gs.primary.OnReply(s.tick.Number, e.View, e.TimestampMonotonic, e.Replica) != heartbeat.ReplyFresh {
		s.stats.ReplyEntriesIgnored.Add(1)
		return
	}
	s.stats.ReplyEntriesCounted.Add(1)
	s.wake(gs)
	gs.g.OnCommitReply(from, e)
}

// queueReply puts a reply in the reply outbox of node; it leaves with the next tick's batches (R27, R28).
func (s *Shard) queueReply(node uint16, e wire.CommitReplyEntry) {
	l := s.byNode[node]
	if l == nil || !l.queueReply(e) {
		s.stats.RepliesDroppedFull.Add(1)
	}
}

// deliverFrame hands a group-addressed frame to its group on this shard.
func (s *Shard) deliverFrame(from uint16, h *wire.Header, body []byte) {
	gs := s.byID[h.Group]
	if gs == nil {
		if uh, ok := s.node.nodeHandler.(UnroutedHandler); ok && uh.OnUnroutedFrame(s, from, h, body) {
			s.stats.NodeFrames.Add(1)
			return
		}
		s.stats.FramesUnroutable.Add(1)
		return
	}
	s.stats.FramesRouted.Add(1)
	s.wake(gs)
	gs.g.OnFrame(from, h, body)
}

// push sends m to shard target through their queue. It returns false when the queue is full: the
// caller keeps the work and tries again later (back-pressure, never a drop).
func (s *Shard) push(target int, m *message) bool {
	q := s.outbound[target]
	assert.True(q != nil, "shard: push to itself")
	if !q.Push(m) {
		s.stats.RouteBackpressure.Add(1)
		s.wakeOwed[target] = true
		return false
	}
	s.wakeOwed[target] = true
	return true
}

// drainInbox handles the messages other shards queued for this one, a bounded number per queue.
func (s *Shard) drainInbox() {
	var m message
	for j, q := range s.inbound {
		if q == nil {
			continue
		}
		for n := 0; n < inboxBudget && q.Pop(&m); n++ {
			s.handleMessage(j, &m)
		}
	}
}

func (s *Shard) handleMessage(fromShard int, m *message) {
	switch m.kind {
	case messageCommit:
		if !s.draining {
			s.handleCommit(m.from, m.commit)
		}
	case messageReply:
		if !s.draining {
			s.handleReply(m.from, m.reply)
		}
	case messageFrame:
		if !s.draining {
			h, body, err := wire.ParseFrame(m.frame)
			assert.True(err == nil, "shard: routed frame no longer parses")
			s.header = h
			s.deliverFrame(m.from, &s.header, body)
		}
	case messageConn:
		s.adoptConn(m.fd, m.peer)
	case messageClientRequest, messageClientReply:
		if !s.draining {
			s.cl.handleMessage(m)
		}
	default:
		assert.True(false, "shard: message of unknown kind")
	}
	*m = message{}
}

// resumeStalled retries the connections paused on a full queue.
func (s *Shard) resumeStalled() {
	for _, l := range s.links {
		if l.in.stalled {
			l.receive(0)
		}
	}
	for i := len(s.conns) - 1; i >= 0; i-- { // backwards: a corrupt header closes and removes s.conns[i]
		if c := s.conns[i]; c.in.stalled {
			c.receive(0)
		}
	}
	s.cl.resume()
}

// sendWakeups wakes, once per loop turn, every shard this one queued messages for.
func (s *Shard) sendWakeups() {
	for j, owed := range s.wakeOwed {
		if !owed {
			continue
		}
		err := s.ring.MsgRing(s, tagWake, s.node.shards[j].msgTarget, 0, msgTagWake, 0)
		if err != nil {
			// No room on the ring this turn: keep the wakeup owed for the next turn.
			continue
		}
		s.wakeOwed[j] = false
		s.stats.QueueWakeups.Add(1)
	}
}
