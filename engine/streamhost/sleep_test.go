package streamhost_test

import (
	"testing"

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
