package shard

import (
	"errors"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ringstream/ringstream/internal/assert"
	"github.com/ringstream/ringstream/ring"
	"github.com/ringstream/ringstream/shard/heartbeat"
	"github.com/ringstream/ringstream/wire"
)

// Tags of the operations the Shard itself handles: the kind in the top byte, an index below.
const (
	tagKindShift         = 56
	tagTick       uint64 = 1 << tagKindShift
	tagWake       uint64 = 2 << tagKindShift
	tagAccept     uint64 = 5 << tagKindShift
	tagWakeRecv   uint64 = 6 << tagKindShift
	tagDrain      uint64 = 7 << tagKindShift
	tagIndexMask  uint64 = 1<<tagKindShift - 1
	msgTagWake    uint64 = 1
	inboxBudget          = 4096 // messages taken from one queue per loop turn, so a turn stays short
	tickSaveLimit        = 256  // superblock saves issued per tick at most (two ring ops each)
	tagSaveWrite  uint64 = 1    // a save's write, on its group's slot (the slot is the handler)
	tagSaveSync   uint64 = 2    // a save's fdatasync
)

// Shard is one shard: a goroutine locked to its OS thread, owning one ring, its groups, its outbound
// peer links and the connections accepted for it. Every field is touched by that goroutine only, except
// stats (atomics), the queues (single-producer single-consumer atomics) and stopping.
type Shard struct {
	node  *Node
	index int
	cfg   *Config
	log   *slog.Logger
	ring  ring.Ring
	rng   *rand.Rand
	// msgTarget is the ring as the backend built it, before Config.WrapRing: other shards' MsgRing
	// wakeups target it.
	msgTarget ring.Ring

	sched heartbeat.Schedule
	tick  heartbeat.Tick
	nowNs uint64
	// timerNs is the clock at the last tick the ring's timer ran (0 before the first): the next
	// one skips the ticks whose time passed in between (timerTick).
	timerNs uint64
	groups  []*groupSlot // sorted by id: the order batches are built in
	byID    map[uint64]*groupSlot
	// Sleeping groups (sleep.go): awake is polled every tick, alarms wake sleepers before the next
	// full poll at tick fullAt, polled is a partial tick's poll list.
	awake     []*groupSlot
	alarms    alarms
	polled    []*groupSlot
	fullAt    uint64
	sleeping  int     // groups asleep now
	primaries int     // groups whose slot is primary (the idle gauge counts the sleeping ones)
	links     []*link // one per peer node, sorted by node id
	byNode    map[uint16]*link
	conns     []*conn
	accept    bool // this shard accepts connections on the node's listener
	accepts   bool // an Accept is in flight
	// acceptRetry: the last Accept failed; the next tick posts a new one.
	acceptRetry bool

	cl clientShard // the client listener's socket and connections on this shard (client.go)

	inbound  []*spscQueue // inbound[j]: from shard j (nil for self)
	outbound []*spscQueue // outbound[j]: to shard j (nil for self)
	wakeOwed []bool

	late      []*groupSlot // groups whose save completed after their tick's flush: sent this turn (R12)
	turners   []*groupSlot // groups implementing TurnHook, in id order
	controls  controls
	tickArmed bool

	waker        *waker // any goroutine may wake the loop (Stop, Node.Run, Node.AddGroup)
	stopping     atomic.Bool
	draining     bool
	drainArmed   bool // the drain deadline is on the ring
	drainExpired bool // the drain deadline fired: what is still in flight is abandoned
	stats        Stats
	scratch      message
	header       wire.Header // the frame being handled (see handleFrame)

	sendLimit uint64 // tests only (export_test.go): past this tick, groups are no longer polled
}

// Stats returns the shard's counters.
func (s *Shard) Stats() *Stats { return &s.stats }

// Index is the shard's index on its node.
func (s *Shard) Index() int { return s.index }

// run is the shard loop. It is the one loop of the shard and it cannot end on its own: it returns only
// after Stop asked it to drain and every operation of the ring has completed, or the drain deadline
// passed.
func (s *Shard) run() {
	s.waker.arm(s.ring, s, tagWakeRecv)
	s.armTick()
	if s.accept {
		s.armAccept()
	}
	s.cl.start(s)
	for {
		if s.stopping.Load() && !s.draining {
			s.beginDrain()
		}
		if s.draining && s.drained() {
			return
		}
		if err := s.ring.Wait(1); err != nil {
			// Wait fails only on a broken ring; nothing the shard can do but stop cleanly.
			s.log.Error("shard: ring wait failed", "shard", s.index, "err", err)
			if s.draining || errors.Is(err, ring.ErrClosed) {
				// A second failure while draining: waiting again could spin for ever, so what is
				// still in flight is abandoned with the ring.
				s.stats.DrainAbandoned.Add(uint64(s.ring.InFlight()))
				return
			}
			s.beginDrain()
		}
		s.ring.Dispatch()
		if !s.draining {
			s.waker.arm(s.ring, s, tagWakeRecv)
		}
		if !s.tickArmed {
			s.armTick()
		}
		s.runControls()
		s.drainInbox()
		s.runTurnHooks()
		s.flushLate()
		s.resumeStalled()
		s.kickLinks()
		s.sendWakeups()
	}
}

// drained says whether a draining shard may end: nothing is left on its ring but its own timers (the
// drain deadline and the last tick), or that deadline passed (what is still in flight is then
// abandoned, and logged).
func (s *Shard) drained() bool {
	left := s.ring.InFlight()
	if s.drainArmed {
		left--
	}
	if s.tickArmed {
		left-- // a timer touches nothing but its own slot: abandoning it costs nothing
	}
	if left == 0 {
		return true
	}
	if s.drainExpired {
		s.log.Error("shard: drain deadline passed, abandoning operations still in flight",
			"shard", s.index, "in_flight", left)
		s.stats.DrainAbandoned.Add(uint64(left))
		return true
	}
	return false
}

// Complete handles the shard's own operations: the tick, wakeups, the drain deadline and accepts.
// Superblock saves complete on their group's slot (save.go).
func (s *Shard) Complete(c ring.Completion) {
	switch c.Tag &^ tagIndexMask {
	case tagTick:
		s.tickArmed = false
		s.onTick()
	case tagWake:
		if c.Res < 0 {
			s.log.Warn("shard: wakeup failed", "shard", s.index, "err", c.Err())
		}
	case tagAccept:
		s.accepts = false
		s.onAccept(c)
	case tagWakeRecv:
		s.waker.taken()
		if c.Res < 0 && !s.draining {
			s.log.Warn("shard: wakeup receive failed", "shard", s.index, "err", c.Err())
		}
	case tagDrain:
		s.drainArmed = false
		s.drainExpired = true
	case 0:
		// A MsgRing wakeup posted by another shard: the loop drains the inbox after Dispatch.
		assert.True(c.Op == ring.OpMsgRing, "shard: untagged completion that is not a wakeup")
	default:
		assert.True(false, "shard: completion with an unknown tag")
	}
}

func (s *Shard) armTick() {
	if s.draining || s.tickArmed || s.stopping.Load() {
		return
	}
	err := s.ring.Timeout(s, tagTick, s.cfg.Tick, 0)
	if errors.Is(err, ring.ErrQueueFull) {
		s.ring.Submit()
		err = s.ring.Timeout(s, tagTick, s.cfg.Tick, 0)
	}
	// Still full: every in-flight slot is taken, so a completion will wake the loop, which arms the
	// tick again after its Dispatch.
	s.tickArmed = err == nil
}

// onTick runs one tick: the schedule advances, every group is polled and planned, the superblock saves
// the batch needs are issued together, and the batches leave once those saves completed (R11, R12).
func (s *Shard) onTick() {
	if s.stopping.Load() {
		return
	}
	s.armTick()
	if s.acceptRetry {
		s.acceptRetry = false
		s.armAccept()
	}
	s.timerTick(monotonicNs())
	if s.node.tickHook != nil {
		s.node.tickHook(s, s.tick.Number)
	}
}

// timerTick is the ring timer's tick at clock value nowNs. A tick is a period of time, not a turn of
// the loop: when the timer comes back after half a quorum window or more (the process was stopped by
// SIGSTOP or a debugger, or starved of CPU), the schedule skips the ticks that could not run, so the
// windows counted in ticks see the time that passed. Without it an owner stopped for longer than its
// quorum window woke believing its followers were heard a tick ago, and served reads for a whole
// window more while a new owner may have confirmed past them (R24). With it an owner serves at most
// one and a half windows past the last reply it heard, however long it was stopped. Shorter delays
// (scheduling jitter, a slow turn) are left alone: every tick then runs, as the traffic tests count
// them. The skip is counted in ticks_skipped_total and logged.
func (s *Shard) timerTick(nowNs uint64) {
	if missed := missedTicks(s.timerNs, nowNs, uint64(s.cfg.Tick)); missed > 0 && missed >= s.stallTicks() {
		s.sched.Skip(missed)
		s.stats.TicksSkipped.Add(missed)
		s.reportStall(missed, nowNs)
	}
	s.timerNs = nowNs
	s.runTick(nowNs)
}

// reportStall logs the ticks a stall skipped: a rare event outside the steady state, whose log line
// may allocate (internal/allocs leaves it out of the shard's allocation tests by this name).
func (s *Shard) reportStall(missed, nowNs uint64) {
	s.log.Warn("shard: ticks passed without running (the process was stopped or starved of CPU); "+
		"its windows count them", "shard", s.index, "ticks", missed,
		"for", time.Duration(nowNs-s.timerNs).Round(time.Millisecond))
}

// stallTicks is the delay, in missed ticks, from which timerTick skips: half the quorum window.
func (s *Shard) stallTicks() uint64 { return max(1, s.sched.Ticks().HeartbeatTimeoutTicks/2) }

// missedTicks is how many whole tick periods of tickNs passed between the ticks at lastNs and nowNs
// beyond the one that is due now: 0 at the first tick (lastNs 0) or on time.
func missedTicks(lastNs, nowNs, tickNs uint64) uint64 {
	if lastNs == 0 || nowNs <= lastNs || tickNs == 0 {
		return 0
	}
	if periods := (nowNs - lastNs) / tickNs; periods > 1 {
		return periods - 1
	}
	return 0
}

// runTick is one tick of the schedule at clock value nowNs, without the ring's timer.
func (s *Shard) runTick(nowNs uint64) {
	s.tick = s.sched.Advance()
	s.nowNs = nowNs
	s.stats.Ticks.Add(1)
	if s.tick.Send {
		s.stats.SendTicks.Add(1)
	}
	polled, polling := s.groups, s.sendLimit == 0 || s.tick.Number <= s.sendLimit
	if polling {
		polled = s.pollGroups()
	}
	s.issueSaves(polled)
	s.flush(polled)
	if polling {
		s.restPolled(polled)
	}
	for _, l := range s.links {
		l.onTick()
	}
	s.expireConns()
	s.cl.onTick()
}

// pollGroups reads the role, view and commit of each group polled this tick (every group on a send
// tick, else the awake ones and the sleepers due: sleep.go), restarts schedules on a change, plans the
// tick's entries and delivers the timeout events (R2, R6, R8, R20, R24). It returns the groups polled,
// in id order: the ones that may owe entries this tick.
func (s *Shard) pollGroups() []*groupSlot {
	now := s.tick.Number
	list := s.pollList(now)
	var busy int64
	for _, gs := range list {
		s.pollGroup(gs, now)
		if gs.role == RolePrimary && gs.primary.Busy() {
			busy++
		}
	}
	s.stats.GroupsBusy.Store(busy)
	s.stats.GroupsIdle.Store(int64(s.primaries) - busy)
	return list
}

// restPolled lets the groups polled this tick sleep, once the tick's batches took what they owed.
func (s *Shard) restPolled(polled []*groupSlot) {
	now := s.tick.Number
	for _, gs := range polled {
		s.rest(gs, now)
	}
	s.stats.GroupsSleeping.Store(int64(s.sleeping))
}

// pollGroup is one group's poll on tick now.
func (s *Shard) pollGroup(gs *groupSlot, now uint64) {
	g := gs.g
	g.OnTick(now)
	role, view, prim := g.Role(), g.View(), g.Primary()
	if role != gs.role || view != gs.view || prim != gs.primIdx {
		s.restartGroup(gs, role, view, prim)
	}
	switch gs.role {
	case RolePrimary:
		if c := g.Commit(); c > gs.primary.Commit() {
			gs.primary.Committed(now, c, g.CommitHolders())
		}
		gs.primary.Plan(s.tick)
		if gs.primary.QuorumLost(now) {
			g.OnQuorumLost()
		}
	case RoleBackup:
		if gs.backup.Silent(now) {
			g.OnPrimarySilent()
		}
	}
}

// restartGroup puts a group on the schedule for its new role or view.
func (s *Shard) restartGroup(gs *groupSlot, role Role, view uint32, prim uint8) {
	g := gs.g
	if (gs.role == RolePrimary) != (role == RolePrimary) {
		if role == RolePrimary {
			s.primaries++
		} else {
			s.primaries--
		}
	}
	gs.role, gs.view, gs.primIdx, gs.self = role, view, prim, g.Self()
	gs.nodes = [heartbeat.MembersMax]uint16{}
	gs.links = [heartbeat.MembersMax]*link{}
	var backups heartbeat.Members
	for _, m := range g.Members() {
		assert.True(m.Index < heartbeat.MembersMax, "shard: member index out of range")
		gs.nodes[m.Index] = m.Node
		gs.links[m.Index] = s.byNode[m.Node]
		if m.Index != gs.self {
			backups |= heartbeat.MemberOf(m.Index)
		}
	}
	now := s.tick.Number
	switch role {
	case RolePrimary:
		gs.backup.Stop()
		gs.primary.Start(s.sched.Ticks(), now, view, g.Commit(), gs.self, backups, g.Quorum())
	case RoleBackup:
		gs.primary.Stop()
		gs.backup.Follow(s.sched.Ticks(), now, view, prim)
	default:
		gs.primary.Stop()
		gs.backup.Stop()
	}
}

// monotonicNs reads CLOCK_MONOTONIC: the clock value timestamps are stamped from (R14).
func monotonicNs() uint64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0 // timestamps still grow: heartbeat.Primary takes max(now, previous+1)
	}
	return uint64(ts.Nano())
}

// pinToCPU pins the calling (locked) thread to cpu.
func pinToCPU(cpu int) error {
	var set unix.CPUSet
	set.Set(cpu)
	return unix.SchedSetaffinity(0, &set)
}

// lockThread locks the goroutine to its thread for the shard's whole life. The thread is never
// unlocked: when the goroutine ends, the runtime ends the thread too, so a pinned affinity never leaks
// into the runtime's thread pool.
func lockThread() { runtime.LockOSThread() }
