package engine

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/ringstream/ringstream/client"
	"github.com/ringstream/ringstream/engine/config"
	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/engine/metahost"
	"github.com/ringstream/ringstream/engine/stream"
	"github.com/ringstream/ringstream/engine/streamhost"
	"github.com/ringstream/ringstream/shard"
	"github.com/ringstream/ringstream/wire"
)

// failoverCluster is three engine.Nodes on loopback with real disks whose listeners keep their ports,
// so that a killed node restarts at the addresses the others know.
type failoverCluster struct {
	t      testing.TB
	root   string
	grace  int // eager_failover_grace, ms
	nodes  map[uint16]*Node
	peer   map[uint16]netip.AddrPort
	client map[uint16]netip.AddrPort
}

// failoverTickMs is the clusters' tick (-failover.tick_ms; the benchmarks of many streams take the
// production default of 10 ms with it, the tests 2 ms).
var failoverTickMs = flag.Int("failover.tick_ms", 2, "the tick of the failover tests' and benchmarks' clusters, ms")

// failoverConfig is node id's configuration: peer and client listeners at the given addresses (port
// 0 the first time), two shards, -failover.tick_ms ticks (2 ms).
func failoverConfig(t testing.TB, id uint16, dir string, peer, client netip.AddrPort, graceMs int) *config.Config {
	t.Helper()
	toml := fmt.Sprintf(`
[node]
id = %d
data_dir = %q
listen = %q
[cluster]
id = %d
peers = { 1 = "127.0.0.1:1", 2 = "127.0.0.1:2", 3 = "127.0.0.1:3" }
tick_ms = %d
eager_failover_grace = %d
[shards]
count = 2
[storage]
segment_bytes = 8388608
[admin]
listen = "127.0.0.1:0"
[client]
listen = %q
`, id, dir, peer.String(), nodeTestCluster, *failoverTickMs, graceMs, client.String())
	cfg, err := config.Parse([]byte(toml), dir)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func newFailoverCluster(t testing.TB, graceMs int) *failoverCluster {
	t.Helper()
	c := &failoverCluster{t: t, root: t.TempDir(), grace: graceMs, nodes: map[uint16]*Node{},
		peer: map[uint16]netip.AddrPort{}, client: map[uint16]netip.AddrPort{}}
	any0 := netip.MustParseAddrPort("127.0.0.1:0")
	for id := uint16(1); id <= 3; id++ {
		dir := c.dir(id)
		if err := metahost.Format(metahost.FormatConfig{Dir: filepath.Join(dir, "meta"), Cluster: nodeTestCluster, Node: id,
			Replica: uint8(id - 1)}); err != nil {
			t.Fatal(err)
		}
		c.nodes[id] = c.build(id, any0, any0)
		c.peer[id], c.client[id] = c.nodes[id].PeerAddr(), c.nodes[id].ClientAddr()
	}
	t.Cleanup(c.stop)
	for id := range c.nodes {
		c.start(id)
	}
	return c
}

func (c *failoverCluster) dir(id uint16) string { return filepath.Join(c.root, fmt.Sprint(id)) }

func (c *failoverCluster) build(id uint16, peer, client netip.AddrPort) *Node {
	n, err := NewNodeWithOptions(failoverConfig(c.t, id, c.dir(id), peer, client, c.grace), quietLogger(),
		NodeOptions{DrainTimeout: time.Millisecond})
	if err != nil {
		c.t.Fatal(err)
	}
	return n
}

// start hands node id every node's addresses and starts it.
func (c *failoverCluster) start(id uint16) {
	n := c.nodes[id]
	for oid := range c.nodes {
		if err := n.SetPeer(oid, c.peer[oid], c.client[oid]); err != nil {
			c.t.Fatal(err)
		}
	}
	if err := n.Start(context.Background()); err != nil {
		c.t.Fatal(err)
	}
}

// restart builds node id again over its directory, at its old addresses, and starts it.
func (c *failoverCluster) restart(id uint16) {
	c.nodes[id] = c.build(id, c.peer[id], c.client[id])
	c.start(id)
}

func (c *failoverCluster) stop() {
	for _, n := range c.nodes {
		n.Kill()
	}
}

// primary is the node whose metadata replica is primary, or nil.
func (c *failoverCluster) primary(skip uint16) *Node {
	for id, n := range c.nodes {
		if id != skip && n.Meta().Status().Primary {
			return n
		}
	}
	return nil
}

// copyState reads node id's copy of stream on its shard (an empty state when it has none).
func (c *failoverCluster) copyState(id uint16, stream uint64) streamhost.CopyState {
	n := c.nodes[id]
	var st streamhost.CopyState
	done := make(chan struct{})
	if err := n.Shards().Run(shard.ShardOf(stream, 2), func(s *shard.Shard) {
		st = n.Streams().State(s, stream)
		close(done)
	}); err != nil {
		return st
	}
	<-done
	return st
}

// metaState runs f on the applied metadata state of node id (on shard 0).
func (c *failoverCluster) metaState(id uint16, f func(*meta.State)) {
	n := c.nodes[id]
	done := make(chan struct{})
	if err := n.Shards().Run(0, func(*shard.Shard) { f(n.Meta().State()); close(done) }); err != nil {
		c.t.Fatal(err)
	}
	<-done
}

// waitCopies waits until each of the nodes holds an open copy of stream serving at epoch or above.
func (c *failoverCluster) waitCopies(stream uint64, epoch uint32, ids ...uint16) {
	c.waitEveryCopy([]uint64{stream}, epoch, ids...)
}

// eachCopy reads node id's copy of each of streams (an empty state where it has none) with one
// cross-shard run per shard: a run per stream, each waiting for its shard's next turn, makes the
// reading itself minutes long at tens of thousands of streams.
func (c *failoverCluster) eachCopy(id uint16, streams []uint64, f func(i int, st streamhost.CopyState)) {
	n := c.nodes[id]
	byShard := map[int][]int{}
	for i, s := range streams {
		k := shard.ShardOf(s, 2)
		byShard[k] = append(byShard[k], i)
	}
	for k, idx := range byShard {
		done := make(chan struct{})
		if err := n.Shards().Run(k, func(s *shard.Shard) {
			for _, i := range idx {
				f(i, n.Streams().State(s, streams[i]))
			}
			close(done)
		}); err != nil {
			return
		}
		<-done
	}
}

// waitEveryCopy waits until each of the nodes holds an open copy of every stream, serving at epoch
// or above.
func (c *failoverCluster) waitEveryCopy(streams []uint64, epoch uint32, ids ...uint16) {
	for _, id := range ids {
		left := slices.Clone(streams)
		waitForTB(c.t, "copies open", func() bool {
			var behind []uint64
			c.eachCopy(id, left, func(i int, st streamhost.CopyState) {
				if !st.Open || st.Epoch < epoch {
					behind = append(behind, left[i])
				}
			})
			left = behind
			return len(left) == 0
		})
	}
}

// createStream creates a three-copy stream through node 1 once every node is registered, and waits
// for its copies.
func (c *failoverCluster) createStream(name string) uint64 {
	t := c.t
	waitForTB(t, "every node registered", func() bool {
		p := c.primary(0)
		return p != nil && len(p.Status().Heartbeats.Nodes) == 3
	})
	tc := dialNode(t, c.client[1], "")
	r, e := tc.create(name, 3)
	for deadline := time.Now().Add(waitBound); e != nil && (e.Code == wire.CodeUnavailable || e.Code == wire.CodeNotYet) && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond) // no metadata primary right now (a view change): retry
		r, e = tc.create(name, 3)
	}
	if e != nil {
		t.Fatalf("create %s: %v %s", name, e.Code, e.Message)
	}
	c.waitCopies(r.Stream, 1, 1, 2, 3)
	return r.Stream
}

// TestFailover_OwnerKilledUnderProduce: three real nodes (real rings, disks and loopback links). The
// owner's node, which also holds the metadata primary, is killed abruptly (its links dropped, its
// ring abandoned with writes in flight) while a producer keeps four confirmed produces in flight. The
// survivors elect a metadata primary, its controller seals them and promotes one, and the producer
// goes on there. Every confirmed batch is read back once at its offset. The old owner, restarted,
// rejoins as a follower at the next assignment without another recovery (one history start).
func TestFailover_OwnerKilledUnderProduce(t *testing.T) {
	c := newFailoverCluster(t, 50)
	id := c.createStream("orders")
	p := newProducer(c, "orders", id)
	victim := p.owner
	p.produceFor(100, 300*time.Millisecond)
	killed := time.Now()
	p.dead[victim] = true
	c.nodes[victim].Kill()
	p.produceFor(100, 500*time.Millisecond)
	p.drain()
	if p.owner == victim || p.epoch < 2 {
		t.Fatalf("producing to node %d at epoch %d after node %d was killed", p.owner, p.epoch, victim)
	}
	t.Logf("owner %d killed: first confirm on owner %d %v later; %d batches confirmed, %d reconnects",
		victim, p.owner, p.firstNewAck.Sub(killed), len(p.acked), p.reconnects)
	confirmed := p.readBack()

	c.restart(victim)
	delete(p.dead, victim)
	var asg meta.Assignment
	waitForTB(t, "the old owner following at the current assignment", func() bool {
		pr := c.primary(0)
		if pr == nil {
			return false
		}
		ok := false
		c.metaState(pr.ID(), func(s *meta.State) { asg, ok = s.Assignment(id) })
		st := c.copyState(victim, id)
		return ok && asg.Includes(victim) && st.Open && st.Role == stream.RoleFollower && st.Epoch == asg.Epoch && st.Durable >= confirmed
	})
	p.produceFor(20, 0)
	p.drain()
	tail := p.readBack()
	waitForTB(t, "the old owner holding every confirmed record", func() bool {
		return c.copyState(victim, id).Durable >= tail
	})
	var starts meta.Starts
	c.metaState(c.primary(0).ID(), func(s *meta.State) { starts, _ = s.Starts(id) })
	if len(starts.List) != 1 || starts.List[0].Node == victim {
		t.Fatalf("history starts %+v: want the one recovery's, by a survivor", starts.List)
	}
	t.Logf("old owner %d rejoined as a follower at epoch %d (owner %d, followers %v)", victim, asg.Epoch, asg.Owner, asg.Followers)
}

// createStreams creates count three-copy streams PREFIX0.. in batched creates through node 1's
// client listener once every node is registered, waits for every copy, and returns their ids in
// name order.
func (c *failoverCluster) createStreams(t testing.TB, prefix string, count int) []uint64 {
	waitForTB(t, "every node registered", func() bool {
		p := c.primary(0)
		return p != nil && len(p.Status().Heartbeats.Nodes) == 3
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cl, err := client.Dial(ctx, client.Config{Addrs: []string{c.client[1].String()}, Cluster: nodeTestCluster,
		BackoffMin: 5 * time.Millisecond, BackoffMax: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	names := make([]string, count)
	for i := range names {
		names[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	results, err := cl.CreateStreams(ctx, names, client.StreamOptions{Copies: 3})
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]uint64, count)
	var existed map[string]uint64
	for i, r := range results {
		switch {
		case errors.Is(r.Err, client.ErrStreamExists):
			// A request that ran past the node's bound on a loaded machine is asked again, and the
			// names its first attempt committed exist: this run's own streams, found by a list.
			if existed == nil {
				existed = map[string]uint64{}
				all, err := cl.ListStreams(ctx)
				if err != nil {
					t.Fatal(err)
				}
				for _, info := range all {
					existed[info.Name] = info.Stream
				}
			}
			ids[i] = existed[names[i]]
		case r.Err != nil:
			t.Fatalf("create %s: %v", names[i], r.Err)
		default:
			ids[i] = r.Info.Stream
		}
	}
	c.waitEveryCopy(ids, 1, 1, 2, 3)
	return ids
}
