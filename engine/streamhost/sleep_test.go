package streamhost_test

import (
	"testing"

	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/engine/stream"
	"github.com/ringstream/ringstream/engine/streamhost"
	"github.com/ringstream/ringstream/shard"
)

// A quiet stream's followers sleep (shard.Sleeper: off every tick's poll), and a sleeping follower
// still takes each record at once and publishes its new tail for the node heartbeats: every input
// wakes it, and it marks its published entry on the tick it is polled awake. Parking is off: a
// park check would mark the entry of a copy whose activity moved, and hide a lost mark.
func TestSleep_QuietFollowersSleepAndStillPublishTheirTails(t *testing.T) {
	c := newCluster(t, majority(1, 2, 3), func(c *streamhost.Config) { c.IdleCloseTicks = -1 })
	for _, id := range []uint16{2, 3} {
		waitUntil(t, "follower asleep", func() bool { return sleepingGroups(c.nodes[id]) >= 1 })
	}
	const batches = 5
	for seq := uint64(1); seq <= batches; seq++ {
		if r := produceOne(t, c.nodes[1], testStream, seq); r.Kind != stream.ReplyProduce {
			t.Fatalf("produce %d: %+v", seq, r)
		}
	}
	var durable uint64
	c.run(1, func(s *shard.Shard) { durable = c.nodes[1].host.State(s, testStream).Durable })
	for _, id := range []uint16{2, 3} {
		waitUntil(t, "the follower's published tail at the owner's", func() bool {
			for _, tl := range c.nodes[id].host.AppendCopyTails(nil) {
				if tl.Stream == testStream {
					return tl.RecordTail == durable
				}
			}
			return false
		})
		waitUntil(t, "follower asleep again", func() bool { return sleepingGroups(c.nodes[id]) >= 1 })
	}
	var st streamhost.CopyState
	c.run(2, func(s *shard.Shard) { st = c.nodes[2].host.State(s, testStream) })
	if st.Durable != durable {
		t.Fatalf("follower durable %d, owner %d", st.Durable, durable)
	}
}

// groupWakes is how many sleeping groups an input woke on n's shards.
func groupWakes(n *testNode) int64 {
	return shardSum(n, func(s *shard.Stats) int64 { return int64(s.GroupWakes.Load()) })
}

// A seal reaching a sleeping follower through its host (a control frame, not a frame the shard
// routes to the copy) wakes it: the copy tells its shard (Sender.Wake), so whatever the seal leaves
// for a tick (a seal storage could not take yet) runs on the next one, not at the next send tick.
// The owner is stopped first, so no heartbeat of it wakes the follower meanwhile.
func TestSleep_ASealWakesASleepingFollower(t *testing.T) {
	c := newCluster(t, majority(1, 2, 3))
	if err := c.nodes[1].node.Stop(); err != nil {
		t.Fatal(err)
	}
	n3 := c.nodes[3]
	waitUntil(t, "node 3's link to the owner down", func() bool {
		for _, s := range n3.node.Shards() {
			if s.Stats().LinksUp.Load() > 1 {
				return false
			}
		}
		return true
	})
	waitUntil(t, "follower asleep", func() bool { return sleepingGroups(n3) >= 1 })
	before := groupWakes(n3)
	if r := sealOn(t, n3, 2, 7, nil); r.FenceEpoch != 2 {
		t.Fatalf("seal answered %+v", r)
	}
	if groupWakes(n3) == before {
		t.Fatal("the seal did not wake the sleeping follower")
	}
	// The gauge is set at each tick's end: wait for ticks past the seal's reply, then for the
	// sealed copy asleep.
	ticked := n3.node.Shards()[0].Stats().Ticks.Load() + 3
	waitUntil(t, "three ticks", func() bool { return n3.node.Shards()[0].Stats().Ticks.Load() >= ticked })
	waitUntil(t, "the sealed copy asleep", func() bool { return sleepingGroups(n3) >= 1 })
	before = groupWakes(n3)
	assignOn(t, n3, meta.Assignment{Epoch: 2, Owner: 3, Followers: []uint16{2}, Policy: c.asg.Policy}, nil)
	if groupWakes(n3) == before {
		t.Fatal("the assignment did not wake the sleeping sealed copy")
	}
}

// A follower that sleeps between its idle checks parks at one of them after a produce reopened it,
// and its node counts it parked (ParkedCopies, the metric): the park marks its published entry
// though the copy was polled asleep.
func TestSleep_ASleepingFollowerParksAndItsNodeCountsIt(t *testing.T) {
	c := newCluster(t, majority(1, 2, 3), func(c *streamhost.Config) { c.IdleCloseTicks = 50 })
	n2 := c.nodes[2]
	waitUntil(t, "the follower parked", func() bool { return hostStats(t, n2).Parked == 1 })
	parks := hostStats(t, n2).Parks
	if r := produceOne(t, c.nodes[1], testStream, 1); r.Kind != stream.ReplyProduce {
		t.Fatalf("produce: %+v", r)
	}
	waitUntil(t, "the follower parked again, and counted", func() bool {
		st := hostStats(t, n2)
		return st.Parks > parks && st.Parked == 1
	})
}

// Deleting copies takes their entries out of the published tails; the entries of the others stay,
// whichever took a deleted one's place in the table.
func TestSleep_DeletedCopiesLeaveThePublishedTails(t *testing.T) {
	n := soloNode(t, t.TempDir())
	specs := []streamhost.Spec{soloSpec(100), soloSpec(101), soloSpec(102)}
	if _, errs := openAll(t, n, specs); len(errs) > 0 {
		t.Fatal(errs)
	}
	published := func() []uint64 {
		var ids []uint64
		for _, tl := range n.host.AppendCopyTails(nil) {
			ids = append(ids, tl.Stream)
		}
		return ids
	}
	waitUntil(t, "three copies published", func() bool { return len(published()) == 3 })
	done := make(chan error, 1)
	if err := n.host.Delete(100, func(err error) { done <- err }); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "copies 101 and 102 published alone", func() bool {
		ids := published()
		return len(ids) == 2 && ids[0] == 101 && ids[1] == 102
	})
	entries := 0
	for _, s := range n.node.Shards() {
		done := make(chan struct{})
		if err := n.node.Run(s.Index(), func(s *shard.Shard) { entries += n.host.TailEntries(s); close(done) }); err != nil {
			t.Fatal(err)
		}
		<-done
	}
	if entries != 2 {
		t.Fatalf("%d entries in the tails tables, want 2: a deleted copy's entry stayed", entries)
	}
}
