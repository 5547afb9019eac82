package shard_test

import (
	"slices"
	"testing"

	"github.com/ringstream/ringstream/shard"
	"github.com/ringstream/ringstream/shard/shardtest"
	"github.com/ringstream/ringstream/wire"
)

// sleeperGroup is a test group that may sleep (shard.Sleeper): until answers SleepUntil, and polled
// records the ticks the shard polled it on.
type sleeperGroup struct {
	*shardtest.Group
	until  func(now uint64) uint64
	polled []uint64
}

func (g *sleeperGroup) OnTick(tick uint64) {
	g.polled = append(g.polled, tick)
	g.Group.OnTick(tick)
}

func (g *sleeperGroup) SleepUntil(now uint64) uint64 { return g.until(now) }

// never is a SleepUntil of a group with no timer of its own.
func never(uint64) uint64 { return ^uint64(0) }

func sleeperNode(t *testing.T, node uint16, peers []uint16, groups ...shard.Group) *shard.Node {
	t.Helper()
	n, err := shard.NewOfflineNode(shard.Config{Node: node, Cluster: testCluster, Shards: 1,
		Schedule: testTicks, QueueCapacity: 1024, OutboxBytes: 1 << 20, GroupsPerShardMax: 4096,
		ReplyOutboxEntries: 4096, Logger: quietLogger()}, peersOf(peers...), groups)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// entryTicks runs ticks from..to (one at a time) and returns, per group id, the ticks on which the
// shard sent node peer a Commit entry of that group, and the entry states.
func entryTicks(t *testing.T, n *shard.Node, peer uint16, ticks int) map[uint64][]uint64 {
	t.Helper()
	s := n.Shards()[0]
	out := map[uint64][]uint64{}
	for range ticks {
		runTicks(n, 1)
		for _, f := range parseFrames(t, s.TakeOutbox(peer)) {
			if f.h.Command != wire.CommandCommit {
				continue
			}
			for _, e := range commitEntries(t, f) {
				out[e.Group] = append(out[e.Group], s.Tick()*10+uint64(e.HeartbeatState))
			}
		}
	}
	return out
}

// An idle primary that sleeps is polled on the send ticks alone, and its peers see exactly what they
// see of one that never sleeps: the same busy, then idle heartbeats on the same ticks (R1, R20). Its
// shard counts it idle and asleep.
func TestSleeper_IdlePrimaryPolledOnSendTicksSendsTheSameHeartbeats(t *testing.T) {
	sleeper := &sleeperGroup{Group: newGroup(1, []uint16{1, 2}, 1, 1), until: never}
	plain := newGroup(2, []uint16{1, 2}, 1, 1)
	n := sleeperNode(t, 1, []uint16{2}, sleeper, plain)
	sent := entryTicks(t, n, 2, 60)
	if len(sent[1]) == 0 || !slices.Equal(sent[1], sent[2]) {
		t.Fatalf("entries (tick*10+state) of the sleeper %v, of the plain group %v", sent[1], sent[2])
	}
	var after []uint64
	for _, tick := range sleeper.polled {
		if tick > 20 { // busy until the send tick 20 (busy timeout 20 ticks: R20)
			after = append(after, tick)
		}
	}
	if want := []uint64{25, 30, 35, 40, 45, 50, 55, 60}; !slices.Equal(after, want) {
		t.Fatalf("idle sleeper polled on ticks %v after 20, want the send ticks %v", after, want)
	}
	st := n.Shards()[0].Stats()
	if st.GroupsIdle.Load() != 2 || st.GroupsBusy.Load() != 0 || st.GroupsSleeping.Load() != 1 {
		t.Fatalf("gauges: idle %d busy %d sleeping %d, want 2, 0, 1", st.GroupsIdle.Load(), st.GroupsBusy.Load(),
			st.GroupsSleeping.Load())
	}
}

// A busy primary never sleeps, whatever its group says.
func TestSleeper_BusyPrimaryPolledEveryTick(t *testing.T) {
	g := &sleeperGroup{Group: newGroup(1, []uint16{1, 2}, 1, 1), until: never}
	g.CommitEvery = 3
	n := sleeperNode(t, 1, []uint16{2}, g)
	runTicks(n, 40)
	if len(g.polled) != 40 {
		t.Fatalf("busy primary polled on %d of 40 ticks: %v", len(g.polled), g.polled)
	}
}

// A sleeping group is polled at the tick it asked for, at each send tick, and on the tick after
// anything reached it: its own Wake, or a frame routed to it.
func TestSleeper_AlarmSendTicksAndWakes(t *testing.T) {
	g := &sleeperGroup{Group: newGroup(1, []uint16{1, 2}, 1, 1), until: func(now uint64) uint64 { return now + 4 }}
	n := sleeperNode(t, 1, []uint16{2}, g)
	s := n.Shards()[0]
	runTicks(n, 35)
	from := len(g.polled)
	s.Wake(1) // after tick 35
	runTicks(n, 5)
	var r shard.TestReceiver
	frame := wire.BeginFrame(nil, &wire.Header{Cluster: testCluster, Sender: 2, Command: wire.CommandStreamPrepare,
		Group: 1, Incarnation: 1})
	frame = append(frame, "wake"...)
	wire.EndFrame(frame, 0)
	if _, err := s.Feed(&r, 2, frame); err != nil { // after tick 40
		t.Fatal(err)
	}
	runTicks(n, 2)
	var idle []uint64
	for _, tick := range g.polled[:from] {
		if tick > 20 {
			idle = append(idle, tick)
		}
	}
	// From tick 20 (idle): alarm 24; send tick 25 (its 29 is before the next send tick 30); 29, 30;
	// 34, 35.
	if want := []uint64{24, 25, 29, 30, 34, 35}; !slices.Equal(idle, want) {
		t.Fatalf("polled on %v after tick 20, want %v", idle, want)
	}
	// Woken after 35: polled on 36 (its alarm 40 is the send tick), 40; the frame after 40: 41;
	// then its alarm 45 is the send tick.
	if got, want := g.polled[from:], []uint64{36, 40, 41}; !slices.Equal(got, want) {
		t.Fatalf("after the wake and the frame: polled on %v, want %v", got, want)
	}
	if len(g.Frames) != 1 || s.Stats().GroupWakes.Load() != 2 {
		t.Fatalf("frames %d, wakes %d", len(g.Frames), s.Stats().GroupWakes.Load())
	}
}

// A sleeping backup hears its primary's silence on the same tick as one that never sleeps (R8,
// R22): its timeout is an alarm.
func TestSleeper_BackupSilenceOnItsTick(t *testing.T) {
	sleeper := &sleeperGroup{Group: newGroup(1, []uint16{1, 2}, 2, 1), until: never}
	plain := newGroup(2, []uint16{1, 2}, 2, 1)
	n := sleeperNode(t, 2, []uint16{1}, sleeper, plain)
	var silentAt, plainAt uint64
	var r shard.TestReceiver
	for tick := uint64(1); tick <= 40; tick++ {
		runTicks(n, 1)
		if tick == 3 { // the timeout restarts at tick 3: silence due at 23, between send ticks
			if _, err := n.Shards()[0].Feed(&r, 1, commitBatch([]uint64{1, 2}, 100)); err != nil {
				t.Fatal(err)
			}
		}
		if sleeper.SilentEvents == 1 && silentAt == 0 {
			silentAt = tick
		}
		if plain.SilentEvents == 1 && plainAt == 0 {
			plainAt = tick
		}
	}
	if silentAt == 0 || silentAt != plainAt || silentAt%5 == 0 {
		t.Fatalf("silence heard on tick %d by the sleeper, %d by the plain backup", silentAt, plainAt)
	}
	if len(sleeper.polled) >= 15 {
		t.Fatalf("sleeping backup polled on %d ticks of 40: %v", len(sleeper.polled), sleeper.polled)
	}
}

// linkSleeper is a sleeperGroup that also watches its shard's links.
type linkSleeper struct {
	*sleeperGroup
	downs int
}

func (g *linkSleeper) OnLinkUp(uint16)   {}
func (g *linkSleeper) OnLinkDown(uint16) { g.downs++ }

// polledAfter runs one tick after f and says whether g was polled on it.
func polledAfter(t *testing.T, n *shard.Node, g *sleeperGroup, f func()) bool {
	t.Helper()
	f()
	from := len(g.polled)
	runTicks(n, 1)
	return len(g.polled) > from
}

// Each input the shard routes wakes a sleeping group for the next tick: a Commit to a backup, a
// CommitReply to a primary, its link going down. Without one, it sleeps through that tick.
func TestSleeper_RoutedInputsWakeTheGroup(t *testing.T) {
	backup := &sleeperGroup{Group: newGroup(1, []uint16{1, 2}, 2, 1), until: never}
	primary := &linkSleeper{sleeperGroup: &sleeperGroup{Group: newGroup(2, []uint16{1, 2}, 2, 2), until: never}}
	n := sleeperNode(t, 2, []uint16{1}, backup, primary)
	s := n.Shards()[0]
	var stamp uint64
	for range 21 { // the primary is idle after tick 20, where its first idle heartbeat leaves
		runTicks(n, 1)
		for _, f := range parseFrames(t, s.TakeOutbox(1)) {
			if f.h.Command == wire.CommandCommit {
				for _, e := range commitEntries(t, f) {
					stamp = e.TimestampMonotonic
				}
			}
		}
	}
	if polledAfter(t, n, backup, func() {}) || polledAfter(t, n, primary.sleeperGroup, func() {}) {
		t.Fatal("a sleeping group was polled with nothing reaching it")
	}
	var r shard.TestReceiver
	if !polledAfter(t, n, backup, func() { // after tick 23
		if _, err := s.Feed(&r, 1, commitBatch([]uint64{1}, 100)); err != nil {
			t.Fatal(err)
		}
	}) || len(backup.Received) != 1 {
		t.Fatalf("a Commit (%d received) did not wake the sleeping backup", len(backup.Received))
	}
	runTicks(n, 1) // 25: a send tick polls every group
	reply := wire.AppendCommitReplyBatch(nil, testCluster, 1, []wire.CommitReplyEntry{{Group: 2, Incarnation: 1,
		View: 3, TimestampMonotonic: stamp, Replica: 0}})
	if !polledAfter(t, n, primary.sleeperGroup, func() { // after tick 25
		if _, err := s.Feed(&r, 1, reply); err != nil {
			t.Fatal(err)
		}
	}) || len(primary.Replies) != 1 {
		t.Fatalf("a CommitReply (%d counted) did not wake the sleeping primary", len(primary.Replies))
	}
	runTicks(n, 2) // 27, 28
	if !polledAfter(t, n, primary.sleeperGroup, func() { s.FailLink(1) }) || primary.downs != 1 {
		t.Fatalf("the link going down (%d heard) did not wake the sleeping primary", primary.downs)
	}
}

// A group that asks for the next tick stays awake (not counted asleep), and the groups polled on a
// tick are polled in id order whatever order they woke in, as on a tick that polls every group.
func TestSleeper_NextTickIsAwakeAndPollsRunInIDOrder(t *testing.T) {
	var order []uint64
	logged := func(id uint64, until func(uint64) uint64) *orderedSleeper {
		return &orderedSleeper{sleeperGroup: &sleeperGroup{Group: newGroup(id, []uint16{1, 2}, 2, 1), until: until}, order: &order}
	}
	a, b := logged(1, never), logged(2, never)
	next := logged(3, func(now uint64) uint64 { return now + 1 })
	n := sleeperNode(t, 2, []uint16{1}, a, b, next)
	s := n.Shards()[0]
	runTicks(n, 6)
	if got := s.Stats().GroupsSleeping.Load(); got != 2 {
		t.Fatalf("%d groups asleep, want 2 (the one asking for the next tick is awake)", got)
	}
	s.Wake(2)
	s.Wake(1)
	order = order[:0]
	runTicks(n, 1)
	if !slices.Equal(order, []uint64{1, 2, 3}) {
		t.Fatalf("polled in order %v, want 1, 2, 3", order)
	}
}

// orderedSleeper logs its id into a shared order on each poll.
type orderedSleeper struct {
	*sleeperGroup
	order *[]uint64
}

func (g *orderedSleeper) OnTick(tick uint64) {
	*g.order = append(*g.order, g.GroupID)
	g.sleeperGroup.OnTick(tick)
}
