package control

import (
	"errors"
	"reflect"
	"testing"

	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/wire"
)

// Spec 000: the owner is lost through liveness expiry; because the stream is replicated the
// controller records a pending recovery instead of moving it at once, proposing the live follower
// with the furthest published tails, a replacement follower, and the cluster policy.
func TestOwnerLoss_LivenessExpiryRecordsRecovery(t *testing.T) {
	f := newFixture(t, testConfig(), 4)
	st := f.createStream("s", 3, majority, 1, 2, 3)
	f.heartbeat(2, 0, tail(st, 1, wire.RoleFollower, 40, 3))
	f.heartbeat(3, 0, tail(st, 1, wire.RoleFollower, 41, 1))
	f.heartbeatAll(1, 4)
	if fx := f.ready(); len(fx.Proposals) != 0 {
		t.Fatalf("proposals with every node alive: %+v", fx.Proposals)
	}
	f.ticks(int(testConfig().NodeLivenessTimeoutTicks)-1, 2, 3, 4)
	if fx := f.ready(); len(fx.Proposals) != 0 {
		t.Fatalf("proposals before liveness expired: %+v", fx.Proposals)
	}
	f.ticks(1, 2, 3, 4)
	op := onlyProposal[meta.RecordRecovery](t, f.ready())
	want := meta.RecordRecovery{Stream: st.ID, Incarnation: 1, ExpectedEpoch: 1, ProposedOwner: 3,
		Members: []uint16{2, 3, 4}, Policy: majority, Reason: meta.ReasonLivenessExpiry}
	if !reflect.DeepEqual(op, want) {
		t.Fatalf("proposal %+v\nwant     %+v", op, want)
	}
	f.mustCommit()
	if a, _ := f.s.Assignment(st.ID); a.Epoch != 1 || a.Owner != 1 {
		t.Fatalf("assignment moved at once: %+v", a)
	}
}

// Eager failover: a clean shutdown notice loses the node at once.
func TestEagerFailover_ShutdownNotice(t *testing.T) {
	f := newFixture(t, testConfig(), 3)
	st := f.createStream("s", 3, majority, 1, 2, 3)
	f.heartbeatAll(1, 2, 3)
	f.ready()
	f.heartbeat(1, wire.FlagShuttingDown)
	op := onlyProposal[meta.RecordRecovery](t, f.ready())
	if op.Reason != meta.ReasonEagerFailover || op.Stream != st.ID {
		t.Fatalf("proposal %+v", op)
	}
}

// Eager failover: a node whose links closed and are not back within eager_failover_grace is lost; one
// whose links come back in time is not.
func TestEagerFailover_LinksClosedPastGrace(t *testing.T) {
	cfg := testConfig()
	f := newFixture(t, cfg, 3)
	f.createStream("s", 3, majority, 1, 2, 3)
	f.heartbeatAll(1, 2, 3)
	f.ready()

	f.c.OnLinkDown(1)
	f.ticks(int(cfg.EagerFailoverGraceTicks)-1, 2, 3)
	f.c.OnLinkUp(1)
	f.ticks(int(cfg.EagerFailoverGraceTicks)+1, 2, 3)
	if fx := f.ready(); len(fx.Proposals) != 0 {
		t.Fatalf("links back within grace, yet %+v", fx.Proposals)
	}

	f.c.OnLinkDown(1)
	f.ticks(int(cfg.EagerFailoverGraceTicks)-1, 2, 3)
	if fx := f.ready(); len(fx.Proposals) != 0 {
		t.Fatalf("before grace ran out: %+v", fx.Proposals)
	}
	f.ticks(1, 2, 3)
	if op := onlyProposal[meta.RecordRecovery](t, f.ready()); op.Reason != meta.ReasonEagerFailover {
		t.Fatalf("reason %s", op.Reason)
	}
}

// The grace is wall time: ticks the host skipped (its shard stalled) count for a node whose link is
// down, so a controller on a busy shard does not wait twice the grace at half speed. They count for
// nothing else: a node with its link up is not lost by skipped ticks, whatever their number.
func TestEagerFailover_SkippedTicksCountForTheGrace(t *testing.T) {
	cfg := testConfig()
	f := newFixture(t, cfg, 3)
	f.createStream("s", 3, majority, 1, 2, 3)
	f.heartbeatAll(1, 2, 3)
	f.ready()

	f.c.TicksSkipped(uint64(cfg.NodeLivenessTimeoutTicks) * 2)
	f.ticks(1, 1, 2, 3)
	if fx := f.ready(); len(fx.Proposals) != 0 {
		t.Fatalf("skipped ticks with every link up: %+v", fx.Proposals)
	}
	f.c.OnLinkDown(1)
	f.c.TicksSkipped(uint64(cfg.EagerFailoverGraceTicks) - 2)
	f.ticks(1, 2, 3)
	if fx := f.ready(); len(fx.Proposals) != 0 {
		t.Fatalf("one tick short of the grace: %+v", fx.Proposals)
	}
	f.ticks(1, 2, 3)
	if op := onlyProposal[meta.RecordRecovery](t, f.ready()); op.Reason != meta.ReasonEagerFailover {
		t.Fatalf("reason %s", op.Reason)
	}
}

// Eager failover is not cancelled by heartbeats handled after the links closed (sent before they
// closed, or arriving while the controller's links to the node stay down): the node is lost when the
// grace runs out, not at liveness expiry, and its late heartbeats do not make it alive again. Once a
// link is back, its next heartbeat does.
func TestEagerFailover_HeartbeatAfterLinkDownDoesNotCancel(t *testing.T) {
	cfg := testConfig()
	f := newFixture(t, cfg, 3)
	f.createStream("s", 3, majority, 1, 2, 3)
	f.heartbeatAll(1, 2, 3)
	f.ready()

	f.c.OnLinkDown(1)
	f.heartbeat(1, 0) // sent before the links closed
	f.ticks(int(cfg.EagerFailoverGraceTicks)-1, 1, 2, 3)
	if fx := f.ready(); len(fx.Proposals) != 0 {
		t.Fatalf("before grace ran out: %+v", fx.Proposals)
	}
	f.ticks(1, 2, 3)
	if op := onlyProposal[meta.RecordRecovery](t, f.ready()); op.Reason != meta.ReasonEagerFailover {
		t.Fatalf("reason %s", op.Reason)
	}
	f.heartbeat(1, 0)
	if f.c.nodeAlive(1) {
		t.Fatal("node 1 alive again on a heartbeat while its links are down")
	}
	f.c.OnLinkUp(1)
	if f.c.nodeAlive(1) {
		t.Fatal("node 1 alive on a link-up alone")
	}
	f.heartbeat(1, 0)
	if !f.c.nodeAlive(1) {
		t.Fatal("node 1 not alive after its link came back and it sent a heartbeat")
	}
}

// A lost node that sends a heartbeat again is alive; a stream whose owner is back before anything was
// proposed stays as it is.
func TestLostNodeBackByHeartbeat(t *testing.T) {
	f := newFixture(t, testConfig(), 3)
	f.createStream("s", 1, majority, 1)
	f.heartbeatAll(1, 2, 3)
	f.heartbeat(1, wire.FlagShuttingDown)
	f.ready()
	if f.c.nodeAlive(1) {
		t.Fatal("node 1 alive after its shutdown notice")
	}
	f.heartbeat(1, 0)
	if !f.c.nodeAlive(1) {
		t.Fatal("node 1 not alive after a heartbeat")
	}
}

// Spec 000: a stream change that keeps the owner and every follower and needs no more copies to
// confirm commits without recovery: the controller places a replacement follower after a failover
// with SetAssignment, not with a recovery.
func TestFollowerAddition_CommitsWithoutRecovery(t *testing.T) {
	f := newFixture(t, testConfig(), 4)
	st := f.createStream("s", 3, majority, 1, 2, 3)
	f.heartbeatAll(1, 2, 3)
	f.ready()
	rec := f.failOwner(st, 1)
	_, seal := sealsTo(t, f.ready())
	f.reply(2, seal, 10, 0)
	f.reply(3, seal, 10, 0)
	f.ticks(int(testConfig().SealTimeoutTicks), 2, 3)
	onlyProposal[meta.CommitRecovery](t, f.ready())
	f.mustCommit()
	if a, _ := f.s.Assignment(st.ID); a.Epoch != 2 || a.Copies() != 2 {
		t.Fatalf("after recovery %d: %+v", rec.ID, a)
	}
	// Node 4 comes up: the stream has 2 of its 3 copies, majority of 2 is 2, of 3 is 2.
	f.heartbeat(4, 0)
	op := onlyProposal[meta.SetAssignment](t, f.ready())
	want := meta.SetAssignment{Stream: st.ID, Incarnation: 1, ExpectedEpoch: 2, Owner: 2,
		Followers: []uint16{3, 4}, Policy: majority}
	if !reflect.DeepEqual(op, want) {
		t.Fatalf("proposal %+v\nwant     %+v", op, want)
	}
	f.mustCommit()
	if _, ok := f.s.RecoveryOf(st.ID); ok {
		t.Fatal("a follower addition recorded a recovery")
	}
	if a, _ := f.s.Assignment(st.ID); a.Epoch != 3 || !reflect.DeepEqual(a.Followers, []uint16{3, 4}) {
		t.Fatalf("assignment %+v", a)
	}
	if fx := f.ready(); len(fx.Proposals) != 0 {
		t.Fatalf("nothing left to do, yet %+v", fx.Proposals)
	}
}

// Under local_durable a follower addition raises W, so it is not a change without recovery (spec 000:
// such changes still recover): the controller records a recovery with reason placement whose members
// include the new copy, the live owner answers the seal and stays owner, and the new copy joins.
func TestFollowerAddition_RaisingWGoesThroughRecovery(t *testing.T) {
	cfg := testConfig()
	cfg.AssignmentPolicy = meta.Policy{Kind: meta.PolicyLocalDurable}
	f := newFixture(t, cfg, 3)
	st := f.createStream("s", 3, cfg.AssignmentPolicy, 1, 2)
	f.heartbeatAll(1, 2, 3)
	op := onlyProposal[meta.RecordRecovery](t, f.ready())
	want := meta.RecordRecovery{Stream: st.ID, Incarnation: 1, ExpectedEpoch: 1, ProposedOwner: 1,
		Members: []uint16{1, 2, 3}, Policy: cfg.AssignmentPolicy, Reason: meta.ReasonPlacement}
	if !reflect.DeepEqual(op, want) {
		t.Fatalf("proposal %+v\nwant     %+v", op, want)
	}
	f.mustCommit()
	_, seal := sealsTo(t, f.ready())
	f.reply(1, seal, 70, 3)
	f.reply(2, seal, 69, 3)
	onlyProposal[meta.CommitRecovery](t, f.ready())
	f.mustCommit()
	a, _ := f.s.Assignment(st.ID)
	if a.Epoch != 2 || a.Owner != 1 || !reflect.DeepEqual(a.Followers, []uint16{2, 3}) {
		t.Fatalf("assignment %+v", a)
	}
	if fx := f.ready(); len(fx.Proposals) != 0 {
		t.Fatalf("nothing left to do, yet %+v", fx.Proposals)
	}
}

// The restarted old owner rejoins as a follower without another recovery (issue 12, "Done when"):
// after the failover it comes back, and the controller adds it with SetAssignment.
func TestOldOwnerRejoinsAsFollowerWithoutRecovery(t *testing.T) {
	f := newFixture(t, testConfig(), 3)
	st := f.createStream("s", 3, majority, 1, 2, 3)
	f.heartbeatAll(1, 2, 3)
	f.ready()
	f.failOwner(st, 1)
	_, seal := sealsTo(t, f.ready())
	f.reply(2, seal, 10, 0)
	f.reply(3, seal, 10, 0)
	onlyProposal[meta.CommitRecovery](t, f.ready())
	f.mustCommit()
	f.heartbeat(1, 0)
	op := onlyProposal[meta.SetAssignment](t, f.ready())
	if op.Owner != 2 || !reflect.DeepEqual(op.Followers, []uint16{1, 3}) {
		t.Fatalf("proposal %+v", op)
	}
	f.mustCommit()
	if _, ok := f.s.RecoveryOf(st.ID); ok {
		t.Fatal("the old owner's return recorded a recovery")
	}
}

// Spec 000: the controller stamps the cluster assignment policy on every replicated assignment;
// moving a stream from every copy to a majority needs no recovery.
func TestPolicyStamped_EveryCopyToMajorityWithoutRecovery(t *testing.T) {
	f := newFixture(t, testConfig(), 3)
	st := f.createStream("s", 3, meta.Policy{Kind: meta.PolicyLocalDurable}, 1, 2, 3)
	f.heartbeatAll(1, 2, 3)
	op := onlyProposal[meta.SetAssignment](t, f.ready())
	if op.Policy != majority || op.Owner != 1 || !reflect.DeepEqual(op.Followers, []uint16{2, 3}) {
		t.Fatalf("proposal %+v", op)
	}
	f.mustCommit()
	if a, _ := f.s.Assignment(st.ID); a.Policy != majority {
		t.Fatalf("assignment %+v", a)
	}
}

// Spec 000: a stream with one copy that loses its owner waits for that node and says so in attention.
func TestOneCopyStream_WaitsForItsNode(t *testing.T) {
	f := newFixture(t, testConfig(), 3)
	st := f.createStream("s", 1, majority, 1)
	f.heartbeatAll(1, 2, 3)
	f.ready()
	f.heartbeat(1, wire.FlagShuttingDown)
	if fx := f.ready(); len(fx.Proposals) != 0 {
		t.Fatalf("a one-copy stream moved: %+v", fx.Proposals)
	}
	att := f.c.Attention(nil)
	if len(att) != 1 || att[0].Kind != AttentionOneCopyOwnerLost || att[0].Node != 1 || att[0].Stream != st.ID {
		t.Fatalf("attention %+v", att)
	}
	f.heartbeat(1, 0)
	if att := f.c.Attention(nil); len(att) != 0 {
		t.Fatalf("attention after the node came back: %+v", att)
	}
}

// Spec 000 and DESIGN section 7: a new metadata primary rebuilds from the replicated state and fresh
// heartbeats and resumes pending recoveries, sealing again at the same fence with the same transition.
func TestNewPrimary_ResumesRecoveryAtSameFenceAndTransition(t *testing.T) {
	f := newFixture(t, testConfig(), 3)
	st := f.createStream("s", 3, majority, 1, 2, 3)
	f.heartbeatAll(1, 2, 3)
	f.ready()
	rec := f.failOwner(st, 1)
	_, first := sealsTo(t, f.ready())

	// The primary moves: a fresh controller on another replica over the same replicated state.
	next, err := New(testConfig(), f.s)
	if err != nil {
		t.Fatal(err)
	}
	f.c.StepDown()
	if fx := f.ready(); len(fx.Proposals)+len(fx.Seals) != 0 {
		t.Fatalf("a stepped-down controller acts: %+v", fx)
	}
	f.c = next
	next.BecomePrimary()
	nodes, again := sealsTo(t, f.ready())
	if again != first || again.TransitionID != rec.ID || again.FenceEpoch != 2 {
		t.Fatalf("resumed seal %+v, first %+v (recovery %d)", again, first, rec.ID)
	}
	if !reflect.DeepEqual(nodes, []uint16{1, 2, 3}) {
		t.Fatalf("sealed %v", nodes)
	}
	// Node 1 (lost under the old primary) gets a fresh liveness window: nothing else is proposed.
	if len(f.fx.Proposals) != 0 || !next.nodeAlive(1) {
		t.Fatalf("new primary acted on old liveness: %+v", f.fx.Proposals)
	}
	f.reply(2, again, 5, 0)
	f.reply(3, again, 7, 0)
	f.ticks(int(testConfig().SealTimeoutTicks), 2, 3)
	if op := onlyProposal[meta.CommitRecovery](t, f.ready()); op.Recovery != rec.ID || op.Owner != 3 {
		t.Fatalf("commit %+v", op)
	}
}

// A refused proposal backs off, a dropped one is proposed again at once, and one whose outcome never
// comes back is forgotten after ProposalTimeoutTicks.
func TestProposals_RefusedDroppedExpired(t *testing.T) {
	cfg := testConfig()
	f := newFixture(t, cfg, 3)
	st := f.createStream("s", 3, meta.Policy{Kind: meta.PolicyLocalDurable}, 1, 2, 3)
	f.heartbeatAll(1, 2, 3)
	onlyProposal[meta.SetAssignment](t, f.ready())
	f.c.ProposalDropped(st.ID)
	onlyProposal[meta.SetAssignment](t, f.ready())
	f.c.ProposalDone(st.ID, meta.Result{Code: meta.ResultEpochMismatch})
	f.ticks(int(cfg.SealRetryTimeoutTicks)-1, 1, 2, 3)
	if fx := f.ready(); len(fx.Proposals) != 0 {
		t.Fatalf("proposed again during the back-off: %+v", fx.Proposals)
	}
	f.ticks(1, 1, 2, 3)
	onlyProposal[meta.SetAssignment](t, f.ready())
	f.ticks(int(cfg.ProposalTimeoutTicks)-1, 1, 2, 3)
	if fx := f.ready(); len(fx.Proposals) != 0 {
		t.Fatalf("proposed again before the time-out: %+v", fx.Proposals)
	}
	f.ticks(1, 1, 2, 3)
	onlyProposal[meta.SetAssignment](t, f.ready())
	if s := f.c.Stats(); s.ProposalsRefused != 1 || s.ProposalsExpired != 1 {
		t.Fatalf("stats %+v", s)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	bad := []func(*Config){
		func(c *Config) { c.NodeLivenessTimeoutTicks = 0 },
		func(c *Config) { c.EagerFailoverGraceTicks = 0 },
		func(c *Config) { c.EagerFailoverGraceTicks = c.NodeLivenessTimeoutTicks },
		func(c *Config) { c.SealRetryTimeoutTicks = 0 },
		func(c *Config) { c.SealTimeoutTicks = c.SealRetryTimeoutTicks - 1 },
		func(c *Config) { c.ProposalTimeoutTicks = 0 },
		func(c *Config) { c.AssignmentPolicy = meta.Policy{} },
		func(c *Config) { c.AssignmentPolicy = meta.Policy{Kind: meta.PolicyCountDurable} },
	}
	for i, m := range bad {
		cfg := DefaultConfig()
		m(&cfg)
		if err := cfg.Validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("case %d: %v, want ErrConfig", i, err)
		}
	}
}

// The heartbeat path allocates nothing once a node's tail memory has grown.
func TestOnHeartbeat_AllocatesNothing(t *testing.T) {
	f := newFixture(t, testConfig(), 3)
	var tails []wire.CopyTail
	for i := range 64 {
		st := f.createStream("s"+string(rune('a'+i%26))+string(rune('a'+i/26)), 3, majority, 1, 2, 3)
		tails = append(tails, tail(st, 1, wire.RoleOwner, uint64(i), 0))
	}
	frame := wire.AppendNodeHeartbeat(nil, wire.From{Cluster: 1, Node: 1}, &wire.NodeHeartbeat{Sequence: 1}, tails)
	h, body, err := wire.ParseFrame(frame)
	if err != nil {
		t.Fatal(err)
	}
	m, copies, err := wire.DecodeNodeHeartbeat(&h, body)
	if err != nil {
		t.Fatal(err)
	}
	f.c.OnHeartbeat(1, m, copies)
	if n := testing.AllocsPerRun(100, func() { f.c.OnHeartbeat(1, m, copies) }); n != 0 {
		t.Fatalf("%v allocations per heartbeat", n)
	}
}

// A backup counts the time a node's links have been down, so a node whose links closed together with
// the old primary's is lost at the new primary's first tick, not one more grace later.
func TestNewPrimary_LinkGraceCountedAsBackupCarriesOver(t *testing.T) {
	cfg := testConfig()
	f := newFixture(t, cfg, 3)
	f.createStream("s", 3, majority, 1, 2, 3)
	f.heartbeatAll(1, 2, 3)
	f.ready()

	backup, err := New(cfg, f.s)
	if err != nil {
		t.Fatal(err)
	}
	backup.StateChanged()
	backup.OnLinkDown(1)
	for range cfg.EagerFailoverGraceTicks {
		backup.Tick()
	}
	if fx := backup.Ready(); len(fx.Proposals)+len(fx.Seals) != 0 || backup.Stats().NodesLost != 0 {
		t.Fatalf("a backup acts or loses nodes: %+v, %+v", fx, backup.Stats())
	}
	f.c.StepDown()
	f.c = backup
	backup.BecomePrimary()
	f.ticks(1, 2, 3)
	if op := onlyProposal[meta.RecordRecovery](t, f.ready()); op.Reason != meta.ReasonEagerFailover {
		t.Fatalf("reason %s", op.Reason)
	}
}

// An owner that reopened within its epoch publishes it (wire.CopyOwnerRestarted): the controller,
// which still sees its node alive, records a recovery with reason owner_restarted whose members keep
// the owner; once that recovery committed an assignment, the same flag at the older epoch (a heartbeat
// sent before the copy applied it) records nothing more. Without the flag nothing is proposed.
func TestOwnerRestarted_RecordsRecovery(t *testing.T) {
	f := newFixture(t, testConfig(), 3)
	st := f.createStream("s", 3, majority, 1, 2, 3)
	f.heartbeat(2, 0, tail(st, 1, wire.RoleFollower, 7, 0))
	f.heartbeat(3, 0, tail(st, 1, wire.RoleFollower, 6, 0))
	f.heartbeat(1, 0, tail(st, 1, wire.RoleOwner, 7, 0))
	if fx := f.ready(); len(fx.Proposals) != 0 {
		t.Fatalf("proposals with the owner serving: %+v", fx.Proposals)
	}
	restarted := tail(st, 1, wire.RoleOwner, 5, 0)
	restarted.Flags = wire.CopyOwnerRestarted
	f.heartbeat(1, 0, restarted)
	op := onlyProposal[meta.RecordRecovery](t, f.ready())
	want := meta.RecordRecovery{Stream: st.ID, Incarnation: 1, ExpectedEpoch: 1, ProposedOwner: 2,
		Members: []uint16{1, 2, 3}, Policy: majority, Reason: meta.ReasonOwnerRestarted}
	if !reflect.DeepEqual(op, want) {
		t.Fatalf("proposal %+v\nwant     %+v", op, want)
	}
	f.mustCommit()
	_, seal := sealsTo(t, f.ready())
	f.reply(1, seal, 8, 0) // furthest after all: it stays owner, through the recovery
	f.reply(2, seal, 7, 0)
	f.reply(3, seal, 6, 0)
	onlyProposal[meta.CommitRecovery](t, f.ready())
	f.mustCommit()
	if a, _ := f.s.Assignment(st.ID); a.Epoch != 2 || a.Owner != 1 {
		t.Fatalf("after the recovery: %+v", a)
	}
	f.heartbeat(1, 0, restarted) // sent before node 1 applied epoch 2
	if fx := f.ready(); len(fx.Proposals) != 0 {
		t.Fatalf("a stale restart flag proposed %+v", fx.Proposals)
	}
}
