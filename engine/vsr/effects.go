package vsr

import (
	"github.com/ringstream/ringstream/internal/assert"
	"github.com/ringstream/ringstream/wire"
)

// Effects is what the replica asks its driver (the shard through engine/metagroup, or engine/sim) to do.
// Ready returns it; the driver must keep this order:
//
//  1. If PersistID is not zero: write Snapshot (when not nil) to the snapshot slot SnapshotSlot and
//     fsync it; append Entries to the log and write Superblock, carrying the same records inline, to
//     every copy of its area (AreaOf), one fsync for both (records over InlineMax: append and fsync
//     them first, then copies without them; see storage.go). Only when all of it is durable, call
//     Advance(PersistID). Persists complete in PersistID
//     order. A persist that fails (EIO, ENOSPC) must never be reported to Advance: the driver calls
//     PersistFailed instead, and the replica stops taking part (see PersistFailed).
//  2. Send Messages. Every message that depends on durable state (prepare-ok, start-view-change,
//     do-view-change, start-view) is held inside the replica until Advance covers the persist that made
//     that state durable, so everything in Messages may leave at once, before or during step 1.
//  3. Deliver Replies to the clients that asked.
//
// The slices alias memory the replica reuses: use them before the next call into the replica. Entry
// bodies and payloads are never changed once handed out, so a driver may keep them longer.
type Effects struct {
	PersistID    uint64
	Snapshot     []byte // checkpoint payload to write (AppendSnapshotRecord) before the log
	SnapshotSlot int
	Entries      []wire.VSREntry // log records to append (AppendLogRecord)
	Superblock   Superblock

	Messages []Envelope
	Replies  []Reply

	replyBytes []byte          // results of Replies
	entryBuf   []wire.VSREntry // entries of the prepares in Messages
}

// oneEntry returns a one-entry slice holding e, from memory the effects reuse.
func (fx *Effects) oneEntry(e wire.VSREntry) []wire.VSREntry {
	fx.entryBuf = append(fx.entryBuf, e)
	n := len(fx.entryBuf)
	return fx.entryBuf[n-1 : n : n]
}

// Envelope is one message for member index To.
type Envelope struct {
	To  uint8
	Msg wire.VSRMessage
}

// Reply is the result of a committed client request. Only the primary emits replies.
type Reply struct {
	Client  uint64
	Request uint64
	Op      uint64
	Result  []byte
}

// held is a message waiting for persist need to become durable.
type held struct {
	need uint64
	env  Envelope
}

// persistRecord remembers what one persist made durable.
type persistRecord struct {
	id      uint64
	view    uint32
	logView uint32
	op      uint64
}

// send queues m for member to. durable says that m vouches for state that must be on disk first.
func (r *Replica) send(to uint8, m wire.VSRMessage, durable bool) {
	assert.True(to != r.cfg.Self, "vsr: message to self")
	assert.True(int(to) < r.cfg.ReplicaCount, "vsr: message to a member index outside the group")
	m.Replica = r.cfg.Self
	env := Envelope{To: to, Msg: m}
	need := uint64(0)
	if durable && r.broken.sendsEarly(m.Command) {
		durable = false
	}
	if durable || (r.fresh && r.persistDurable == 0) {
		switch {
		case r.dirty:
			need = r.persistNext + 1
		case r.persistNext > r.persistDurable:
			need = r.persistNext
		}
	}
	if need == 0 {
		r.fx.Messages = append(r.fx.Messages, env)
		return
	}
	r.held = append(r.held, held{need: need, env: env})
}

// broadcast sends m to every other member.
func (r *Replica) broadcast(m wire.VSRMessage, durable bool) {
	for i := 0; i < r.cfg.ReplicaCount; i++ {
		if uint8(i) != r.cfg.Self {
			r.send(uint8(i), m, durable)
		}
	}
}

// Ready returns the effects gathered since the last call (see Effects for the order the driver keeps).
func (r *Replica) Ready() *Effects {
	r.fx, r.ready = r.ready, r.fx
	r.fx.Messages = r.fx.Messages[:0]
	r.fx.Replies = r.fx.Replies[:0]
	r.fx.replyBytes = r.fx.replyBytes[:0]
	r.fx.entryBuf = r.fx.entryBuf[:0]
	r.fx.Entries = r.fx.Entries[:0]
	fx := &r.ready
	fx.PersistID, fx.Snapshot = 0, nil
	if r.dirty {
		r.dirty = false
		r.persistNext++
		r.sequence++
		fx.PersistID = r.persistNext
		fx.Entries = append(fx.Entries[:0], r.pendingEntries...)
		r.pendingEntries = r.pendingEntries[:0]
		if r.pendingSnapshot != nil {
			fx.Snapshot = r.pendingSnapshot
			r.snapSlot = 1 - r.snapSlot
			fx.SnapshotSlot = r.snapSlot
			r.pendingSnapshot = nil
		}
		fx.Superblock = r.superblock()
		r.persists = append(r.persists, persistRecord{id: r.persistNext, view: r.view, logView: r.logView,
			op: r.op})
	} else {
		fx.Entries = fx.Entries[:0]
	}
	return fx
}

// Advance reports that every persist up to id is durable. Messages held for them go out with the next
// Ready, and the primary counts its own durable ops toward commits.
func (r *Replica) Advance(id uint64) {
	assert.True(id <= r.persistNext, "vsr: advance past the last persist handed out")
	if r.status == statusFailed {
		return // a later persist failed: nothing after it counts
	}
	if id <= r.persistDurable {
		return
	}
	r.persistDurable = id
	done := 0
	for ; done < len(r.persists) && r.persists[done].id <= id; done++ {
		p := r.persists[done]
		if r.status == statusNormal && p.view == r.view && p.logView == r.view {
			r.durableOp = max(r.durableOp, min(p.op, r.op))
		}
	}
	r.persists = append(r.persists[:0], r.persists[done:]...)
	kept := r.held[:0]
	for _, h := range r.held {
		if h.need <= r.persistDurable {
			r.fx.Messages = append(r.fx.Messages, h.env)
		} else {
			kept = append(kept, h)
		}
	}
	r.held = kept
	if r.isPrimary() {
		r.primaryCommit()
	}
}

// superblock is the durable state as of now.
func (r *Replica) superblock() Superblock {
	return Superblock{Sequence: r.sequence, View: r.view, LogView: r.logView, Op: r.op, Head: r.headAt(r.op),
		Commit: r.commit, SnapshotOp: r.snapOp, SnapshotChecksum: r.snapChecksum, Identity: r.identity,
		Recovering: r.status == statusRecovering}
}
