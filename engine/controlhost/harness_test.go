package controlhost

import (
	"net/netip"
	"testing"
	"time"

	"github.com/ringstream/ringstream/engine/metahost"
	"github.com/ringstream/ringstream/engine/vsr"
	"github.com/ringstream/ringstream/ring"
	"github.com/ringstream/ringstream/shard"
	"github.com/ringstream/ringstream/shard/heartbeat"
)

// The metadata replicas the controller tests run on: a copy of engine/metahost's test harness, over
// its exported API.

// metaTestTicks: P = 5 ticks, busy timeout 40, idle interval 10, idle timeout 60 (valid under R9/R23
// relations in ticks). With a 2 ms tick a silent primary is noticed within about 100 ms.
func metaTestTicks() heartbeat.Ticks {
	return heartbeat.Ticks{BroadcastIntervalTicks: 5, HeartbeatTimeoutTicks: 40, IdleHeartbeatIntervalTicks: 10,
		IdleHeartbeatTimeoutTicks: 60}
}

// waitBound only guards a test from hanging when the cluster never gets there; nothing is timed.
const waitBound = 60 * time.Second

type metaNode struct {
	id    uint16
	node  *shard.Node
	group *metahost.Group
}

// metaNodeOpts adjusts one test node.
type metaNodeOpts struct {
	tune     func(*metahost.Config)
	wrap     func(ring.Ring) ring.Ring // shard 0's ring (shard.Config.WrapRing)
	schedule heartbeat.Ticks           // zero: metaTestTicks()
	drain    time.Duration             // shard.Config.DrainTimeout (zero: the default)
	taskRun  ring.TaskRun              // the shard ring's task-run mode (empty: the default)
}

// startMetaClusterTB formats dirs and starts one node on each; opts (when not nil) adjusts node id,
// and before runs on each node before it starts.
func startMetaClusterTB(t testing.TB, dirs []string, tick time.Duration, opts func(id uint16) metaNodeOpts,
	before func(*metaNode)) []*metaNode {
	t.Helper()
	var nodes []*metaNode
	for i, dir := range dirs {
		if err := metahost.Format(metahost.FormatConfig{Dir: dir, Cluster: 42, Node: uint16(i + 1), Replica: uint8(i)}); err != nil {
			t.Fatal(err)
		}
	}
	for i, dir := range dirs {
		var o metaNodeOpts
		if opts != nil {
			o = opts(uint16(i + 1))
		}
		nodes = append(nodes, newMetaNode(t, uint16(i+1), dir, tick, netip.MustParseAddrPort("127.0.0.1:0"), o))
	}
	for _, n := range nodes {
		if before != nil {
			before(n)
		}
		startMetaNode(t, n, nodes)
	}
	t.Cleanup(func() {
		for _, n := range nodes {
			_ = n.node.Stop()
			n.group.Close()
		}
	})
	return nodes
}

// newMetaNode opens node id's metadata replica from dir and puts it on a shard node listening on listen,
// with proposals waking shard 0 (SetWake) as a node wires it.
func newMetaNode(t testing.TB, id uint16, dir string, tick time.Duration, listen netip.AddrPort,
	o metaNodeOpts) *metaNode {
	t.Helper()
	members := []shard.Member{{Index: 0, Node: 1}, {Index: 1, Node: 2}, {Index: 2, Node: 3}}
	vcfg := vsr.DefaultConfig(3, uint8(id-1))
	vcfg.PrepareTimeoutTicks, vcfg.RepairTimeoutTicks, vcfg.ViewChangeTimeoutTicks = 10, 10, 80
	cfg := metahost.Config{Dir: dir, Cluster: 42, Node: id, Members: members, VSR: vcfg}
	if o.tune != nil {
		o.tune(&cfg)
	}
	g, err := metahost.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	sc := shard.Config{Node: id, Cluster: 42, Shards: 1, Tick: tick, Schedule: metaTestTicks(),
		Listen: listen, OutboxBytes: 1 << 20, QueueCapacity: 1024, DrainTimeout: o.drain}
	sc.Ring.TaskRun = o.taskRun
	if o.schedule != (heartbeat.Ticks{}) {
		sc.Schedule = o.schedule
	}
	if o.wrap != nil {
		sc.WrapRing = func(_ int, r ring.Ring) ring.Ring { return o.wrap(r) }
	}
	n, err := shard.NewNode(sc)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.AddGroup(g); err != nil {
		t.Fatal(err)
	}
	g.SetWake(func() { n.Wake(0) })
	return &metaNode{id: id, node: n, group: g}
}

// startMetaNode starts n with every other node of nodes as its peers.
func startMetaNode(t testing.TB, n *metaNode, nodes []*metaNode) {
	t.Helper()
	var peers []shard.Peer
	for _, o := range nodes {
		if o.id != n.id {
			peers = append(peers, shard.Peer{Node: o.id, Addr: o.node.Addr()})
		}
	}
	if err := n.node.Start(peers); err != nil {
		t.Fatal(err)
	}
}

// waitFor polls the published status of the live nodes until cond holds (the bound only guards
// against a hang).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitBound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never reached: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func primaryOf(nodes []*metaNode, alive map[uint16]bool) *metaNode {
	for _, n := range nodes {
		if alive[n.id] && n.group.Status().Primary {
			return n
		}
	}
	return nil
}

// commitOp proposes op on the current primary until it commits, retrying on another replica when the
// one asked is not (or no longer) the primary.
func commitOp(t testing.TB, nodes []*metaNode, alive map[uint16]bool, client, request uint64, op []byte) metahost.ProposeResult {
	t.Helper()
	deadline := time.Now().Add(waitBound)
	for time.Now().Before(deadline) {
		p := primaryOf(nodes, alive)
		if p == nil {
			time.Sleep(5 * time.Millisecond)
			continue
		}
		select {
		case res := <-p.group.Propose(client, request, op):
			if res.Err == nil {
				return res
			}
			t.Logf("propose %d on node %d: %v", request, p.id, res.Err)
		case <-time.After(2 * time.Second):
			for _, n := range nodes {
				t.Logf("node %d: %+v", n.id, n.group.Status())
			}
		}
	}
	t.Fatalf("op %d of client %d never committed", request, client)
	return metahost.ProposeResult{}
}
