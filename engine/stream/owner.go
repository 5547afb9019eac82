package stream

import (
	"bytes"

	"github.com/ringstream/ringstream/internal/assert"
	"github.com/ringstream/ringstream/wire"
)

// pendingAck is a produce waiting for the confirmed tail to reach end.
type pendingAck struct {
	client    uint64
	requestID uint64
	base      uint64
	end       uint64
	count     uint32
	bytes     uint32 // the batch's encoded size (header included): the reply's ProduceBytes
	duplicate bool
}

// becomeOwner starts the owner's state. last is the copy's newest log epoch: equal to the assignment's
// epoch, the copy was this epoch's owner before it restarted, and may have lost records that its
// followers hold (even confirmed ones: W can be met without the owner). It must not append at this
// epoch again, so it waits for a new assignment (the seal and promotion of the failover issue).
func (c *Copy) becomeOwner(last uint32) {
	c.role = RoleOwner
	c.restarted = last == c.asg.Epoch
	c.followers = make([]progress, len(c.asg.Followers))
	for i, node := range c.asg.Followers {
		c.followers[i] = progress{node: node, mode: modeProbe, sent: c.rec.durable, fxPrepare: -1}
	}
	c.tails = make([]uint64, 1+len(c.asg.Followers))
	c.confirmed = 0
	c.readFloor = c.rec.durable
	c.heard = 0
}

// InSync counts the copies whose durable tail reached the confirmed tail, the owner's included
// (owner only; 0 on a follower): a copy below it would be needed again if another failed.
func (c *Copy) InSync() int {
	if c.role != RoleOwner {
		return 0
	}
	n := 0
	if c.rec.durable >= c.confirmed {
		n++
	}
	for i := range c.followers {
		if c.followers[i].match >= c.confirmed {
			n++
		}
	}
	return n
}

// readable reports whether the owner may serve reads: W-1 followers answered a prepare at its epoch
// since it took the role, and its confirmed tail reached its own tail at the time it took the role.
//
// The first proves the epoch is still current: a newer one is committed only after a seal, the
// sealed set meets every W-set, and a sealed copy answers no prepare of an older epoch. Without it an
// owner that takes the role at an epoch already superseded (it was paused or down through the
// failover and opens from the assignment it last knew) would answer reads with its own tail, below
// what its successor confirmed: the stream simulator's seed 42123 of TestSimDiskErrors (node 1,
// paused through the failover of stream 2, opened epoch 1 with an empty log and answered a fetch with
// confirmed tail 0 after epoch 2 confirmed 6). Once readable, the quorum window (R24) bounds how long
// a cut-off owner goes on.
//
// The second: every tail an earlier owner could have confirmed is at or below that (a seal promotes
// the furthest copy of a set that meets every W-set; an owner reassigned in place confirmed no
// further than its own tail), so a reader that saw one never gets a lower one here. Until then the
// confirmed tail only counts copies this owner has heard in its epoch, and may be below what its
// predecessor handed out.
func (c *Copy) readable() bool { return c.heard+1 >= c.w && c.confirmed >= c.readFloor }

// onProduce appends a producer's batch, sends it to every follower that is live, and queues the
// answer for when the confirmed tail passes it.
func (c *Copy) onProduce(client uint64, m *wire.Produce) {
	code, msg := c.requestRefusal(m.Stream, m.Incarnation)
	if msg == msgNotReady && c.holdForEpoch(client, m) {
		return
	}
	if code != 0 {
		c.refuse(client, m.RequestID, code, msg)
		return
	}
	size := c.cfg.BatchHeaderBytes + len(m.Batch)
	switch {
	case len(m.Batch) > c.cfg.BatchBytesMax:
		c.refuse(client, m.RequestID, wire.CodeBatchTooLarge, msgTooLarge)
		return
	case c.acks.len() >= c.cfg.ProducesMax:
		c.refuse(client, m.RequestID, wire.CodeOverloaded, msgOverloaded)
		return
	case c.rec.bytes+size > c.cfg.PendingBytesMax:
		c.refuse(client, m.RequestID, wire.CodeOverloaded, msgPendingTooMany)
		return
	}
	if m.ProducerID != 0 {
		verdict, b := c.producers.check(m.ProducerID, m.Sequence, m.Count)
		switch verdict {
		case seqDuplicate:
			c.stats.Duplicates++
			c.queueAck(pendingAck{client: client, requestID: m.RequestID, base: b.base,
				end: b.base + uint64(b.count), count: b.count, duplicate: true})
			return
		case seqGap:
			c.refuse(client, m.RequestID, wire.CodeSequenceGap, msgSequenceGap)
			return
		case seqOld:
			c.refuse(client, m.RequestID, wire.CodeSequenceGap, msgSequenceOld)
			return
		case seqFenced:
			c.refuse(client, m.RequestID, wire.CodeProducerFenced, msgProducerFenced)
			return
		}
	}
	h := BatchHeader{BaseOffset: c.rec.appended, Count: m.Count, PayloadLen: uint32(len(m.Batch)),
		Epoch: c.asg.Epoch, ProducerID: m.ProducerID, Sequence: m.Sequence, Codec: m.Codec,
		Format: m.Format}
	c.appendRecords(&h, m, size)
	c.queueAck(pendingAck{client: client, requestID: m.RequestID, base: h.BaseOffset, end: h.End(), count: h.Count,
		bytes: uint32(size)})
}

// appendRecords queues one batch of the owner's on the record log and sends it to live followers.
func (c *Copy) appendRecords(h *BatchHeader, m *wire.Produce, size int) {
	assert.True(h.BaseOffset == c.rec.appended, "stream: owner append off its tail")
	idx := len(c.fx.Appends)
	c.fx.Appends = append(c.fx.Appends, Append{Log: wire.LogRecords, Header: *h, Payload: m.Batch,
		PayloadSum: m.BatchSum, PayloadSummed: m.BatchSummed})
	c.rec.appended = h.End()
	c.rec.unsynced.push(pendingBytes{end: h.End(), size: size})
	c.rec.bytes += size
	c.runs.observe(h.BaseOffset, h.Epoch)
	c.producers.observe(h)
	for i := range c.followers {
		c.sendLive(i, idx, h, size)
	}
}

// queueAck answers a produce now if the confirmed tail passed it, else when it does.
func (c *Copy) queueAck(a pendingAck) {
	if a.end <= c.confirmed && c.acks.len() == 0 {
		c.answer(&a)
		return
	}
	c.acks.push(a)
}

func (c *Copy) answer(a *pendingAck) {
	r := Reply{Client: a.client, Kind: ReplyProduce, ProduceBytes: a.bytes}
	r.Produce = wire.ProduceReply{RequestID: a.requestID, Stream: c.cfg.Stream, Incarnation: c.cfg.Incarnation,
		Epoch: c.asg.Epoch, BaseOffset: a.base, Count: a.count, Duplicate: a.duplicate}
	c.fx.Replies = append(c.fx.Replies, r)
}

// updateConfirmed recomputes the confirmed tail by the one rule and answers what it passed.
func (c *Copy) updateConfirmed() {
	own := c.rec.durable
	if c.broken.ackEarly {
		own = c.rec.appended
	}
	c.tails[0] = own
	for i := range c.followers {
		c.tails[i+1] = c.followers[i].match
	}
	t := confirmedTail(c.tails, c.w)
	t = min(t, own) // the owner serves reads from its own durable log
	assert.True(t >= c.confirmed, "stream: confirmed tail went back")
	if t == c.confirmed {
		return
	}
	c.confirmed = t
	for c.acks.len() > 0 && c.acks.front().end <= c.confirmed {
		c.answer(c.acks.front())
		c.acks.pop()
	}
	c.wakeFetches()
}

// refuseWaiting answers every produce and parked fetch with a refusal: the copy can no longer
// confirm them (its log failed, or it was sealed). A produce refused here may still be confirmed by
// a later owner; its producer retries with the same sequence and is answered from the table.
func (c *Copy) refuseWaiting(code wire.ErrorCode, msg string) {
	c.refuseDeletes(code, msg)
	for i := range c.epochHeld {
		c.refuse(c.epochHeld[i].client, c.epochHeld[i].m.RequestID, code, msg)
	}
	c.dropHeld()
	for c.acks.len() > 0 {
		a := c.acks.front()
		c.refuse(a.client, a.requestID, code, msg)
		c.acks.pop()
	}
	for i := range c.fetches {
		f := &c.fetches[i]
		if f.inUse && !f.reading {
			c.refuse(f.client, f.req.RequestID, code, msg)
			c.freeFetch(i)
		}
	}
}

// confirmedTail is the w-th highest of tails (1 <= w <= len(tails)). It sorts tails in place,
// descending; a copy set is a handful of entries, so an insertion sort.
func confirmedTail(tails []uint64, w int) uint64 {
	assert.True(w >= 1 && w <= len(tails), "stream: confirm count outside the copy set")
	for i := 1; i < len(tails); i++ {
		for j := i; j > 0 && tails[j] > tails[j-1]; j-- {
			tails[j], tails[j-1] = tails[j-1], tails[j]
		}
	}
	return tails[w-1]
}

// heldProduce is a produce a new owner holds until its log-epoch entry is durable, its batch copied
// (the message's aliases the receive buffer).
type heldProduce struct {
	client uint64
	m      wire.Produce
}

// holdForEpoch holds a produce that reached the owner while its log-epoch entry is being made
// durable, and reports whether it did. The entry is one fdatasync; the client learned of this owner
// from the assignment that asked for it, and a refusal sent it into its backoff, so the first
// confirm after a failover waited for a backoff step rather than for the disk. Held produces are
// taken in arrival order once the entry is durable (EpochDone), and refused with what waits when the
// copy is sealed, reassigned or its log fails. Only a produce whose one refusal would be the epoch
// entry (requestRefusal) is held, within ProducesMax and PendingBytesMax; the rest are refused as
// before (CodeUnavailable). Each held batch is copied: a failover's rare path, not the record path.
func (c *Copy) holdForEpoch(client uint64, m *wire.Produce) bool {
	if len(c.epochHeld) >= c.cfg.ProducesMax || c.epochHeldBytes+len(m.Batch) > c.cfg.PendingBytesMax {
		return false
	}
	h := heldProduce{client: client, m: *m}
	h.m.Batch = bytes.Clone(m.Batch)
	c.epochHeld = append(c.epochHeld, h)
	c.epochHeldBytes += len(m.Batch)
	return true
}

// takeHeld hands the produces held for the epoch entry to onProduce, in arrival order.
func (c *Copy) takeHeld() {
	held := c.epochHeld
	c.dropHeld()
	for i := range held {
		c.onProduce(held[i].client, &held[i].m)
	}
}

func (c *Copy) dropHeld() {
	c.epochHeld, c.epochHeldBytes = nil, 0
}
