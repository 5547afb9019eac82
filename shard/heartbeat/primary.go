package heartbeat

import (
	"math/bits"

	"github.com/ringstream/ringstream/internal/assert"
)

// MembersMax bounds member indexes: a group's members are 0 to MembersMax-1.
const MembersMax = 32

// Members is a set of member indexes, bit i for member index i.
type Members uint32

// Has says whether member index i is in the set.
func (m Members) Has(i uint8) bool { return i < MembersMax && m&(1<<i) != 0 }

// Count is the number of members in the set.
func (m Members) Count() int { return bits.OnesCount32(uint32(m)) }

// MemberOf returns the set holding only member index i.
func MemberOf(i uint8) Members {
	assert.True(i < MembersMax, "heartbeat: member index out of range")
	return 1 << i
}

// Primary is the heartbeat side of one group this node leads. The shard (or the simulator) calls, per
// tick and in this order: Committed whenever commit_min moves, Plan once, then Owed, Timestamp and Sent
// for what it put into batches, RecordLink after the send, OnReply for each CommitReply entry, and
// QuorumLost. The zero Primary is stopped; Start puts it on the schedule.
type Primary struct {
	ticks   Ticks
	running bool

	view    uint32
	commit  uint64
	self    uint8
	backups Members
	quorum  int

	busy        bool
	changeTick  uint64 // tick of the last new view or commit_min
	firstDue    bool   // the first heartbeat after Start is still to be planned (R2)
	eager       Members
	owed        Members
	owedState   State
	timestamp   uint64 // last timestamp_monotonic stamped; survives Start (R14)
	linkUp      Members
	windowStart uint64 // tick the quorum window was opened (Start)
	quorumLost  bool   // QuorumLost reported, and no quorum heard since (R24)
	lostTick    uint64 // tick it was reported
	tick        uint64 // the newest tick the caller passed: the tick Sent stamps its mark with

	heardTick   [MembersMax]uint64 // per backup: the send tick of the Commit its last counted reply answers
	replyStamps [MembersMax]uint64 // timestamp_monotonic of each backup's last counted reply

	// marks maps timestamps back to send ticks (R24): a ring of (timestamp, tick) pairs, one taken
	// at the first Sent at least markEvery ticks after the one before, so marksMax of them span the
	// quorum window. A timestamp below every mark was sent before Start or outside the window.
	marks     [marksMax]sendMark
	markNext  int // slot of the next mark
	markCount int
	markEvery uint64
}

// marksMax is the size of a Primary's ring of send marks: with marks taken at least
// window/(marksMax-1) ticks apart the ring spans the window, and a reply's send tick is known to
// within that spacing (rounded down: a reply never counts as heard later than its Commit was sent).
const marksMax = 32

// sendMark is one entry of the send marks: the first timestamp stamped at tick.
type sendMark struct{ stamp, tick uint64 }

// Start puts the group on the schedule as primary of view with commit_min commit: at tick now it came
// online or became primary. self is its own member index, backups the other members, quorum the count
// of members (self included) whose replies keep the primary in office (R24). Its first heartbeat goes
// on the next send tick (R2). It starts busy.
func (p *Primary) Start(t Ticks, now uint64, view uint32, commit uint64, self uint8, backups Members, quorum int) {
	assert.True(self < MembersMax, "heartbeat: self index out of range")
	assert.True(!backups.Has(self), "heartbeat: primary listed among its backups")
	assert.True(quorum >= 1, "heartbeat: quorum below one")
	assert.True(quorum <= backups.Count()+1, "heartbeat: quorum above member count")
	timestamp := p.timestamp
	*p = Primary{
		ticks: t, running: true, view: view, commit: commit, self: self, backups: backups, quorum: quorum,
		busy: true, changeTick: now, firstDue: true, timestamp: timestamp, windowStart: now, tick: now,
		markEvery: max(1, (t.HeartbeatTimeoutTicks+marksMax-2)/(marksMax-1)),
	}
	for i := range p.heardTick {
		p.heardTick[i] = now
	}
}

// Stop takes the group off the schedule (it stepped down or went offline). Timestamps keep growing
// across a later Start.
func (p *Primary) Stop() {
	p.running = false
	p.owed = 0
	p.eager = 0
	p.owedState = StateNone
}

// Running says whether the group is on the schedule.
func (p *Primary) Running() bool { return p.running }

// Busy says whether the group is busy (R20).
func (p *Primary) Busy() bool { return p.busy }

// View and Commit are the values the next entries carry.
func (p *Primary) View() uint32   { return p.view }
func (p *Primary) Commit() uint64 { return p.commit }

// Backups is the set of member indexes owed heartbeats.
func (p *Primary) Backups() Members { return p.backups }

// Committed reports that commit_min moved to commit at tick now, and which backups hold the newly
// committed op: those are owed an eager Commit in the next batch (R6). A new commit point makes the
// group busy (R20).
func (p *Primary) Committed(now uint64, commit uint64, holders Members) {
	assert.True(p.running, "heartbeat: commit on a stopped primary")
	assert.True(commit >= p.commit, "heartbeat: commit went backwards")
	if commit == p.commit {
		return
	}
	p.commit = commit
	p.busy = true
	p.changeTick = now
	p.eager |= holders & p.backups
}

// Plan works out what the group owes on tick t and adds it to what it still owes. Call it once per tick,
// after every Committed of that tick.
func (p *Primary) Plan(t Tick) {
	if !p.running {
		return
	}
	p.tick = max(p.tick, t.Number)
	heartbeat := StateNone
	if t.Send {
		switch {
		case p.firstDue:
			heartbeat = StateBusy
		case p.busy && t.Number-p.changeTick >= p.ticks.HeartbeatTimeoutTicks:
			// R20: quiet for commit_heartbeat_timeout: idle from now, first idle heartbeat on this tick.
			p.busy = false
			heartbeat = StateIdle
		case p.busy:
			heartbeat = StateBusy
		case t.IdleSend:
			heartbeat = StateIdle
		}
		p.firstDue = false
	}
	if heartbeat != StateNone {
		// One entry per member per tick: the heartbeat carries the newest commit, so it stands for the
		// eager Commit too.
		p.owed = p.backups
		p.owedState = heartbeat
		p.eager = 0
		return
	}
	if p.eager != 0 {
		if p.owed == 0 {
			p.owedState = StateEager
		}
		p.owed |= p.eager
		p.eager = 0
	}
}

// Resting says whether the primary has nothing to do until the next send tick: off the schedule, or
// idle with nothing owed (a save in flight or a full outbox keeps entries owed). A resting primary's
// Plan does nothing on other ticks (an eager Commit follows a new commit point, which reaches the
// group as an input and makes it busy), so its shard may skip it until then (shard.Sleeper); its
// quorum window is then checked at that tick or when a reply arrives.
func (p *Primary) Resting() bool {
	return !p.running || (!p.busy && p.owed == 0)
}

// Owed returns the members this group owes an entry to, and the heartbeat_state those entries carry.
func (p *Primary) Owed() (Members, State) {
	if p.owed == 0 {
		return 0, StateNone
	}
	assert.True(p.owedState.Valid(), "heartbeat: owed entries without a state")
	return p.owed, p.owedState
}

// Timestamp returns the timestamp_monotonic for the entries sent at clock value now: max(now,
// previous+1), so it grows strictly per group (R14). Sent records it.
func (p *Primary) Timestamp(now uint64) uint64 { return max(now, p.timestamp+1) }

// Sent records that the entries to members went into batches stamped with timestamp. Members still owed
// an entry (left out, R12) keep owing it.
func (p *Primary) Sent(members Members, timestamp uint64) {
	assert.True(members&^p.owed == 0, "heartbeat: sent an entry that was not owed")
	assert.True(timestamp > p.timestamp, "heartbeat: timestamp did not grow")
	p.timestamp = timestamp
	p.mark(timestamp)
	p.owed &^= members
	if p.owed == 0 {
		p.owedState = StateNone
	}
}

// RecordLink records, after a batch send, whether the send to member reached a connected link (R25).
func (p *Primary) RecordLink(member uint8, connected bool) {
	if connected {
		p.linkUp |= MemberOf(member)
	} else {
		p.linkUp &^= MemberOf(member)
	}
}

// LinkConnected says whether the last send to member reached a connected link (R25).
func (p *Primary) LinkConnected(member uint8) bool { return p.linkUp.Has(member) }

// mark records that timestamp was stamped at the current tick, when the newest mark is at least
// markEvery ticks old (or there is none since Start).
func (p *Primary) mark(timestamp uint64) {
	if p.markCount > 0 && p.tick-p.marks[(p.markNext+marksMax-1)%marksMax].tick < p.markEvery {
		return
	}
	p.marks[p.markNext] = sendMark{stamp: timestamp, tick: p.tick}
	p.markNext = (p.markNext + 1) % marksMax
	p.markCount = min(p.markCount+1, marksMax)
}

// sentTick returns the tick the entry stamped timestamp was sent at, rounded down to the mark before
// it; false when it was sent before Start or before every mark kept (outside the window).
func (p *Primary) sentTick(timestamp uint64) (uint64, bool) {
	for k := 1; k <= p.markCount; k++ {
		m := p.marks[(p.markNext+marksMax-k)%marksMax]
		if m.stamp <= timestamp {
			return m.tick, true
		}
	}
	return 0, false
}

// ReplyVerdict says what a CommitReply entry did to the quorum window.
type ReplyVerdict uint8

const (
	ReplyFresh      ReplyVerdict = iota + 1 // counted: the member is heard in the window
	ReplyNotPrimary                         // the group is not running as primary
	ReplyOtherView                          // for another view
	ReplyNotBackup                          // replica is not a backup of this group
	ReplyFuture                             // echoes a timestamp this primary never stamped
	ReplyStale                              // not newer than the member's previous reply
	// ReplyExpired: answers a Commit sent before Start or commit_heartbeat_timeout or more ago (it
	// waited in the network, or for a paused primary): it says nothing about the member now.
	ReplyExpired
	// ReplyShort: counted, but the quorum is lost and this reply does not bring it back yet.
	ReplyShort
)

// OnReply handles one CommitReply entry at tick now (R24, R29). A reply hears its member as of the
// tick the Commit it answers was sent (its echoed timestamp), not as of its arrival. While the quorum
// is lost (QuorumLost reported), a counted reply is ReplyShort until a quorum of members is heard
// within the window by Commits sent since the loss: that reply is ReplyFresh, and the window watches
// again. So the group, which sees only ReplyFresh replies, serves again on the first one it gets
// after OnQuorumLost.
func (p *Primary) OnReply(now uint64, view uint32, timestamp uint64, replica uint8) ReplyVerdict {
	switch {
	case !p.running:
		return ReplyNotPrimary
	case view != p.view:
		return ReplyOtherView
	case !p.backups.Has(replica):
		return ReplyNotBackup
	case timestamp > p.timestamp:
		return ReplyFuture
	case timestamp <= p.replyStamps[replica]:
		return ReplyStale
	}
	p.tick = max(p.tick, now)
	sent, ok := p.sentTick(timestamp)
	if !ok || !p.within(now, sent) {
		return ReplyExpired
	}
	p.replyStamps[replica] = timestamp
	p.heardTick[replica] = sent
	if !p.quorumLost {
		return ReplyFresh
	}
	if !p.quorumHeard(now, p.lostTick) {
		return ReplyShort // this reply included: one to a Commit sent before the loss counts for nothing
	}
	p.quorumLost = false
	return ReplyFresh
}

// QuorumLost reports that at tick now the primary has not heard a quorum within
// commit_heartbeat_timeout, in both states (R24): the group must step down. It reports once per loss:
// again only after OnReply heard a quorum since (a second loss in the same view is reported too). It
// counts the primary itself.
func (p *Primary) QuorumLost(now uint64) bool {
	if !p.running || p.quorumLost {
		return false
	}
	p.tick = max(p.tick, now)
	if now-p.windowStart < p.ticks.HeartbeatTimeoutTicks || p.quorumHeard(now, 0) {
		return false
	}
	p.quorumLost, p.lostTick = true, now
	return true
}

// LostQuorum says whether a reported quorum loss still holds (no quorum heard since).
func (p *Primary) LostQuorum() bool { return p.running && p.quorumLost }

// within says whether a Commit sent at tick sent is inside the quorum window at tick now.
func (p *Primary) within(now, sent uint64) bool {
	return sent >= now || now-sent < p.ticks.HeartbeatTimeoutTicks
}

// quorumHeard says whether at tick now the primary hears a quorum, itself included: the backups whose
// last counted reply answers a Commit sent at or after tick from and inside the window. Start's
// presumption (every backup heard at Start) counts only while from is at most Start.
func (p *Primary) quorumHeard(now, from uint64) bool {
	heard := 1
	for i := uint8(0); i < MembersMax; i++ {
		if p.backups.Has(i) && p.heardTick[i] >= from && p.within(now, p.heardTick[i]) {
			heard++
		}
	}
	return heard >= p.quorum
}
