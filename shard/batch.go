package shard

import (
	"github.com/ringstream/ringstream/shard/heartbeat"
	"github.com/ringstream/ringstream/wire"
)

// flush builds this tick's batches: one Commit batch per peer node holding every entry this shard owes
// it (R11), then one CommitReply batch per peer from the reply outbox (R27), and starts the sends.
// Entries are encoded in place at the end of each link's outbox; nothing is allocated per entry. A
// group whose superblock save is still in flight or failed is left out (R12); one whose save
// completes later goes in that turn's late batch (flushLate), so no save holds back the other
// groups or the replies. Only the groups polled this tick (polled) can owe entries: a group that owes
// never sleeps (sleep.go).
func (s *Shard) flush(polled []*groupSlot) {
	for _, gs := range polled {
		if gs.role != RolePrimary {
			continue
		}
		owed, state := gs.primary.Owed()
		if owed == 0 {
			continue
		}
		switch gs.save {
		case saveInFlight:
			// R12: left out of this batch; it goes in the late batch of the turn its save completes.
			s.stats.EntriesAwaitingSave.Add(uint64(owed.Count()))
			continue
		case saveFailed:
			// R12: left out; its entries stay owed and go in a later batch.
			s.stats.EntriesDeferredSave.Add(uint64(owed.Count()))
			continue
		}
		gs.save = saveNone
		s.appendGroup(gs, owed, state)
	}
	for _, l := range s.links {
		l.endBatches()
		l.kick()
	}
}

// appendGroup appends one group's owed entries to the batches of their members' links and records what
// went out. Whether each send reached a connected link (R25) is recorded from the send's outcome: at
// once for a link that is down, when the outbox's send completes or fails for one that is up.
func (s *Shard) appendGroup(gs *groupSlot, owed heartbeat.Members, state heartbeat.State) {
	ts := gs.primary.Timestamp(s.nowNs)
	e := wire.CommitEntry{
		Group:              gs.id,
		Incarnation:        gs.g.Incarnation(),
		View:               gs.primary.View(),
		Commit:             gs.primary.Commit(),
		TimestampMonotonic: ts,
		HeartbeatState:     wire.HeartbeatState(state),
		Replica:            gs.self,
	}
	var sent heartbeat.Members
	for i := uint8(0); i < heartbeat.MembersMax; i++ {
		if !owed.Has(i) {
			continue
		}
		l := gs.links[i]
		if l == nil {
			// A member on a node that is not a peer (misconfiguration): counted as a dropped send.
			s.stats.EntriesDroppedLinkDown.Add(1)
			sent |= heartbeat.MemberOf(i)
			gs.primary.RecordLink(i, false)
			continue
		}
		if !l.isUp() {
			s.stats.EntriesDroppedLinkDown.Add(1)
			sent |= heartbeat.MemberOf(i)
			gs.primary.RecordLink(i, false)
			continue
		}
		if !l.appendCommit(e) {
			s.stats.EntriesDeferredFull.Add(1) // R13: never split; it goes in a later batch
			continue
		}
		sent |= heartbeat.MemberOf(i)
		l.records = append(l.records, sendRecord{gs: gs, member: i}) // R25: recorded when the send ends
	}
	if sent != 0 {
		gs.primary.Sent(sent, ts)
		s.stats.CommitEntriesSentByState[state].Add(uint64(sent.Count()))
	}
}

// kickLinks starts the sends that group frames queued during this loop turn.
func (s *Shard) kickLinks() {
	for _, l := range s.links {
		l.kick()
	}
}

// appendCommit appends one Commit entry to this tick's batch, opening it on the first entry. It
// returns false when the outbox has no room left for it.
func (l *link) appendCommit(e wire.CommitEntry) bool {
	need := wire.CommitEntrySize
	if !l.batchOpen {
		need += wire.HeaderSize
	}
	if len(l.out)+need > cap(l.out) {
		return false
	}
	if !l.batchOpen {
		l.out = l.batch.Begin(l.out, wire.CommandCommit, l.s.cfg.Cluster, l.s.cfg.Node)
		l.batchOpen = true
	}
	l.out = l.batch.AppendCommit(l.out, e)
	return true
}

// queueReply adds a reply to the reply outbox. It returns false when the outbox is full.
func (l *link) queueReply(e wire.CommitReplyEntry) bool {
	if len(l.replies) == cap(l.replies) {
		return false
	}
	l.replies = append(l.replies, e)
	return true
}

// endCommitBatch closes the Commit batch being built, if any.
func (l *link) endCommitBatch() {
	if !l.batchOpen {
		return
	}
	st := &l.s.stats
	n := l.batch.Count()
	l.out = l.batch.End(l.out)
	l.batchOpen = false
	st.CommitBatchesSent.Add(1)
	st.CommitEntriesSent.Add(uint64(n))
}

// endBatches closes this tick's Commit batch and adds the reply batch (R11, R27). Replies to a peer
// whose link is down, or that do not fit, are dropped with their batch (R30).
func (l *link) endBatches() {
	st := &l.s.stats
	l.endCommitBatch()
	if len(l.replies) == 0 {
		return
	}
	n := len(l.replies)
	if l.state != linkUp || len(l.out)+wire.HeaderSize+n*wire.CommitReplyEntrySize > cap(l.out) {
		st.RepliesDroppedLinkDown.Add(uint64(n))
		l.replies = l.replies[:0]
		return
	}
	var w wire.BatchWriter
	l.out = w.Begin(l.out, wire.CommandCommitReply, l.s.cfg.Cluster, l.s.cfg.Node)
	for i := range l.replies {
		l.out = w.AppendCommitReply(l.out, l.replies[i])
	}
	l.out = w.End(l.out)
	st.ReplyBatchesSent.Add(1)
	st.ReplyEntriesSent.Add(uint64(n))
	l.replies = l.replies[:0]
}

// sendRecord is one Commit entry in an outbox: the group and the member it is for (R25).
type sendRecord struct {
	gs     *groupSlot
	member uint8
}

// recordSends tells each group whose entry was in recs whether its send reached the connected link.
func recordSends(recs []sendRecord, connected bool) {
	for i, r := range recs {
		if !r.gs.removed {
			r.gs.primary.RecordLink(r.member, connected)
		}
		recs[i] = sendRecord{}
	}
}
