package engine

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringstream/ringstream/engine/control"
	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/shard"
	"github.com/ringstream/ringstream/shard/shardtest"
	"github.com/ringstream/ringstream/wire"
)

// sealCounter stands in for a stream's copy on a node (the broker side is not built yet): it counts
// the seal and assignment frames addressed to the stream, and the fence of the last seal.
type sealCounter struct {
	shardtest.Group
	seals, assignments atomic.Int64
	fence              atomic.Uint32
}

func (c *sealCounter) OnFrame(_ uint16, h *wire.Header, body []byte) { c.count(h, body) }

func (c *sealCounter) count(h *wire.Header, body []byte) {
	switch h.Command {
	case wire.CommandStreamSeal:
		if m, _, err := wire.DecodeStreamSeal(h, body); err == nil {
			c.fence.Store(m.FenceEpoch)
			c.seals.Add(1)
		}
	case wire.CommandStreamAssignment:
		if _, _, err := wire.DecodeStreamAssignment(h, body); err == nil {
			c.assignments.Add(1)
		}
	}
}

// controlNode is one node of the controller tests: its metadata replica, heartbeat sender, controller
// host, and the counter standing in for its copy of stream 1.
type controlNode struct {
	*metaNode
	beat   *NodeBeat
	host   *ControlHost
	stream *sealCounter
}

// controlTestConfig: liveness far above the grace, so a failover within the liveness timeout is the
// eager one (links closed for the grace).
func controlTestConfig() control.Config {
	cfg := control.DefaultConfig()
	cfg.NodeLivenessTimeoutTicks = 5000 // 10 s at 2 ms
	cfg.EagerFailoverGraceTicks = 25    // 50 ms
	return cfg
}

const testStream = 1 // the first stream id meta allocates

// startControlCluster starts three metadata nodes, each with a node heartbeat sender every 5 ticks and
// a controller host, and a stand-in copy of stream 1. Stop is given a 1 ms drain deadline, so a
// stopped node abandons what is in flight with its ring.
func startControlCluster(t *testing.T) []*controlNode {
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	var out []*controlNode
	opts := func(uint16) metaNodeOpts { return metaNodeOpts{drain: time.Millisecond} }
	nodes := startMetaClusterTB(t, dirs, 2*time.Millisecond, opts, func(n *metaNode) {
		cn := &controlNode{metaNode: n, stream: &sealCounter{}}
		cn.stream.GroupID, cn.stream.Node, cn.stream.Cluster = testStream, n.id, 42
		cn.stream.MemberList = []shard.Member{{Index: 0, Node: n.id}}
		cn.stream.SetRole(shard.RoleOffline)
		host, err := NewControlHost(ControlHostConfig{Control: controlTestConfig(),
			LocalFrame: cn.stream.count}, n.group, n.node)
		if err != nil {
			t.Fatal(err)
		}
		beat, err := NewNodeBeat(NodeBeatConfig{Cluster: 42, Node: n.id, Shards: 1, To: []uint16{1, 2, 3},
			IntervalTicks: 5, Self: host.LocalHeartbeat})
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range []shard.Group{beat, cn.stream} {
			if err := n.node.AddGroup(g); err != nil {
				t.Fatal(err)
			}
		}
		cn.beat, cn.host = beat, host
		out = append(out, cn)
	})
	alive := map[uint16]bool{1: true, 2: true, 3: true}
	waitFor(t, "a primary", func() bool { return primaryOf(nodes, alive) != nil })
	return out
}

func metaNodes(nodes []*controlNode) []*metaNode {
	var out []*metaNode
	for _, n := range nodes {
		out = append(out, n.metaNode)
	}
	return out
}

// setUpStream registers the three nodes and creates stream 1 owned by owner, through proposals.
func setUpStream(t *testing.T, nodes []*controlNode, owner uint16) {
	alive := map[uint16]bool{1: true, 2: true, 3: true}
	var followers []uint16
	for id := uint16(1); id <= 3; id++ {
		op := meta.AppendOp(nil, meta.RegisterNode{Node: id, Address: fmt.Sprintf("127.0.0.1:%d", 7000+id)})
		checkResult(t, commitOp(t, metaNodes(nodes), alive, 5, uint64(id), op))
		if id != owner {
			followers = append(followers, id)
		}
	}
	policy := meta.Policy{Kind: meta.PolicyMajorityDurable}
	op := meta.AppendOp(nil, meta.CreateStream{Name: "orders", Copies: 3, Policy: policy, Owner: owner,
		Followers: followers, Stamped: policy})
	checkResult(t, commitOp(t, metaNodes(nodes), alive, 5, 4, op))
}

func checkResult(t *testing.T, res ProposeResult) {
	t.Helper()
	if r, err := meta.DecodeResult(res.Result); err != nil || !r.OK() {
		t.Fatalf("op %d: %v %v", res.Op, r, err)
	}
}

// controllerOn returns the node whose controller is active among alive.
func controllerOn(nodes []*controlNode, alive map[uint16]bool) *controlNode {
	for _, n := range nodes {
		if alive[n.id] && n.host.Status().Primary {
			return n
		}
	}
	return nil
}

// kill stops n abruptly: no shutdown notice, links closed, the ring abandoned after 1 ms.
func kill(t *testing.T, n *controlNode) {
	if err := n.node.Stop(); err != nil {
		t.Fatal(err)
	}
}

// failOver kills the stream's owner victim and checks that the active controller among the
// survivors sees it lost through the eager failover grace, commits a recovery for stream 1 and seals
// the survivors' copies at epoch 2.
func failOver(t *testing.T, nodes []*controlNode, victim uint16) {
	alive := map[uint16]bool{1: true, 2: true, 3: true}
	waitFor(t, "node heartbeats at the controller", func() bool {
		c := controllerOn(nodes, alive)
		return c != nil && c.host.Status().Stats.Heartbeats >= 9
	})
	waitFor(t, "stream 1's assignment on every member", func() bool {
		for _, n := range nodes {
			if n.stream.assignments.Load() == 0 {
				return false
			}
		}
		return true
	})
	for _, n := range nodes {
		if n.stream.seals.Load() != 0 {
			t.Fatalf("node %d sealed before any loss", n.id)
		}
	}
	start := time.Now()
	kill(t, nodes[victim-1])
	alive[victim] = false
	waitFor(t, "seals on both survivors", func() bool {
		for _, n := range nodes {
			if alive[n.id] && (n.stream.seals.Load() == 0 || n.stream.fence.Load() != 2) {
				return false
			}
		}
		return true
	})
	took := time.Since(start)
	c := controllerOn(nodes, alive)
	if c == nil {
		t.Fatal("no active controller among the survivors")
	}
	waitFor(t, "the controller's published stats", func() bool { return c.host.Status().Stats.Seals > 0 })
	st := c.host.Status()
	t.Logf("owner %d killed: survivors sealed at epoch 2 after %v; controller on %d: %+v", victim, took, c.id, st.Stats)
	if liveness := 5000 * 2 * time.Millisecond; took >= liveness {
		t.Fatalf("failover took %v, not before the liveness timeout %v: the eager failover did not fire", took, liveness)
	}
	if st.Stats.NodesLost == 0 || st.Stats.Seals == 0 {
		t.Fatalf("controller stats %+v: no node lost or no seal", st.Stats)
	}
	// Nobody answers the seals (no broker yet): the recovery waits with fewer than R answers, which
	// shows its RecordRecovery committed.
	waitFor(t, "the recovery's wait under attention", func() bool {
		for _, a := range c.host.Status().Attention {
			if a.Stream == testStream && a.Kind == control.AttentionFewerThanR && a.Recovery != 0 {
				return true
			}
		}
		return false
	})
}

func TestControlHost_OwnerNodeKilledIsSealedAfterTheGrace(t *testing.T) {
	nodes := startControlCluster(t)
	alive := map[uint16]bool{1: true, 2: true, 3: true}
	p := primaryOf(metaNodes(nodes), alive)
	owner := p.id%3 + 1 // a node that is not the metadata primary
	setUpStream(t, nodes, owner)
	failOver(t, nodes, owner)
}

func TestControlHost_MetadataPrimaryKilledTheNewControllerResumes(t *testing.T) {
	nodes := startControlCluster(t)
	alive := map[uint16]bool{1: true, 2: true, 3: true}
	p := primaryOf(metaNodes(nodes), alive)
	setUpStream(t, nodes, p.id) // the primary's node also owns the stream
	failOver(t, nodes, p.id)
	for _, n := range nodes {
		if n.id != p.id && n.host.Status().Primary && n.group.Status().View == 0 {
			t.Fatalf("node %d's controller active in view 0: no view change happened", n.id)
		}
	}
}
