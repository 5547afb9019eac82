package stream

import (
	"github.com/ringstream/ringstream/internal/assert"
	"github.com/ringstream/ringstream/wire"
)

// decodedBatch is one batch of a prepare, checked: its header and where it sits in the prepare.
type decodedBatch struct {
	h        BatchHeader
	from, to int
}

// onPrepare appends what the owner sent, after checking that it extends this copy's log: the
// record before it has the epoch the owner has there (log matching), it starts at or below this
// copy's tail, every batch decodes, fits BatchBytesMax and follows the one before, and the batches
// this copy already holds have the same epochs. A refused prepare leaves the log unchanged.
func (c *Copy) onPrepare(from uint16, m *wire.StreamPrepare) {
	switch {
	case m.Stream != c.cfg.Stream || m.Incarnation != c.cfg.Incarnation:
		c.stats.Ignored[IgnoreWrongStream]++
		return
	case c.failed:
		c.stats.Ignored[IgnoreFailed]++
		return
	case m.Epoch < c.asg.Epoch || (c.role == RoleSealed && m.Epoch <= c.fence):
		c.answerPrepare(from, m, wire.PrepareStaleEpoch)
		return
	case m.Epoch > c.asg.Epoch:
		c.stats.Ignored[IgnoreNewerEpoch]++
		c.owed.Offer(from, m)
		return
	case c.role != RoleFollower:
		c.stats.Ignored[IgnoreRole]++
		if c.role == RoleOpening {
			c.owed.Offer(from, m)
		}
		return
	case from != c.asg.Owner:
		c.stats.Ignored[IgnoreNotFromOwner]++
		return
	case c.epochPending:
		c.stats.Ignored[IgnoreEpochPending]++
		c.owed.Offer(from, m)
		return
	}
	c.ownerCommit = max(c.ownerCommit, m.ConfirmedTail)
	if m.Log == wire.LogCursors {
		c.onCursorPrepare(from, m)
		return
	}
	if r, ok := c.checkPrepare(m); !ok {
		c.refusePrepare(from, m, r)
		return
	}
	if c.rec.bytes+len(m.Batches) > c.cfg.PendingBytesMax {
		// More than the log takes before its next group commit: dropped, the owner sends it again.
		c.refusePrepare(from, m, RefuseBusy)
		return
	}
	appended := false
	for i := range c.scratch {
		b := &c.scratch[i]
		if b.h.BaseOffset < c.rec.appended {
			continue // held already, with the same epoch
		}
		c.fx.Appends = append(c.fx.Appends, Append{Log: wire.LogRecords, Header: b.h, Encoded: m.Batches[b.from:b.to]})
		c.rec.appended = b.h.End()
		c.rec.unsynced.push(pendingBytes{end: b.h.End(), size: b.to - b.from})
		c.rec.bytes += b.to - b.from
		c.runs.observe(b.h.BaseOffset, b.h.Epoch)
		c.producers.observe(&b.h)
		appended = true
	}
	c.agreed = max(c.agreed, m.BaseOffset+uint64(m.Count))
	c.ackBase = m.BaseOffset
	if !appended {
		c.ackDue = true // a probe or a repeat: answer with the durable tail now
	}
}

// OwedProbe is the first record prepare of the newest epoch that a copy (or its host) could not take
// because it was not ready for that epoch yet: the assignment not taken, the copy reopening or
// applying it, or its log-epoch entry not durable. A new owner probes its followers as soon as its
// own epoch entry is durable, which races with theirs; unanswered, the probe is sent again only
// after ResendTicks (half a second by default), and the failover's first confirm waits for it. The
// copy answers what it owes once it is ready (EpochDone) instead, as a probe at that prepare's base:
// where the histories agree is all the owner needs to go on, and records it sent are sent again.
// The zero value owes nothing.
type OwedProbe struct {
	msg  wire.StreamPrepare // a probe: no records; Epoch 0 when none is owed (a prepare's is at least 1)
	from uint16
}

// Offer keeps m from node from, as a probe, unless it is a cursor prepare or a prepare of that epoch
// or a newer one is kept already.
func (o *OwedProbe) Offer(from uint16, m *wire.StreamPrepare) {
	if m.Log != wire.LogRecords || o.msg.Epoch >= m.Epoch {
		return
	}
	*o = OwedProbe{msg: wire.StreamPrepare{Stream: m.Stream, Incarnation: m.Incarnation, Epoch: m.Epoch,
		PrevEpoch: m.PrevEpoch, Log: wire.LogRecords, BaseOffset: m.BaseOffset, ConfirmedTail: m.ConfirmedTail},
		from: from}
}

// Take hands over the kept probe and its sender, and forgets it; ok is false when none is kept.
func (o *OwedProbe) Take() (m Message, ok bool) {
	if o.msg.Epoch == 0 {
		return Message{}, false
	}
	m = Message{Kind: KindPrepare, From: o.from, Prepare: o.msg}
	*o = OwedProbe{}
	return m, true
}

// answerOwedProbe takes the probe the copy owes for its epoch, now that its epoch entry is durable
// (EpochDone, once per epoch), as it would have on arrival. One owed for a newer epoch waits.
func (c *Copy) answerOwedProbe() {
	if c.owed.msg.Epoch != c.asg.Epoch {
		return
	}
	m, _ := c.owed.Take()
	c.onPrepare(m.From, &m.Prepare)
}

// checkPrepare checks a record prepare against the log and fills c.scratch with its batches.
func (c *Copy) checkPrepare(m *wire.StreamPrepare) (Refusal, bool) {
	c.scratch = c.scratch[:0]
	tail := c.rec.appended
	if m.BaseOffset > tail {
		return RefuseGap, false
	}
	if m.BaseOffset > 0 {
		if e, ok := c.runs.epochAt(m.BaseOffset - 1); !ok || e != m.PrevEpoch {
			return RefuseWrongPrevEpoch, false
		}
	}
	next, count, last := m.BaseOffset, uint64(0), m.PrevEpoch
	for off := 0; off < len(m.Batches); {
		h, n, err := c.decodeReceived(m.Batches[off:])
		switch {
		case err != nil || n <= 0 || n > len(m.Batches)-off:
			return RefuseBadBatch, false
		case int(h.PayloadLen) > c.cfg.BatchBytesMax:
			return RefuseOversize, false
		case h.BaseOffset != next || h.Epoch > m.Epoch || h.Epoch < last:
			return RefuseBadBatch, false
		case h.BaseOffset < tail:
			// This copy holds records at the batch's offsets: they must be the same batch.
			if e, ok := c.runs.epochAt(h.BaseOffset); !ok || e != h.Epoch {
				return RefuseDivergent, false
			}
			if h.End() > tail {
				return RefuseBadBatch, false // same epoch, another boundary: not what the owner holds
			}
		}
		c.scratch = append(c.scratch, decodedBatch{h: h, from: off, to: off + n})
		next, count, last = h.End(), count+uint64(h.Count), h.Epoch
		off += n
	}
	if count != uint64(m.Count) {
		return RefuseBadBatch, false
	}
	return 0, true
}

// refusePrepare counts a refusal and answers the ones the owner can act on with this copy's tails
// and log epochs. A batch that does not decode or is oversize, or a prepare the log has no room for,
// gets no answer: the owner probes again after ResendTicks (a transient fault clears then).
func (c *Copy) refusePrepare(from uint16, m *wire.StreamPrepare, r Refusal) {
	c.stats.Refused[r]++
	c.stats.LastRefusal = r
	if r == RefuseBadBatch || r == RefuseOversize || r == RefuseBusy {
		return
	}
	c.answerPrepare(from, m, wire.PrepareMismatch)
}

// answerPrepare answers a prepare at once with a status other than PrepareAppended: the tails are
// what this copy holds, durable or queued.
func (c *Copy) answerPrepare(to uint16, m *wire.StreamPrepare, status wire.PrepareStatus) {
	epoch := c.asg.Epoch
	if c.role == RoleSealed {
		epoch = c.fence
	}
	ok := PrepareOK{To: to, Epochs: c.epochs}
	ok.Msg = wire.StreamPrepareOK{Stream: c.cfg.Stream, Incarnation: c.cfg.Incarnation, Epoch: epoch, Status: status,
		Log: m.Log, RecordTail: c.rec.appended, CursorTail: c.cur.appended, BaseOffset: m.BaseOffset}
	c.sendAnswer(ok)
}

// sendAnswer sends an answer to a prepare and keeps it as the last one (PeerUp sends it again).
func (c *Copy) sendAnswer(ok PrepareOK) {
	c.lastAnswer = ok.Msg
	c.lastEpochs = append(c.lastEpochs[:0], ok.Epochs...)
	c.fx.PrepareOKs = append(c.fx.PrepareOKs, ok)
}

// onCursorPrepare appends the owner's cursor events; the cursor log is matched by offset.
func (c *Copy) onCursorPrepare(from uint16, m *wire.StreamPrepare) {
	tail := c.cur.appended
	if m.BaseOffset > tail {
		c.stats.Refused[RefuseGap]++
		c.stats.LastRefusal = RefuseGap
		c.answerPrepare(from, m, wire.PrepareMismatch)
		return
	}
	c.scratch = c.scratch[:0]
	next, count := m.BaseOffset, uint64(0)
	for off := 0; off < len(m.Batches); {
		h, n, err := c.decodeReceived(m.Batches[off:])
		if err != nil || n <= 0 || n > len(m.Batches)-off || h.BaseOffset != next || (h.BaseOffset < tail && h.End() > tail) {
			c.stats.Refused[RefuseBadBatch]++
			c.stats.LastRefusal = RefuseBadBatch
			return
		}
		c.scratch = append(c.scratch, decodedBatch{h: h, from: off, to: off + n})
		next, count = h.End(), count+uint64(h.Count)
		off += n
	}
	if count != uint64(m.Count) {
		c.stats.Refused[RefuseBadBatch]++
		c.stats.LastRefusal = RefuseBadBatch
		return
	}
	appended := false
	for i := range c.scratch {
		b := &c.scratch[i]
		if b.h.BaseOffset < c.cur.appended {
			continue
		}
		c.fx.Appends = append(c.fx.Appends, Append{Log: wire.LogCursors, Header: b.h, Encoded: m.Batches[b.from:b.to]})
		c.cur.appended = b.h.End()
		appended = true
	}
	if appended {
		c.fx.SyncCursors = true // durable on the owner already: commit them at once here
	} else {
		c.cursorAck = true
	}
}

// followerAcks answers the owner with what is durable: the record tail never past the durable tail
// the host reported, nor past what agrees with the owner.
func (c *Copy) followerAcks() {
	if c.ackDue {
		c.ackDue = false
		t := min(c.rec.durable, c.agreed)
		assert.True(t <= c.rec.durable, "stream: follower acknowledges past its durable tail")
		c.ack(wire.LogRecords, t)
	}
	if c.cursorAck {
		c.cursorAck = false
		c.ack(wire.LogCursors, min(c.rec.durable, c.agreed))
	}
}

func (c *Copy) ack(log wire.LogKind, recordTail uint64) {
	ok := PrepareOK{To: c.asg.Owner}
	ok.Msg = wire.StreamPrepareOK{Stream: c.cfg.Stream, Incarnation: c.cfg.Incarnation, Epoch: c.asg.Epoch,
		Status: wire.PrepareAppended, Log: log, RecordTail: recordTail, CursorTail: c.cur.durable, BaseOffset: c.ackBase}
	c.sendAnswer(ok)
}
