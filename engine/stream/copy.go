package stream

import (
	"fmt"
	"slices"

	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/internal/assert"
	"github.com/ringstream/ringstream/wire"
)

// Role is what the copy is at its assignment.
type Role uint8

const (
	RoleOpening  Role = 0 // storage not yet opened: serves nothing
	RoleOwner    Role = 1 // appends produces, replicates, confirms
	RoleFollower Role = 2 // appends what the owner sends and acknowledges durable tails
	RoleSealed   Role = 3 // fenced at a newer epoch: serves nothing until a new assignment
)

func (r Role) String() string {
	switch r {
	case RoleOpening:
		return "opening"
	case RoleOwner:
		return "owner"
	case RoleFollower:
		return "follower"
	case RoleSealed:
		return "sealed"
	}
	return fmt.Sprintf("role(%d)", uint8(r))
}

// logState is one log's tails as the copy knows them: what it has queued (appended) and what the
// host reported durable, with the bytes of the appends not yet durable.
type logState struct {
	appended uint64
	durable  uint64
	unsynced fifo[pendingBytes]
	bytes    int // bytes in unsynced
}

// pendingBytes is one append not yet durable: the offset after it and its encoded size.
type pendingBytes struct {
	end  uint64
	size int
}

// Copy is one copy of one stream at one assignment, as a pure state machine. Every method runs on
// the host's goroutine (the owning shard's); none blocks, reads the clock or does I/O.
type Copy struct {
	cfg    Config
	asg    meta.Assignment
	starts []meta.HistoryStart
	w      int // confirm count of asg

	role          Role
	fence         uint32 // the fence epoch storage reported
	failed        bool   // a log failed: nothing is served until reopened
	epochPending  bool   // a log-epoch entry is being made durable
	restarted     bool   // owner reopened within its own epoch: waits for a new one
	quorumLost    bool   // owner: no quorum heard within commit_heartbeat_timeout (R24): serves nothing
	reassigned    bool   // Reassign ran: OpenDone takes the storage state the copy already knows
	epochs        []wire.LogEpoch
	head          uint64 // retained head of the record log
	observed      bool   // ObserveBatch saw a batch: from observedStart to observedEnd
	observedStart uint64
	observedEnd   uint64
	runs          epochRuns
	rec, cur      logState
	confirmed     uint64
	readFloor     uint64 // owner: the confirmed tail it must reach before it serves a read (its tail when it took the role)
	heard         int    // owner: followers that answered a prepare at this epoch since it took the role
	now           uint64 // ticks

	// Owner state.
	followers   []progress
	acks        fifo[pendingAck]
	producers   producerTable
	fetches     []fetchSlot
	parked      int // fetches waiting for the confirmed tail
	cursors     map[string]*uint64
	cursorDue   uint64 // tick at which queued cursor events are synced; 0: none queued
	deletes     fifo[pendingDelete]
	cursorNames []string // scratch of onListCursors
	tails       []uint64

	// Follower state.
	agreed      uint64 // end of the furthest prepare accepted in this epoch
	ackBase     uint64 // base offset of the last prepare accepted
	ackDue      bool
	scratch     []decodedBatch
	cursorAck   bool
	ownerCommit uint64 // the owner's confirmed tail, from its prepares
	owed        OwedProbe
	// lastAnswer is the follower's last answer to its owner (lastEpochs its log epochs), sent again
	// when its link to the owner comes up (PeerUp): one sent while that link was down was dropped.
	lastAnswer wire.StreamPrepareOK
	lastEpochs []wire.LogEpoch

	// Produces held while the owner's log-epoch entry is made durable (owner.go, holdForEpoch).
	epochHeld      []heldProduce
	epochHeldBytes int

	fx, ready Effects
	stats     Stats
	broken    broken
}

// broken holds the test-only broken variants (export_test.go); all false in production.
type broken struct {
	ackEarly bool // count the owner's appended tail, not its durable one
}

// New makes a copy of cfg's stream at assignment a (with the stream's history starts, kept for the
// seal of a later assignment). It serves nothing until the host reports OpenDone.
func New(cfg Config, a meta.Assignment, starts []meta.HistoryStart) (*Copy, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := checkAssignment(cfg.Self, a); err != nil {
		return nil, err
	}
	c := &Copy{cfg: cfg.withDefaults(), asg: a, starts: slices.Clone(starts), w: a.ConfirmCount()}
	c.asg.Followers = slices.Clone(a.Followers)
	c.producers.init(c.cfg.ProducersMax)
	return c, nil
}

// OpenState is what the host found when it opened the copy's storage.
type OpenState struct {
	RecordHead uint64 // retained head of the record log
	RecordTail uint64 // durable record tail
	CursorTail uint64 // durable cursor event tail
	Fence      uint32 // fence epoch (0 if never sealed)
	LogEpochs  []wire.LogEpoch
}

// ObserveBatch feeds the header of one retained record batch, in offset order, before OpenDone: the
// copy rebuilds its producer table and the epochs of its records from them. Headers that do not
// follow each other (an offset gap or overlap, an epoch going back) are refused with ErrBatchOrder:
// the log is damaged, and the host reports the copy instead of serving it.
func (c *Copy) ObserveBatch(h BatchHeader) error {
	assert.True(c.role == RoleOpening, "stream: ObserveBatch after open")
	switch {
	case h.Count == 0:
		return fmt.Errorf("%w: batch at %d without records", ErrBatchOrder, h.BaseOffset)
	case c.observed && h.BaseOffset != c.observedEnd:
		return fmt.Errorf("%w: batch at %d after one ending at %d", ErrBatchOrder, h.BaseOffset, c.observedEnd)
	case len(c.runs.runs) > 0 && h.Epoch < c.runs.runs[len(c.runs.runs)-1].epoch:
		return fmt.Errorf("%w: batch at %d of epoch %d after epoch %d", ErrBatchOrder, h.BaseOffset, h.Epoch,
			c.runs.runs[len(c.runs.runs)-1].epoch)
	}
	if !c.observed {
		c.observedStart = h.BaseOffset
	}
	c.observed, c.observedEnd = true, h.End()
	c.runs.observe(h.BaseOffset, h.Epoch)
	c.producers.observe(&h)
	return nil
}

// ObserveCursor feeds one consumer's committed offset (from storage's cursor state) before OpenDone.
func (c *Copy) ObserveCursor(name []byte, off uint64) {
	assert.True(c.role == RoleOpening, "stream: ObserveCursor after open")
	c.setCursor(name, off)
}

// OpenDone takes the copy's storage state and starts its role: the owner at its own tails, a follower
// waiting for the owner, a copy fenced past its assignment sealed. A copy that needs a log-epoch entry
// for its epoch asks for it (Effects.Epochs) and serves once EpochDone reports it durable.
func (c *Copy) OpenDone(o OpenState) {
	assert.True(c.role == RoleOpening, "stream: OpenDone twice")
	assert.True(o.RecordHead <= o.RecordTail, "stream: record head past the tail")
	if c.reassigned {
		c.reassigned = false
		assert.True(o.RecordTail == c.rec.durable && o.CursorTail == c.cur.durable, "stream: reopened at other tails than it knows")
	} else {
		assert.True(o.RecordHead == o.RecordTail || (c.observed && c.observedStart == o.RecordHead && c.observedEnd == o.RecordTail),
			"stream: open without every retained batch header fed")
	}
	c.head = o.RecordHead
	c.rec = logState{appended: o.RecordTail, durable: o.RecordTail}
	c.cur = logState{appended: o.CursorTail, durable: o.CursorTail}
	c.fence = o.Fence
	c.epochs = append(c.epochs[:0], o.LogEpochs...)
	last := uint32(0)
	if n := len(c.epochs); n > 0 {
		last = c.epochs[n-1].Epoch
	}
	if c.fence > c.asg.Epoch || last > c.asg.Epoch {
		c.role = RoleSealed // fenced, or already following a newer epoch: this assignment is stale
		return
	}
	if c.asg.Owner == c.cfg.Self {
		c.becomeOwner(last)
	} else {
		c.role = RoleFollower
	}
	if last < c.asg.Epoch {
		e := wire.LogEpoch{Epoch: c.asg.Epoch, RecordStart: c.rec.durable, CursorStart: c.cur.durable}
		c.epochs = append(c.epochs, e)
		c.fx.Epochs = append(c.fx.Epochs, e)
		c.epochPending = true
	}
}

// EpochDone reports the log-epoch entry of the copy's epoch durable (err nil) or failed.
func (c *Copy) EpochDone(epoch uint32, err error) {
	if !c.epochPending || epoch != c.asg.Epoch {
		return
	}
	c.epochPending = false
	if err != nil {
		c.failLogs()
		return
	}
	c.answerOwedProbe()
	if c.role == RoleOwner {
		c.updateConfirmed() // W = 1: the owner's own durable tail is the confirmed tail at once
		for i := range c.followers {
			c.probe(i)
		}
		c.takeHeld()
	}
}

// Sealed reports that storage fenced the copy at epoch (a seal, durable). From then on the copy
// refuses produces and prepares of older epochs; waiting produces are refused as sealed.
func (c *Copy) Sealed(epoch uint32) {
	if epoch < c.fence || epoch <= c.asg.Epoch {
		return
	}
	c.fence = epoch
	c.role = RoleSealed
	c.refuseWaiting(wire.CodeFenced, msgSealed)
}

// AppendDone reports log's durable tail at end: every append up to end is fsynced.
func (c *Copy) AppendDone(log wire.LogKind, end uint64) {
	l := c.logOf(log)
	assert.True(end >= l.durable, "stream: durable tail went back")
	assert.True(end <= l.appended, "stream: durable tail past what was appended")
	for l.unsynced.len() > 0 && l.unsynced.front().end <= end {
		l.bytes -= l.unsynced.front().size
		l.unsynced.pop()
	}
	l.durable = end
	switch c.role {
	case RoleOwner:
		if log == wire.LogRecords {
			c.updateConfirmed()
		} else {
			c.confirmDeletes()
		}
		c.kickAll()
	case RoleFollower:
		if log == wire.LogRecords {
			c.ackDue = true
		} else {
			c.cursorAck = true
		}
	}
}

// LogFailed reports that a log failed (a write or fsync error): the copy serves nothing until the
// host reopens it, and refuses what waits.
func (c *Copy) LogFailed(wire.LogKind) {
	c.failLogs()
}

func (c *Copy) failLogs() {
	if c.failed {
		return
	}
	c.failed = true
	c.refuseWaiting(wire.CodeLogFailed, msgLogFailed)
}

func (c *Copy) logOf(log wire.LogKind) *logState {
	if log == wire.LogCursors {
		return &c.cur
	}
	assert.True(log == wire.LogRecords, "stream: unknown log")
	return &c.rec
}

// Ticking says whether the copy times anything: an owner with followers (their probes), a waiting
// fetch (its deadline) or a cursor sync due. Every timer the copy runs counts its own ticks from
// when it started, so a copy that times nothing needs no tick: a host may skip Tick while Ticking
// is false (reading it again after each Ready, since only inputs start timers), and 10,000 idle
// copies then cost a shard's tick nothing. Skipped ticks stop the copy's clock, which no timer
// reads then.
func (c *Copy) Ticking() bool {
	return c.role == RoleOwner && (len(c.followers) > 0 || c.parked > 0 || c.cursorDue != 0)
}

// Tick advances the copy's timers by one tick: probes of silent followers, fetch deadlines, the
// cursor sync. A copy that is not Ticking has none, so the tick leaves Ready nothing to do.
func (c *Copy) Tick() {
	c.now++
	if !c.Ticking() {
		return
	}
	for i := range c.followers {
		c.onFollowerTick(i)
	}
	c.onFetchTick()
	if c.cursorDue != 0 && c.now >= c.cursorDue {
		c.cursorDue = 0
		c.fx.SyncCursors = true
	}
}

// Ready returns the effects gathered since the last call; see Effects for the order the host keeps.
func (c *Copy) Ready() *Effects {
	if c.role == RoleFollower && !c.failed {
		c.followerAcks()
	}
	if c.role == RoleOwner && !c.failed {
		for i := range c.followers {
			c.sendUnsynced(i)
		}
	}
	c.fx, c.ready = c.ready, c.fx
	c.fx.reset()
	for i := range c.followers {
		c.followers[i].fxPrepare = -1
	}
	hb := &c.ready.Heartbeat
	hb.Role, hb.Epoch, hb.Commit, hb.State = c.role, c.asg.Epoch, c.confirmed, wire.HeartbeatIdle
	if c.role == RoleOwner {
		if c.acks.len() > 0 || c.confirmed < c.rec.appended {
			hb.State = wire.HeartbeatBusy
		}
		for i := range c.followers {
			if c.followers[i].match >= c.confirmed {
				hb.Holders = append(hb.Holders, c.followers[i].node)
			}
		}
	}
	return &c.ready
}

// CommitSeen takes the owner's confirmed tail as a follower hears it in the owner's Commit entries
// (R8): the follower's Confirmed follows it. Entries of another epoch are ignored.
func (c *Copy) CommitSeen(epoch uint32, commit uint64) {
	if c.role == RoleFollower && epoch == c.asg.Epoch {
		c.ownerCommit = max(c.ownerCommit, commit)
	}
}

// RetainLimit is the offset retention may not pass: records at or above it are not known to be
// confirmed, so the seal of a later failover may still need them.
func (c *Copy) RetainLimit() uint64 {
	if c.role == RoleOwner {
		return c.confirmed
	}
	return min(c.ownerCommit, c.rec.durable)
}

// HeadMoved reports that retention moved the record log's head to head (at most RetainLimit). Fetches
// below it are refused.
func (c *Copy) HeadMoved(head uint64) {
	assert.True(head >= c.head, "stream: retained head went back")
	assert.True(head <= c.rec.durable, "stream: retained head past the durable tail")
	c.head = head
}

// Failed reports whether a log failed: the copy serves nothing until it is made again.
func (c *Copy) Failed() bool { return c.failed }

// Quiet reports whether every append the copy asked for was reported durable (AppendDone), on both
// logs: Reassign needs it.
func (c *Copy) Quiet() bool {
	return c.rec.appended == c.rec.durable && c.cur.appended == c.cur.durable
}

// Role is the copy's role now.
func (c *Copy) Role() Role { return c.role }

// Restarted reports whether the copy is an owner that reopened within its own epoch: it serves nothing
// and may have lost records its followers hold. Its host publishes wire.CopyOwnerRestarted and applies
// no assignment that keeps it owner until a seal at that assignment's epoch reached it, so only a
// recovery (which seals every copy and promotes the furthest) moves it on.
func (c *Copy) Restarted() bool { return c.role == RoleOwner && c.restarted }

// QuorumLost reports that the owner heard fewer than W copies, itself included, within
// commit_heartbeat_timeout (R24): until QuorumHeard it refuses produces, fetches and cursor requests
// as unavailable, since the controller may already have a newer owner confirming records it lacks.
// Fetches already parked at the tail wait on (they see nothing newer: the confirmed tail cannot move).
// A follower ignores it.
func (c *Copy) QuorumLost() {
	if c.role == RoleOwner {
		c.quorumLost = true
	}
}

// QuorumHeard ends QuorumLost: the owner heard W copies again.
func (c *Copy) QuorumHeard() { c.quorumLost = false }

// LostQuorum reports whether the copy is an owner in QuorumLost.
func (c *Copy) LostQuorum() bool { return c.role == RoleOwner && c.quorumLost }

// Assignment is the assignment the copy serves.
func (c *Copy) Assignment() meta.Assignment { return c.asg }

// Confirmed is the confirmed tail: on the owner, the W-th highest durable tail of the copies
// (capped at its own); on a follower, the owner's as its prepares carried it.
func (c *Copy) Confirmed() uint64 {
	if c.role == RoleOwner {
		return c.confirmed
	}
	return c.ownerCommit
}

// Tails are the copy's appended and durable record tails.
func (c *Copy) Tails() (appended, durable uint64) { return c.rec.appended, c.rec.durable }

// LogEpochs are the copy's log epochs, its own role changes (aliasing the copy's memory).
func (c *Copy) LogEpochs() []wire.LogEpoch { return c.epochs }
