package engine

import (
	"context"
	"testing"
	"time"

	"github.com/ringstream/ringstream/wire"
)

// TestNode_RestartWithAnotherShardCount: a follower's node shut down cleanly and built again over its
// data directory with one shard instead of two (a stream's directory does not depend on the shard
// count) reopens its copy, catches up with what the owner confirmed meanwhile and follows on.
func TestNode_RestartWithAnotherShardCount(t *testing.T) {
	c := newFailoverCluster(t, 50)
	var owner uint16
	var stream uint64
	waitForTB(t, "a primary that registered every node", func() bool {
		p := c.primary(0)
		return p != nil && len(p.Status().Heartbeats.Nodes) == 3
	})
	tc := dialNode(t, c.client[1], "")
	created, look := tc.createLooked("resharded")
	owner, stream = look.Owner, created.Stream
	oc := dialNode(t, c.client[owner], "")
	produce := func(seq uint64) {
		t.Helper()
		waitForTB(t, "a confirmed produce", func() bool {
			_, e := oc.produce(stream, 9, seq, 1, []byte("record"))
			if e != nil && e.Code != wire.CodeUnavailable && e.Code != wire.CodeNotYet && e.Code != wire.CodeNotOwner {
				t.Fatalf("produce %d: %v %s", seq, e.Code, e.Message)
			}
			return e == nil
		})
	}
	for seq := uint64(1); seq <= 20; seq++ {
		produce(seq)
	}
	follower := owner%3 + 1
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.nodes[follower].Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	for seq := uint64(21); seq <= 40; seq++ {
		produce(seq)
	}
	cfg := failoverConfig(t, follower, c.dir(follower), c.peer[follower], c.client[follower], 50)
	cfg.ShardCount = 1
	n, err := NewNodeWithOptions(cfg, quietLogger(), NodeOptions{DrainTimeout: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	c.nodes[follower] = n
	c.start(follower)
	for seq := uint64(41); seq <= 60; seq++ {
		produce(seq)
	}
	waitForTB(t, "the restarted follower holding all 60 records", func() bool {
		st := n.Status()
		return st.Shards == 1 && len(st.Copies) == 1 && st.Copies[0].Durable == 60 && st.Copies[0].Role == "follower"
	})
}
