package control

import (
	"fmt"
	"slices"
	"testing"

	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/wire"
)

var majority = meta.Policy{Kind: meta.PolicyMajorityDurable}

// fixture drives a Controller over a real meta.State, applying the ops it proposes the way the
// metadata group would (encoded, at growing op numbers) and feeding heartbeats as wire frames.
type fixture struct {
	t   *testing.T
	s   *meta.State
	c   *Controller
	op  uint64
	fx  *Effects
	seq uint64
	// published is each node's last heartbeat's tails, which keep-alive heartbeats publish again.
	published map[uint16][]wire.CopyTail
}

// newFixture registers nodes 1..nodes and starts a primary controller with cfg.
func newFixture(t *testing.T, cfg Config, nodes int) *fixture {
	t.Helper()
	f := &fixture{t: t, s: meta.NewState(), published: make(map[uint16][]wire.CopyTail)}
	for id := 1; id <= nodes; id++ {
		f.mustApply(meta.RegisterNode{Node: uint16(id), Address: fmt.Sprintf("127.0.0.1:%d", 7000+id)})
	}
	c, err := New(cfg, f.s)
	if err != nil {
		t.Fatal(err)
	}
	f.c = c
	c.BecomePrimary()
	return f
}

func testConfig() Config {
	cfg := DefaultConfig()
	cfg.NodeLivenessTimeoutTicks = 30
	cfg.EagerFailoverGraceTicks = 5
	cfg.SealTimeoutTicks = 10
	cfg.SealRetryTimeoutTicks = 3
	cfg.ProposalTimeoutTicks = 50
	return cfg
}

func (f *fixture) apply(op meta.Op) meta.Result {
	f.t.Helper()
	f.op++
	out := f.s.Apply(meta.AppendOp(nil, op), f.op, nil)
	r, err := meta.DecodeResult(out)
	if err != nil {
		f.t.Fatal(err)
	}
	return r
}

func (f *fixture) mustApply(op meta.Op) meta.Result {
	f.t.Helper()
	r := f.apply(op)
	if !r.OK() {
		f.t.Fatalf("%s refused: %s", op.Kind(), r)
	}
	return r
}

// createStream creates a stream with copies copies placed on owner and followers, stamped.
func (f *fixture) createStream(name string, copies uint8, stamped meta.Policy, owner uint16, followers ...uint16) meta.Stream {
	f.t.Helper()
	f.mustApply(meta.CreateStream{Name: name, Copies: copies, Policy: majority, Owner: owner,
		Followers: followers, Stamped: stamped})
	st, _ := f.s.StreamByName(name)
	f.c.StateChanged()
	return st
}

// heartbeat delivers a heartbeat from node carrying tails.
func (f *fixture) heartbeat(node uint16, flags wire.HeartbeatFlags, tails ...wire.CopyTail) {
	f.t.Helper()
	f.seq++
	f.published[node] = tails
	frame := wire.AppendNodeHeartbeat(nil, wire.From{Cluster: 1, Node: node},
		&wire.NodeHeartbeat{Sequence: f.seq, Flags: flags}, tails)
	h, body, err := wire.ParseFrame(frame)
	if err != nil {
		f.t.Fatal(err)
	}
	m, copies, err := wire.DecodeNodeHeartbeat(&h, body)
	if err != nil {
		f.t.Fatal(err)
	}
	f.c.OnHeartbeat(node, m, copies)
}

// heartbeatAll sends a heartbeat from each node, publishing the tails it published last.
func (f *fixture) heartbeatAll(nodes ...uint16) {
	for _, n := range nodes {
		f.heartbeat(n, 0, f.published[n]...)
	}
}

func tail(st meta.Stream, epoch uint32, role wire.CopyRole, record, cursor uint64) wire.CopyTail {
	return wire.CopyTail{Stream: st.ID, Incarnation: st.Incarnation, Epoch: epoch, RecordTail: record,
		CursorTail: cursor, Role: role}
}

// ticks runs n ticks, keeping the nodes in alive sending a heartbeat every tick.
func (f *fixture) ticks(n int, alive ...uint16) {
	for range n {
		f.heartbeatAll(alive...)
		f.c.Tick()
	}
}

// ready collects the controller's effects and checks its invariants.
func (f *fixture) ready() *Effects {
	f.fx = f.c.Ready()
	f.c.CheckInvariants()
	return f.fx
}

// commit applies every proposal of the last Ready in order, reports each outcome, and returns the
// results.
func (f *fixture) commit() []meta.Result {
	f.t.Helper()
	var out []meta.Result
	props := slices.Clone(f.fx.Proposals)
	for _, p := range props {
		r := f.apply(p.Op)
		out = append(out, r)
		f.c.ProposalApplied(p.For(), r)
	}
	f.c.StateChanged()
	return out
}

// mustCommit is commit that fails the test on a refusal.
func (f *fixture) mustCommit() []meta.Result {
	f.t.Helper()
	rs := f.commit()
	for _, r := range rs {
		if !r.OK() {
			f.t.Fatalf("proposal refused: %s", r)
		}
		for _, e := range r.Entries {
			if !e.OK() {
				f.t.Fatalf("batch entry refused: %s", r)
			}
		}
	}
	return rs
}

// onlyProposal returns the single proposal of the last Ready, of type T.
func onlyProposal[T meta.Op](t *testing.T, fx *Effects) T {
	t.Helper()
	if len(fx.Proposals) != 1 {
		t.Fatalf("%d proposals, want 1: %+v", len(fx.Proposals), fx.Proposals)
	}
	op, ok := fx.Proposals[0].Op.(T)
	if !ok {
		t.Fatalf("proposal %T, want %T", fx.Proposals[0].Op, op)
	}
	return op
}

// reply delivers a sealed answer from node to the seal s.
func (f *fixture) reply(node uint16, s wire.StreamSeal, record, cursor uint64) {
	f.c.OnSealReply(node, wire.StreamSealReply{Stream: s.Stream, Incarnation: s.Incarnation,
		FenceEpoch: s.FenceEpoch, Status: wire.SealSealed, TransitionID: s.TransitionID,
		RecordTail: record, CursorTail: cursor})
}

// sealsTo returns the nodes the last Ready sealed, ascending, and the seal message they got.
func sealsTo(t *testing.T, fx *Effects) ([]uint16, wire.StreamSeal) {
	t.Helper()
	var nodes []uint16
	var m wire.StreamSeal
	for i, s := range fx.Seals {
		if i > 0 && s.Seal != m {
			t.Fatalf("seals for more than one transition: %+v and %+v", m, s.Seal)
		}
		m = s.Seal
		nodes = append(nodes, s.To)
	}
	slices.Sort(nodes)
	return nodes, m
}

// failOwner makes node 1 lost through a shutdown notice and commits the recovery the controller
// proposes, returning it.
func (f *fixture) failOwner(st meta.Stream, owner uint16) meta.Recovery {
	f.t.Helper()
	f.heartbeat(owner, wire.FlagShuttingDown)
	onlyProposal[meta.RecordRecovery](f.t, f.ready())
	f.mustCommit()
	rec, ok := f.s.RecoveryOf(st.ID)
	if !ok {
		f.t.Fatal("no recovery recorded")
	}
	return rec
}

// settle commits what the controller proposes until it proposes nothing more.
func (f *fixture) settle() {
	f.t.Helper()
	for i := 0; ; i++ {
		if len(f.ready().Proposals) == 0 {
			return
		}
		if i == 10 {
			f.t.Fatalf("still proposing after 10 rounds: %+v", f.fx.Proposals)
		}
		f.mustCommit()
	}
}
