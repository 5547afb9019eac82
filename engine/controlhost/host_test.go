package controlhost

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringstream/ringstream/engine/control"
	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/engine/metahost"
	"github.com/ringstream/ringstream/engine/nodebeat"
	"github.com/ringstream/ringstream/shard"
	"github.com/ringstream/ringstream/shard/shardtest"
	"github.com/ringstream/ringstream/wire"
)

// sealCounter stands in for a stream's copy on a node (the broker side is not built yet): it counts
// the seal and assignment frames addressed to the stream, remembers the last seal's fence and the last
// assignment, and, when answer is set, answers each seal as sealed at tail records. On the node of the
// metadata primary it hands the seal replies it receives to the controller host, as the stream host
// will.
type sealCounter struct {
	shardtest.Group
	host               *Host
	answer             bool
	tail               uint64
	seals, assignments atomic.Int64
	fence              atomic.Uint32
	transition         atomic.Uint64 // of the last seal
	assigned           atomic.Uint64 // epoch<<16 | owner of the last assignment
	firstSeal          atomic.Int64  // time.Now().UnixNano() at the first seal
	firstMove          atomic.Int64  // at the first assignment past epoch 1
	frame              []byte
}

func (c *sealCounter) OnFrame(from uint16, h *wire.Header, body []byte) {
	if h.Command == wire.CommandStreamSealReply {
		if m, _, err := wire.DecodeStreamSealReply(h, body); err == nil {
			c.host.OnSealReply(from, m)
		}
		return
	}
	c.count(h, body)
}

// local takes the frames the controller addresses to its own node (Config.LocalFrame).
func (c *sealCounter) local(h *wire.Header, body []byte) { c.count(h, body) }

func (c *sealCounter) count(h *wire.Header, body []byte) {
	switch h.Command {
	case wire.CommandStreamSeal:
		m, _, err := wire.DecodeStreamSeal(h, body)
		if err != nil {
			return
		}
		c.firstSeal.CompareAndSwap(0, time.Now().UnixNano())
		c.fence.Store(m.FenceEpoch)
		c.transition.Store(m.TransitionID)
		c.seals.Add(1)
		if c.answer {
			c.reply(h.Sender, m)
		}
	case wire.CommandStreamAssignment:
		if m, _, err := wire.DecodeStreamAssignment(h, body); err == nil {
			if m.Epoch > 1 {
				c.firstMove.CompareAndSwap(0, time.Now().UnixNano())
			}
			c.assigned.Store(uint64(m.Epoch)<<16 | uint64(m.Owner))
			c.assignments.Add(1)
		}
	}
}

func (c *sealCounter) reply(to uint16, m wire.StreamSeal) {
	r := wire.StreamSealReply{Stream: m.Stream, Incarnation: m.Incarnation, FenceEpoch: m.FenceEpoch,
		Status: wire.SealSealed, TransitionID: m.TransitionID, RecordTail: c.tail}
	if to == c.Node {
		c.host.OnSealReply(to, r)
		return
	}
	c.frame = wire.AppendStreamSealReply(c.frame[:0], wire.From{Cluster: 42, Node: c.Node}, &r, nil)
	_ = c.Send(to, c.frame) // a lost answer is sealed again
}

// controlNode is one node of the controller tests: its metadata replica, heartbeat sender, controller
// host, and the counter standing in for its copy of stream 1.
type controlNode struct {
	*metaNode
	beat   *nodebeat.Beat
	host   *Host
	stream *sealCounter
	tails  nodebeat.CopyTailSource // set by setup (nil: no copies published)
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
func startControlCluster(t *testing.T, cfg control.Config, setup func(*controlNode)) []*controlNode {
	return startControlClusterTick(t, 2*time.Millisecond, cfg, setup)
}

func startControlClusterTick(t *testing.T, tick time.Duration, cfg control.Config,
	setup func(*controlNode)) []*controlNode {
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	var out []*controlNode
	nodes := startMetaClusterTB(t, dirs, tick, controlNodeOpts, func(n *metaNode) {
		out = append(out, addControl(t, n, cfg, setup))
	})
	alive := map[uint16]bool{1: true, 2: true, 3: true}
	waitFor(t, "a primary", func() bool { return primaryOf(nodes, alive) != nil })
	return out
}

func controlNodeOpts(uint16) metaNodeOpts { return metaNodeOpts{drain: time.Millisecond} }

// addControl puts a controller host, a heartbeat sender and the stand-in copy on n before it starts.
func addControl(t *testing.T, n *metaNode, cfg control.Config, setup func(*controlNode)) *controlNode {
	cn := &controlNode{metaNode: n, stream: &sealCounter{}}
	cn.stream.GroupID, cn.stream.Node, cn.stream.Cluster = testStream, n.id, 42
	cn.stream.MemberList = []shard.Member{{Index: 0, Node: n.id}}
	cn.stream.SetRole(shard.RoleOffline)
	if setup != nil {
		setup(cn)
	}
	host, err := New(Config{Control: cfg, LocalFrame: cn.stream.local}, n.group, n.node)
	if err != nil {
		t.Fatal(err)
	}
	beat, err := nodebeat.New(nodebeat.Config{Cluster: 42, Node: n.id, Shards: 1, To: []uint16{1, 2, 3},
		IntervalTicks: 5, Self: host.LocalHeartbeat, Copies: cn.tails})
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range []shard.Group{beat, cn.stream} {
		if err := n.node.AddGroup(g); err != nil {
			t.Fatal(err)
		}
	}
	cn.beat, cn.host, cn.stream.host = beat, host, host
	return cn
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

func checkResult(t *testing.T, res metahost.ProposeResult) {
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
	nodes := startControlCluster(t, controlTestConfig(), nil)
	alive := map[uint16]bool{1: true, 2: true, 3: true}
	p := primaryOf(metaNodes(nodes), alive)
	owner := p.id%3 + 1 // a node that is not the metadata primary
	setUpStream(t, nodes, owner)
	failOver(t, nodes, owner)
}

func TestControlHost_MetadataPrimaryKilledTheNewControllerResumes(t *testing.T) {
	nodes := startControlCluster(t, controlTestConfig(), nil)
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

// publishedCopy is a nodebeat.CopyTailSource publishing one copy of stream 1 at epoch 1.
type publishedCopy struct{ role wire.CopyRole }

func (p publishedCopy) AppendCopyTails(dst []wire.CopyTail) []wire.CopyTail {
	return append(dst, wire.CopyTail{Stream: testStream, Incarnation: 1, Epoch: 1, RecordTail: 7, Role: p.role})
}

// The copy tails of node heartbeats reach the controller: a member whose heartbeat shows its copy at
// the assignment's epoch is not sent the assignment again, one whose heartbeat shows nothing is, every
// SealRetryTimeoutTicks. This holds within one controller's term: a controller that becomes active
// forgets the heartbeats its predecessor heard and sends every assignment again (BecomePrimary), and
// under load a starved primary can lose its view in the middle of the measurement. A measurement that
// saw a controller become active is taken again.
func TestControlHost_HeartbeatTailsStopAssignmentResends(t *testing.T) {
	const silent = 3 // publishes no copy
	nodes := startControlCluster(t, controlTestConfig(), func(n *controlNode) {
		switch n.id {
		case 1:
			n.tails = publishedCopy{role: wire.RoleOwner}
		case 2:
			n.tails = publishedCopy{role: wire.RoleFollower}
		}
	})
	var terms atomic.Int64 // controllers that became active, on any node
	for _, n := range nodes {
		n.host.SetObserver(func(e Event) {
			if e.Kind == BecamePrimary {
				terms.Add(1)
			}
		})
	}
	setUpStream(t, nodes, 1)
	for attempt := 1; ; attempt++ {
		before := terms.Load()
		base, ok := measureResends(t, nodes, silent)
		// The counts are read before the terms: an assignment a new controller sent after this read
		// is not counted.
		got := [2]int64{nodes[0].stream.assignments.Load(), nodes[1].stream.assignments.Load()}
		if !ok || terms.Load() != before {
			if attempt == 5 {
				t.Fatalf("the controller changed during each of %d measurements", attempt)
			}
			t.Logf("attempt %d: the controller changed during the measurement; measuring again", attempt)
			continue
		}
		for i, n := range nodes[:2] {
			if got[i] != base[i] {
				t.Errorf("node %d, whose heartbeat shows its copy at epoch 1, was sent the assignment again (%d, then %d)",
					n.id, base[i], got[i])
			}
		}
		return
	}
}

// measureResends waits until the active controller heard three more heartbeats from each node, takes
// the nodes' assignment counts as the baseline, and waits for four resends to the silent node. It
// reports false if that controller stepped down before the baseline.
func measureResends(t *testing.T, nodes []*controlNode, silent uint16) (base [3]int64, ok bool) {
	t.Helper()
	alive := map[uint16]bool{1: true, 2: true, 3: true}
	// A node's tails are kept from its first heartbeat after it was registered: the baseline is taken
	// once every node was heard from again.
	var c *controlNode
	waitFor(t, "heartbeats after the stream's creation", func() bool {
		c = controllerOn(nodes, alive)
		return c != nil && nodes[0].stream.assignments.Load() > 0 && nodes[1].stream.assignments.Load() > 0
	})
	heard := c.host.Status().Stats.Heartbeats
	waitFor(t, "three more heartbeats from each node", func() bool {
		st := c.host.Status()
		return !st.Primary || st.Stats.Heartbeats >= heard+9
	})
	if !c.host.Status().Primary {
		return base, false
	}
	base = [3]int64{nodes[0].stream.assignments.Load(), nodes[1].stream.assignments.Load(),
		nodes[silent-1].stream.assignments.Load()}
	waitFor(t, "assignments sent again to the node that shows no copy", func() bool {
		return nodes[silent-1].stream.assignments.Load() >= base[2]+4
	})
	return base, true
}

// With every survivor answering its seal, the recovery commits: the survivor with the longer tail
// becomes owner at epoch 2 and both survivors are sent that assignment.
func TestControlHost_SealAnswersCommitTheFurthestSurvivor(t *testing.T) {
	nodes := startControlCluster(t, controlTestConfig(), func(n *controlNode) {
		n.stream.answer, n.stream.tail = true, 100+uint64(n.id)
	})
	alive := map[uint16]bool{1: true, 2: true, 3: true}
	p := primaryOf(metaNodes(nodes), alive)
	victim := p.id%3 + 1
	setUpStream(t, nodes, victim)
	want := uint16(0) // the survivor with the longest tail: the highest id
	for id := uint16(1); id <= 3; id++ {
		if id != victim {
			want = id
		}
	}
	kill(t, nodes[victim-1])
	alive[victim] = false
	waitFor(t, "the epoch 2 assignment on both survivors", func() bool {
		for _, n := range nodes {
			if alive[n.id] && n.stream.assigned.Load()>>16 != 2 {
				return false
			}
		}
		return true
	})
	for _, n := range nodes {
		if alive[n.id] {
			if owner := uint16(n.stream.assigned.Load()); owner != want {
				t.Errorf("node %d: epoch 2 owned by %d, want the furthest survivor %d", n.id, owner, want)
			}
		}
	}
	c := controllerOn(nodes, alive)
	waitFor(t, "both proposals and no attention in the published status", func() bool {
		st := c.host.Status()
		return st.Stats.Proposals >= 2 && st.Stats.SealReplies >= 2 && len(st.Attention) == 0
	})
	st := c.host.Status().Stats
	t.Logf("controller stats: %+v", st)
	// Both proposals (RecordRecovery, CommitRecovery) came back through the replies: none was left
	// to expire or refused.
	if st.Proposals != 2 || st.ProposalsExpired != 0 || st.ProposalsRefused != 0 || st.SealReplies < 2 {
		t.Fatalf("controller stats %+v: want 2 proposals answered, none expired or refused, 2 seal replies", st)
	}
}

// A clean shutdown's notice fails the node over at once: with the grace and liveness far away, the
// survivors are sealed well before either.
func TestControlHost_ShutdownNoticeFailsOverAtOnce(t *testing.T) {
	cfg := controlTestConfig()
	cfg.EagerFailoverGraceTicks = 2500 // 5 s at 2 ms
	nodes := startControlCluster(t, cfg, nil)
	alive := map[uint16]bool{1: true, 2: true, 3: true}
	p := primaryOf(metaNodes(nodes), alive)
	victim := nodes[p.id%3]
	setUpStream(t, nodes, victim.id)
	waitFor(t, "stream 1's assignment on every member", func() bool {
		for _, n := range nodes {
			if n.stream.assignments.Load() == 0 {
				return false
			}
		}
		return true
	})
	start := time.Now()
	if err := victim.beat.Shutdown(victim.node); err != nil {
		t.Fatal(err)
	}
	kill(t, victim)
	alive[victim.id] = false
	waitFor(t, "seals on both survivors", func() bool {
		for _, n := range nodes {
			if alive[n.id] && n.stream.seals.Load() == 0 {
				return false
			}
		}
		return true
	})
	if took, grace := time.Since(start), 2500*2*time.Millisecond; took >= grace {
		t.Fatalf("sealed after %v, not before the grace %v: the shutdown notice did not fail the node over", took, grace)
	}
}
