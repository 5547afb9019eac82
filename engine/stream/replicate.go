package stream

import (
	"github.com/ringstream/ringstream/internal/assert"
	"github.com/ringstream/ringstream/wire"
)

// followMode is how the owner serves one follower.
type followMode uint8

const (
	modeProbe   followMode = iota // an empty prepare at probeAt is out: waiting for the follower's tails
	modeLive                      // gets each new append in the step that makes it
	modeCatchup                   // served from the log, by reads, until it reaches the appended tail
	modeStalled                   // cannot be served (no agreement above the head, or a newer epoch)
)

// progress is the owner's view of one follower.
type progress struct {
	node          uint16
	mode          followMode
	match         uint64 // durable, agreed record tail the follower acknowledged
	sent          uint64 // next record offset to send
	probeAt       uint64 // base of the outstanding probe
	inflight      fifo[pendingBytes]
	inflightBytes int
	gen           uint32 // grows on every probe; read tags carry it
	reading       bool
	heardTick     uint64 // tick of the last progress (or of the first send after quiet)
	answered      bool   // the follower answered a prepare at the owner's epoch (readable)
	fxPrepare     int    // index in fx.Prepares of this step's prepare to this follower, or -1
	cmatch        uint64 // cursor log: acknowledged and next to send
	csent         uint64
	creading      bool
}

// Read tags: kind in the top byte, an index in the next two, a generation in the low four.
const (
	tagCatchup uint64 = 1
	tagCursors uint64 = 2
	tagFetch   uint64 = 3
)

func makeTag(kind uint64, index int, gen uint32) uint64 {
	return kind<<56 | uint64(index)<<32 | uint64(gen)
}

func splitTag(tag uint64) (kind uint64, index int, gen uint32) {
	return tag >> 56, int(tag >> 32 & 0xffffff), uint32(tag)
}

func (c *Copy) followerIndex(node uint16) int {
	for i := range c.followers {
		if c.followers[i].node == node {
			return i
		}
	}
	return -1
}

// prevEpoch is the epoch of the record before off, for a prepare that starts at off.
func (c *Copy) prevEpoch(off uint64) (uint32, bool) {
	if off == 0 {
		return 0, true
	}
	return c.runs.epochAt(off - 1)
}

func (c *Copy) prepareMsg(log wire.LogKind, base uint64, prev uint32) wire.StreamPrepare {
	return wire.StreamPrepare{Stream: c.cfg.Stream, Incarnation: c.cfg.Incarnation, Epoch: c.asg.Epoch,
		PrevEpoch: prev, Log: log, BaseOffset: base, ConfirmedTail: c.confirmed}
}

// probe restarts follower i from p.sent: whatever was in flight is forgotten (reads included, by the
// generation), and an empty prepare asks whether the follower's record before p.sent agrees.
func (c *Copy) probe(i int) {
	p := &c.followers[i]
	p.gen++
	p.inflight.reset()
	p.inflightBytes, p.reading, p.creading = 0, false, false
	p.csent = p.cmatch
	p.heardTick = c.now
	prev, ok := c.prevEpoch(p.sent)
	if !ok || p.sent < c.head {
		p.mode = modeStalled
		return
	}
	p.mode, p.probeAt = modeProbe, p.sent
	c.fx.Prepares = append(c.fx.Prepares, Prepare{To: p.node, Source: SourceMsg, Msg: c.prepareMsg(wire.LogRecords, p.sent, prev)})
	c.stats.Probes++
}

// sendLive sends the batch just appended (fx.Appends[idx]) to follower i if it is live and has room;
// a follower without room drops to catch-up and is served from the log once acks free it.
func (c *Copy) sendLive(i, idx int, h *BatchHeader, size int) {
	p := &c.followers[i]
	if p.mode != modeLive {
		return
	}
	assert.True(p.sent == h.BaseOffset, "stream: live follower off the appended tail")
	if p.inflight.len() >= c.cfg.InflightPreparesMax || p.inflightBytes+size > c.cfg.InflightBytesMax {
		p.mode = modeCatchup
		return
	}
	if j := p.fxPrepare; j >= 0 {
		pr := &c.fx.Prepares[j]
		if pr.Source == SourceAppends && pr.AppendTo == idx && pr.Msg.BaseOffset+uint64(pr.Msg.Count) == h.BaseOffset {
			pr.AppendTo++
			pr.Msg.Count += h.Count
			pr.Msg.ConfirmedTail = c.confirmed
			c.sent(p, h.End(), size)
			return
		}
	}
	prev, ok := c.prevEpoch(h.BaseOffset)
	assert.True(ok, "stream: owner lacks the epoch of its own record")
	msg := c.prepareMsg(wire.LogRecords, h.BaseOffset, prev)
	msg.Count = h.Count
	p.fxPrepare = len(c.fx.Prepares)
	c.fx.Prepares = append(c.fx.Prepares, Prepare{To: p.node, Source: SourceAppends, AppendFrom: idx, AppendTo: idx + 1, Msg: msg})
	c.sent(p, h.End(), size)
}

// sent accounts records up to end, of size bytes, as in flight to p.
func (c *Copy) sent(p *progress, end uint64, size int) {
	if p.inflight.len() == 0 {
		p.heardTick = c.now
	}
	p.sent = end
	p.inflight.push(pendingBytes{end: end, size: size})
	p.inflightBytes += size
}

func (c *Copy) kickAll() {
	for i := range c.followers {
		c.kick(i)
	}
}

// kick moves follower i along: a catch-up read when it is behind the durable tail and has room,
// live again once it reached the appended tail, and the cursor events it lacks.
func (c *Copy) kick(i int) {
	p := &c.followers[i]
	if p.mode == modeCatchup && !p.reading {
		room := min(c.cfg.ReadBytes, c.cfg.InflightBytesMax-p.inflightBytes)
		switch {
		case p.sent == c.rec.appended:
			p.mode = modeLive
		case p.sent < c.rec.durable && room >= c.cfg.BatchHeaderBytes+c.cfg.BatchBytesMax &&
			p.inflight.len() < c.cfg.InflightPreparesMax:
			c.fx.Reads = append(c.fx.Reads, Read{Tag: makeTag(tagCatchup, i, p.gen), Log: wire.LogRecords, From: p.sent, BytesMax: room})
			p.reading = true
			c.stats.Catchups++
		}
	}
	if (p.mode == modeLive || p.mode == modeCatchup) && !p.creading && p.csent < c.cur.durable {
		c.fx.Reads = append(c.fx.Reads, Read{Tag: makeTag(tagCursors, i, p.gen), Log: wire.LogCursors, From: p.csent, BytesMax: c.cfg.ReadBytes})
		p.creading = true
	}
}

// sendUnsynced sends follower i, caught up by reads to the durable tail, everything appended past it
// and makes it live. Without this a follower that caught up by reads would stay one group commit
// behind for as long as produces come. It runs in Ready, never earlier: the host holds those bytes
// (they wait for their group commit) when it carries out this Ready, but a durable report between a
// Step and the Ready could release some of them.
func (c *Copy) sendUnsynced(i int) {
	p := &c.followers[i]
	if p.mode != modeCatchup || p.reading || p.sent != c.rec.durable || p.sent == c.rec.appended ||
		p.inflightBytes+c.rec.bytes > c.cfg.InflightBytesMax || p.inflight.len() >= c.cfg.InflightPreparesMax {
		return
	}
	prev, ok := c.prevEpoch(p.sent)
	assert.True(ok, "stream: owner lacks the epoch of its own record")
	msg := c.prepareMsg(wire.LogRecords, p.sent, prev)
	msg.Count = uint32(c.rec.appended - p.sent)
	c.fx.Prepares = append(c.fx.Prepares, Prepare{To: p.node, Source: SourceUnsynced, Msg: msg})
	c.sent(p, c.rec.appended, c.rec.bytes)
	p.mode = modeLive
	c.stats.Unsynced++
}

// ReadDone reports the read with tag: data holds whole batches from at or below the offset asked
// for (a partial batch at its end is ignored), or err says why it failed. The copy does not keep
// data; effects that alias it are the host's to keep alive until they are carried out.
func (c *Copy) ReadDone(tag uint64, data []byte, err error) {
	kind, idx, gen := splitTag(tag)
	switch kind {
	case tagCatchup, tagCursors:
		if c.role != RoleOwner || idx >= len(c.followers) || c.followers[idx].gen != gen {
			c.stats.Ignored[IgnoreStaleRead]++
			return
		}
		if kind == tagCatchup {
			c.catchupRead(idx, data, err)
		} else {
			c.cursorRead(idx, data, err)
		}
	case tagFetch:
		c.fetchRead(idx, gen, data, err)
	default:
		assert.True(false, "stream: read done with an unknown tag")
	}
}

// run is a stretch of whole, contiguous batches of a read, starting at a wanted offset.
type run struct {
	start, end int    // byte positions in the data
	next       uint64 // offset after the last batch
	count      uint64
	before     bool // the data starts past the wanted offset (a hole: below the retained head)
}

// takeRun finds the batches of data from offset from on, up to bytesMax bytes (at least one batch)
// and recordsMax records (0: no limit), stopping at offset limit.
func (c *Copy) takeRun(data []byte, from, limit uint64, bytesMax int, recordsMax uint64) run {
	r := run{start: -1, next: from}
	for off := 0; off < len(data); {
		h, n, err := c.decodeReceived(data[off:])
		if err != nil || h.BaseOffset >= limit || h.End() > limit {
			break
		}
		if h.End() <= r.next && r.start < 0 {
			off += n
			continue
		}
		if r.start < 0 {
			if h.BaseOffset > from {
				r.before = true
				break
			}
			r.start = off
		} else if h.BaseOffset != r.next || r.end-r.start+n > bytesMax ||
			(recordsMax > 0 && r.count+uint64(h.Count) > recordsMax) {
			break
		}
		r.next, r.count, r.end = h.End(), r.count+uint64(h.Count), off+n
		off += n
	}
	return r
}

// catchupRead sends follower i the batches a catch-up read found.
func (c *Copy) catchupRead(i int, data []byte, err error) {
	p := &c.followers[i]
	if !p.reading {
		c.stats.Ignored[IgnoreStaleRead]++
		return
	}
	p.reading = false
	if err != nil {
		return // tried again at the next durable report or probe
	}
	room := c.cfg.InflightBytesMax - p.inflightBytes
	r := c.takeRun(data, p.sent, c.rec.durable, room, uint64(^uint32(0)))
	if r.before {
		p.mode = modeStalled
		return
	}
	if r.start < 0 {
		return
	}
	prev, ok := c.prevEpoch(p.sent)
	assert.True(ok, "stream: owner lacks the epoch of its own record")
	msg := c.prepareMsg(wire.LogRecords, p.sent, prev)
	msg.Count, msg.Batches = uint32(r.count), data[r.start:r.end]
	c.fx.Prepares = append(c.fx.Prepares, Prepare{To: p.node, Source: SourceMsg, Msg: msg})
	c.sent(p, r.next, r.end-r.start)
	c.kick(i)
}

// cursorRead sends follower i the cursor events a read found. Cursor events carry no predecessor
// epoch: their log is matched by offset, and a divergent cursor suffix is cut by the seal.
func (c *Copy) cursorRead(i int, data []byte, err error) {
	p := &c.followers[i]
	if !p.creading {
		c.stats.Ignored[IgnoreStaleRead]++
		return
	}
	p.creading = false
	if err != nil {
		return
	}
	r := c.takeRun(data, p.csent, c.cur.durable, c.cfg.ReadBytes, uint64(^uint32(0)))
	if r.start < 0 {
		return
	}
	msg := c.prepareMsg(wire.LogCursors, p.csent, 0)
	msg.Count, msg.Batches = uint32(r.count), data[r.start:r.end]
	c.fx.Prepares = append(c.fx.Prepares, Prepare{To: p.node, Source: SourceMsg, Msg: msg})
	p.csent = r.next
	c.kick(i)
}

// onPrepareOK takes a follower's answer.
func (c *Copy) onPrepareOK(from uint16, m *wire.StreamPrepareOK, _ wire.LogEpochs) {
	i := c.followerIndex(from)
	switch {
	case c.role != RoleOwner:
		c.stats.Ignored[IgnoreRole]++
		return
	case m.Stream != c.cfg.Stream || m.Incarnation != c.cfg.Incarnation:
		c.stats.Ignored[IgnoreWrongStream]++
		return
	case i < 0:
		c.stats.Ignored[IgnoreNotFromFollower]++
		return
	case m.Status == wire.PrepareStaleEpoch || m.Epoch > c.asg.Epoch:
		// The follower is at a newer epoch: this owner is stale. The failover moves it on.
		c.stats.Ignored[IgnoreStaleFollower]++
		c.followers[i].mode = modeStalled
		return
	case m.Epoch < c.asg.Epoch:
		c.stats.Ignored[IgnoreOlderEpoch]++
		return
	}
	p := &c.followers[i]
	if !p.answered {
		p.answered = true
		c.heard++
	}
	if m.Log == wire.LogCursors {
		c.onCursorOK(p, m)
		c.kick(i)
		return
	}
	if m.Status == wire.PrepareAppended {
		c.onAppendedOK(i, m)
		return
	}
	c.onMismatch(i, m)
}

func (c *Copy) onAppendedOK(i int, m *wire.StreamPrepareOK) {
	p := &c.followers[i]
	if t := min(m.RecordTail, c.rec.appended); t > p.match {
		p.match = t
		p.heardTick = c.now
	}
	for p.inflight.len() > 0 && p.inflight.front().end <= p.match {
		p.inflightBytes -= p.inflight.front().size
		p.inflight.pop()
	}
	if p.mode == modeProbe && m.BaseOffset == p.probeAt {
		// The follower agrees up to probeAt, and holds durably what it acknowledged: serve it from
		// the further of the two.
		p.mode = modeCatchup
		p.sent = max(p.probeAt, p.match)
		p.heardTick = c.now
	}
	c.updateConfirmed()
	c.kick(i)
}

// onMismatch moves follower i back to where the histories may agree and probes there: its tail, or,
// when the probe at or below its tail was refused, the start of the owner's epoch run before it.
func (c *Copy) onMismatch(i int, m *wire.StreamPrepareOK) {
	p := &c.followers[i]
	tail := min(m.RecordTail, c.rec.appended)
	if p.mode == modeProbe && m.BaseOffset != p.probeAt {
		return // answers an older prepare; the probe's answer decides
	}
	if p.mode != modeProbe && m.BaseOffset < p.match {
		return // a late answer to a prepare below what the follower acknowledged since
	}
	if p.mode != modeProbe && m.BaseOffset >= p.probeAt && m.BaseOffset < tail {
		// The follower agreed on the records before BaseOffset (a probe there or below was
		// accepted) but holds others at it: a divergent suffix, which only the seal's cut removes.
		// Probing again would only find the same point.
		p.mode = modeStalled
		c.stats.Diverged++
		return
	}
	at := tail
	if p.mode == modeProbe && p.probeAt <= tail {
		if p.probeAt == 0 || p.probeAt <= c.head {
			p.mode = modeStalled
			return
		}
		at = c.runs.runStart(p.probeAt - 1)
	}
	p.sent = at
	c.probe(i)
}

func (c *Copy) onCursorOK(p *progress, m *wire.StreamPrepareOK) {
	if m.Status == wire.PrepareAppended {
		p.cmatch = max(p.cmatch, min(m.CursorTail, c.cur.durable))
		c.confirmDeletes()
		return
	}
	if !p.creading {
		p.csent = min(m.CursorTail, c.cur.durable)
	}
}

// onFollowerTick probes a follower that owes an answer and has been silent for ResendTicks.
func (c *Copy) onFollowerTick(i int) {
	p := &c.followers[i]
	if !c.restarted && !c.epochPending && !c.failed {
		c.kick(i) // retries a catch-up or cursor read the host could not start or finish
	}
	if !c.owes(p) {
		p.heardTick = c.now
		return
	}
	if c.now-p.heardTick < c.cfg.ResendTicks || !c.mayProbe() {
		return
	}
	c.stats.Resets++
	p.sent = p.match
	c.probe(i)
}

// owes reports that follower p owes the owner an answer: a probe, a stalled catch-up, prepares or
// reads in flight, cursor events unacknowledged.
func (c *Copy) owes(p *progress) bool {
	return p.mode == modeProbe || p.mode == modeStalled || p.inflight.len() > 0 || p.reading || p.csent > p.cmatch
}

// PeerUp tells the copy that its link to node came up (again); what it sent there while the link
// was down was dropped. An owner probes at once a follower there that owes it an answer, as
// ResendTicks of silence would, rather than up to ResendTicks later (a follower's node restarted, or
// the owner's own start). A follower whose owner is on node sends its last answer of the current
// epoch again: links are one per direction, so the answer to the probe the owner sent when its own
// link came up may have met this one still down. A repeated answer is one the owner takes as a late
// duplicate (onPrepareOK matches answers to what it sent), so sending it again is always safe.
func (c *Copy) PeerUp(node uint16) {
	if c.role == RoleFollower && node == c.asg.Owner && c.lastAnswer.Epoch == c.asg.Epoch {
		c.stats.Resent++
		c.fx.PrepareOKs = append(c.fx.PrepareOKs, PrepareOK{To: node, Msg: c.lastAnswer, Epochs: c.lastEpochs})
		return
	}
	if c.role != RoleOwner || !c.mayProbe() {
		return // a sealed owner keeps its followers' progress, and must not probe at its old epoch
	}
	for i := range c.followers {
		if p := &c.followers[i]; p.node == node && c.owes(p) {
			c.stats.Resets++
			p.sent = p.match
			c.probe(i)
		}
	}
}

// mayProbe reports that the owner may probe its followers again: not restarted in its own epoch
// (it waits for a new assignment), its epoch entry durable, its logs not failed.
func (c *Copy) mayProbe() bool { return !c.restarted && !c.epochPending && !c.failed }
