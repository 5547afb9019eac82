package streamhost_test

import (
	"testing"
	"time"

	"github.com/ringstream/ringstream/engine/stream"
	"github.com/ringstream/ringstream/engine/streamhost"
	"github.com/ringstream/ringstream/shard"
	"github.com/ringstream/ringstream/wire"
)

// TestCluster_ConfirmWaitsForNoTick: on three real nodes whose shards tick every half second, ten
// produces are appended, replicated, made durable on W copies and confirmed one after another within
// fewer ticks of the owner's shard than there are produces: nothing on the record path (the owner's
// append and group commit, the prepare, the follower's append, fdatasync and answer, the confirm and
// its reply) waits for a tick, or each produce would cost one at least. (The links first connect at a
// tick, and the owner's first probes, sent before, go again at its resend timer: the test waits until
// the links are up, and counts from the first produce's confirm.)
func TestCluster_ConfirmWaitsForNoTick(t *testing.T) {
	const produces = 10
	c := newClusterTick(t, t.TempDir(), majority(1, 2, 3), nil, nil, 500*time.Millisecond,
		func(cfg *streamhost.Config) { cfg.Stream.ResendTicks = 2 })
	owner := c.nodes[1]
	deadline := time.Now().Add(30 * time.Second)
	for !c.linksUp() {
		if time.Now().After(deadline) {
			t.Fatal("links not up within 30 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	var buf []byte
	var ticksAtFirst uint64
	for seq := uint64(0); seq <= produces; seq++ {
		c.run(1, func(s *shard.Shard) {
			buf = recordBatch(seq, buf)
			if seq == 1 {
				ticksAtFirst = s.Stats().Ticks.Load()
			}
			m := stream.Message{Kind: stream.KindProduce, Client: seq + 1}
			m.Produce = wire.Produce{RequestID: seq, Stream: testStream, Incarnation: testIncarnation, ProducerID: 9,
				Sequence: seq + 1, Count: recordsPerBatch, Batch: buf}
			if err := owner.host.Step(s, testStream, &m); err != nil {
				t.Error(err)
			}
		})
		select {
		case r := <-owner.sink.acks:
			if r.Kind != stream.ReplyProduce || r.Produce.BaseOffset != seq*recordsPerBatch {
				t.Fatalf("produce %d answered %+v (%s)", seq, r, r.Error.Message)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("produce %d not confirmed within 30 s", seq)
		}
	}
	var ticks uint64
	c.run(1, func(s *shard.Shard) { ticks = s.Stats().Ticks.Load() - ticksAtFirst })
	if ticks >= produces {
		t.Fatalf("%d produces confirmed one after another took %d ticks of the owner's shard: they wait for ticks",
			produces, ticks)
	}
	t.Logf("%d produces confirmed within %d ticks", produces, ticks)
}

// linksUp says whether every node's links to the others are up.
func (c *cluster) linksUp() bool {
	for _, n := range c.nodes {
		for _, l := range n.node.Status() {
			if !l.Up {
				return false
			}
		}
	}
	return true
}
