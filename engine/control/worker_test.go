package control

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/wire"
)

// Spec 000: the recovery worker sends a stream seal at the next epoch to every copy of the old
// assignment at once, carrying the stream's history starts (DESIGN section 9: the copy cuts onto them
// before it answers).
func TestRecovery_SealsEveryCopyAtOnceWithTheStarts(t *testing.T) {
	f := newFixture(t, testConfig(), 4)
	st := f.createStream("s", 3, majority, 1, 2, 3)
	f.heartbeatAll(1, 2, 3, 4)
	f.ready()
	first := f.failOwner(st, 1)
	_, s1 := sealsTo(t, f.ready())
	f.reply(2, s1, 100, 4)
	f.reply(3, s1, 90, 9)
	f.ticks(int(testConfig().SealTimeoutTicks), 2, 3, 4)
	onlyProposal[meta.CommitRecovery](t, f.ready())
	f.mustCommit()
	f.ready() // placement of a replacement follower, not committed here

	rec := f.failOwner(st, 2)
	fx := f.ready()
	nodes, seal := sealsTo(t, fx)
	a, _ := f.s.Assignment(st.ID)
	want := append([]uint16{a.Owner}, a.Followers...)
	if !reflect.DeepEqual(nodes, want) || len(nodes) < 2 {
		t.Fatalf("sealed %v, want every copy %v", nodes, want)
	}
	if seal != (wire.StreamSeal{Stream: st.ID, Incarnation: 1, FenceEpoch: a.Epoch + 1, TransitionID: rec.ID}) {
		t.Fatalf("seal %+v (recovery %d from epoch %d)", seal, rec.ID, a.Epoch)
	}
	wantStarts := []wire.HistoryStart{{Epoch: 2, Node: 2, RecordStart: 100, CursorStart: 4}}
	for _, s := range fx.Seals {
		if !reflect.DeepEqual(s.Starts, wantStarts) {
			t.Fatalf("seal to %d carries starts %+v, want %+v (first recovery %d)", s.To, s.Starts, wantStarts, first.ID)
		}
	}
}

// Spec 000: with at least R answers the worker picks the copy with the highest record tail; ties go to
// the highest cursor event tail, then to the lowest node id.
func TestRecovery_FurthestCopyAndTieBreak(t *testing.T) {
	type ans struct {
		node           uint16
		record, cursor uint64
	}
	cases := []struct {
		name    string
		answers []ans
		owner   uint16
		sealed  []uint16
	}{
		{"highest record tail", []ans{{2, 10, 9}, {3, 11, 0}, {4, 9, 50}}, 3, []uint16{2, 3, 4}},
		{"record tie: highest cursor tail", []ans{{2, 10, 3}, {3, 10, 5}, {4, 10, 4}}, 3, []uint16{2, 3, 4}},
		{"full tie: lowest node id", []ans{{4, 10, 5}, {2, 10, 5}, {3, 10, 5}}, 2, []uint16{2, 3, 4}},
		{"full tie, lowest id answered last", []ans{{3, 7, 1}, {2, 7, 1}}, 2, []uint16{2, 3}},
		{"the lost owner answered and is furthest", []ans{{1, 12, 0}, {2, 11, 0}, {3, 11, 0}}, 1,
			[]uint16{1, 2, 3}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, testConfig(), 5)
			st := f.createStream("s", 5, majority, 1, 2, 3, 4, 5) // R = 3
			f.heartbeatAll(1, 2, 3, 4, 5)
			f.ready()
			rec := f.failOwner(st, 1)
			_, seal := sealsTo(t, f.ready())
			for _, a := range c.answers {
				f.reply(a.node, seal, a.record, a.cursor)
			}
			if len(c.answers) < 3 {
				f.reply(5, seal, 0, 0)
				c.sealed = append(c.sealed, 5)
			}
			f.ticks(int(testConfig().SealTimeoutTicks), 2, 3, 4, 5)
			op := onlyProposal[meta.CommitRecovery](t, f.ready())
			if op.Owner != c.owner || !reflect.DeepEqual(op.Sealed, c.sealed) || op.Recovery != rec.ID {
				t.Fatalf("commit owner %d sealed %v, want owner %d sealed %v", op.Owner, op.Sealed, c.owner, c.sealed)
			}
			f.mustCommit()
			if a, _ := f.s.Assignment(st.ID); a.Owner != c.owner || a.Epoch != 2 {
				t.Fatalf("assignment %+v", a)
			}
		})
	}
}

// Spec 000: with fewer than R answers the stream waits instead of guessing, and says so in attention.
// With 3 copies and W = 2, R = 2: both surviving followers must answer.
func TestRecovery_WaitsWithFewerThanR(t *testing.T) {
	cfg := testConfig()
	f := newFixture(t, cfg, 3)
	st := f.createStream("s", 3, majority, 1, 2, 3)
	f.heartbeatAll(1, 2, 3)
	f.ready()
	rec := f.failOwner(st, 1)
	if rec.SealThreshold != 2 {
		t.Fatalf("R = %d", rec.SealThreshold)
	}
	_, seal := sealsTo(t, f.ready())
	f.reply(2, seal, 50, 0)
	f.ticks(3*int(cfg.SealTimeoutTicks), 2, 3)
	if fx := f.ready(); len(fx.Proposals) != 0 {
		t.Fatalf("committed with one answer of R = 2: %+v", fx.Proposals)
	}
	att := f.c.Attention(nil)
	if len(att) != 1 || att[0].Kind != AttentionFewerThanR || att[0].Answers != 1 || att[0].Needed != 2 ||
		att[0].Recovery != rec.ID {
		t.Fatalf("attention %+v", att)
	}
	if !strings.Contains(att[0].Why, "node 1 (lost)") || !strings.Contains(att[0].Why, "node 3 (alive, not answering)") {
		t.Fatalf("attention does not say who it waits for: %s", att[0].Why)
	}
	// Late answers are kept: node 3 answers long after the seal timeout, and the recovery commits.
	f.reply(3, seal, 40, 0)
	op := onlyProposal[meta.CommitRecovery](t, f.ready())
	if op.Owner != 2 || !reflect.DeepEqual(op.Sealed, []uint16{2, 3}) {
		t.Fatalf("commit %+v", op)
	}
	if att := f.c.Attention(nil); len(att) != 0 {
		t.Fatalf("attention once R answered: %+v", att)
	}
}

// With W = E (every copy) R = 1: any one answer is enough once the live copies answered or the seal
// timed out.
func TestRecovery_EveryCopyPolicyNeedsOneAnswer(t *testing.T) {
	cfg := testConfig()
	cfg.AssignmentPolicy = meta.Policy{Kind: meta.PolicyLocalDurable}
	f := newFixture(t, cfg, 3)
	st := f.createStream("s", 3, cfg.AssignmentPolicy, 1, 2, 3)
	f.heartbeatAll(1, 2, 3)
	f.ready()
	rec := f.failOwner(st, 1)
	if rec.SealThreshold != 1 {
		t.Fatalf("R = %d", rec.SealThreshold)
	}
	_, seal := sealsTo(t, f.ready())
	f.reply(3, seal, 8, 0)
	f.ticks(int(cfg.SealTimeoutTicks)-1, 2, 3)
	if fx := f.ready(); len(fx.Proposals) != 0 {
		t.Fatalf("decided before the live copy 2 answered or the seal timed out: %+v", fx.Proposals)
	}
	f.ticks(1, 2, 3)
	if op := onlyProposal[meta.CommitRecovery](t, f.ready()); op.Owner != 3 || len(op.Sealed) != 1 {
		t.Fatalf("commit %+v", op)
	}
}

// Once every live copy has answered, the worker does not wait out the seal timeout for the lost owner.
func TestRecovery_DecidesWhenEveryLiveCopyAnswered(t *testing.T) {
	f := newFixture(t, testConfig(), 3)
	st := f.createStream("s", 3, majority, 1, 2, 3)
	f.heartbeatAll(1, 2, 3)
	f.ready()
	f.failOwner(st, 1)
	_, seal := sealsTo(t, f.ready())
	f.reply(2, seal, 5, 0)
	f.reply(3, seal, 6, 0)
	if op := onlyProposal[meta.CommitRecovery](t, f.ready()); op.Owner != 3 {
		t.Fatalf("commit %+v", op)
	}
}

// Answers count only for the current transition: another transition id, another fence, another
// incarnation, a node that holds no copy, a non-copy, or a stale status are ignored.
func TestRecovery_AnswersCountOnlyForCurrentTransition(t *testing.T) {
	f := newFixture(t, testConfig(), 4)
	st := f.createStream("s", 3, majority, 1, 2, 3)
	f.heartbeatAll(1, 2, 3, 4)
	f.ready()
	f.failOwner(st, 1)
	_, seal := sealsTo(t, f.ready())
	bad := []func(*wire.StreamSealReply){
		func(m *wire.StreamSealReply) { m.TransitionID++ },
		func(m *wire.StreamSealReply) { m.TransitionID-- },
		func(m *wire.StreamSealReply) { m.FenceEpoch++ },
		func(m *wire.StreamSealReply) { m.Incarnation++ },
		func(m *wire.StreamSealReply) { m.Status = wire.SealStale },
		func(m *wire.StreamSealReply) { m.Status = wire.SealNoCopy },
	}
	for _, b := range bad {
		for _, n := range []uint16{2, 3} {
			m := wire.StreamSealReply{Stream: st.ID, Incarnation: 1, FenceEpoch: seal.FenceEpoch,
				Status: wire.SealSealed, TransitionID: seal.TransitionID, RecordTail: 9}
			b(&m)
			f.c.OnSealReply(n, m)
		}
	}
	f.reply(4, seal, 100, 0) // node 4 holds no copy of the old assignment
	f.ticks(2*int(testConfig().SealTimeoutTicks), 2, 3, 4)
	if fx := f.ready(); len(fx.Proposals) != 0 {
		t.Fatalf("committed on answers that do not count: %+v", fx.Proposals)
	}
	if got := f.c.Stats().SealReplies; got != 0 {
		t.Fatalf("%d answers counted", got)
	}
}

// Copies that have not answered are sealed again every SealRetryTimeoutTicks while the worker waits;
// those that answered are not.
func TestRecovery_ResealsCopiesThatHaveNotAnswered(t *testing.T) {
	cfg := testConfig()
	f := newFixture(t, cfg, 3)
	st := f.createStream("s", 3, majority, 1, 2, 3)
	f.heartbeatAll(1, 2, 3)
	f.ready()
	f.failOwner(st, 1)
	_, seal := sealsTo(t, f.ready())
	f.reply(2, seal, 5, 0)
	for round := range 3 {
		f.ticks(int(cfg.SealRetryTimeoutTicks)-1, 2, 3)
		if fx := f.ready(); len(fx.Seals) != 0 {
			t.Fatalf("round %d: resealed early: %+v", round, fx.Seals)
		}
		f.ticks(1, 2, 3)
		nodes, again := sealsTo(t, f.ready())
		if !reflect.DeepEqual(nodes, []uint16{1, 3}) || again != seal {
			t.Fatalf("round %d: resealed %v with %+v, want [1 3] with %+v", round, nodes, again, seal)
		}
	}
}

// Spec 000, "The confirmed prefix" and its unit test: a second owner loss right after a failover, when
// the followers have not caught up, waits for a copy at or past the latest history start, lists the
// wait under attention with the start's record count and the node that took over there, and promotes
// once a copy at the start answers.
func TestRecovery_SecondOwnerLossWaitsForConfirmedPrefix(t *testing.T) {
	cfg := testConfig()
	f := newFixture(t, cfg, 4)
	st := f.createStream("s", 3, majority, 1, 2, 3)
	f.heartbeatAll(1, 2, 3, 4)
	f.ready()
	// First failover: node 2 takes over at 100 records; 3 follows and 4 joins empty.
	f.failOwner(st, 1)
	_, s1 := sealsTo(t, f.ready())
	f.reply(2, s1, 100, 7)
	f.reply(3, s1, 100, 7)
	onlyProposal[meta.CommitRecovery](t, f.ready())
	f.mustCommit()
	if a, _ := f.s.Assignment(st.ID); a.Owner != 2 || !reflect.DeepEqual(a.Followers, []uint16{3, 4}) {
		t.Fatalf("assignment after the first failover %+v", a)
	}
	// Node 3 was cut back below the start by a broker that had not applied (a shrunken copy set would
	// do the same); node 4 is empty. Node 2 is lost before they catch up.
	f.heartbeat(3, 0, tail(st, 2, wire.RoleFollower, 60, 2))
	f.heartbeat(4, 0, tail(st, 2, wire.RoleFollower, 0, 0))
	rec := f.failOwner(st, 2)
	_, s2 := sealsTo(t, f.ready())
	f.reply(3, s2, 60, 2)
	f.reply(4, s2, 0, 0)
	f.ticks(int(cfg.SealTimeoutTicks), 3, 4)
	if fx := f.ready(); len(fx.Proposals) != 0 {
		t.Fatalf("promoted below the confirmed prefix: %+v", fx.Proposals)
	}
	att := f.c.Attention(nil)
	if len(att) != 1 || att[0].Kind != AttentionBelowConfirmedPrefix || att[0].Recovery != rec.ID ||
		att[0].Start.RecordStart != 100 || att[0].Start.Node != 2 || att[0].Node != 2 {
		t.Fatalf("attention %+v", att)
	}
	// Node 2 comes back and answers at its start: it is promoted; the commit's guard version is the
	// version of the starts the decision read.
	f.heartbeat(2, 0)
	f.reply(2, s2, 100, 7)
	op := onlyProposal[meta.CommitRecovery](t, f.ready())
	starts, _ := f.s.Starts(st.ID)
	if op.Owner != 2 || op.RecordTail != 100 || op.ExpectedStartsVersion != starts.Version {
		t.Fatalf("commit %+v (starts version %d)", op, starts.Version)
	}
	f.mustCommit()
	if latest, _ := f.s.LatestStart(st.ID); latest.Epoch != 3 || latest.RecordStart != 100 {
		t.Fatalf("latest start %+v", latest)
	}
	if att := f.c.Attention(nil); len(att) != 0 {
		t.Fatalf("attention after the promotion: %+v", att)
	}
}

// Mutation-audit hole: with two or more starts the guard reads the latest. Starts 100 then 200: an
// answer of 150 passes the first start and must wait.
func TestRecovery_GuardReadsTheLatestOfSeveralStarts(t *testing.T) {
	f := newFixture(t, testConfig(), 3)
	st := f.createStream("s", 3, majority, 1, 2, 3)
	f.heartbeatAll(1, 2, 3)
	f.ready()
	promote := func(lost, owner uint16, record uint64, others ...uint16) {
		t.Helper()
		f.failOwner(st, lost)
		_, s := sealsTo(t, f.ready())
		f.reply(owner, s, record, 0)
		for _, o := range others {
			f.reply(o, s, record, 0)
		}
		onlyProposal[meta.CommitRecovery](t, f.ready())
		f.mustCommit()
		f.heartbeat(lost, 0) // back: placed again as a replacement follower
		f.settle()
	}
	promote(1, 2, 100, 3)
	promote(2, 3, 200, 1)
	starts, _ := f.s.Starts(st.ID)
	if len(starts.List) != 2 || starts.List[0].RecordStart != 100 || starts.List[1].RecordStart != 200 {
		t.Fatalf("starts %+v", starts)
	}
	a, _ := f.s.Assignment(st.ID)
	f.failOwner(st, a.Owner)
	_, s := sealsTo(t, f.ready())
	for _, n := range a.Followers {
		f.reply(n, s, 150, 0)
	}
	f.ticks(int(testConfig().SealTimeoutTicks), a.Followers...)
	if fx := f.ready(); len(fx.Proposals) != 0 {
		t.Fatalf("promoted at 150 with the latest start at 200: %+v", fx.Proposals)
	}
}

// The commit stamps the recovery's policy, which is the cluster policy the controller put in it,
// not the old assignment's.
func TestRecovery_CommitStampsTheRecoveryPolicy(t *testing.T) {
	cfg := testConfig()
	cfg.AssignmentPolicy = meta.Policy{Kind: meta.PolicyCountDurable, Count: 2}
	f := newFixture(t, cfg, 3)
	st := f.createStream("s", 3, meta.Policy{Kind: meta.PolicyLocalDurable}, 1, 2, 3)
	f.c.BecomePrimary() // no heartbeats yet: no restamping before the failover
	f.heartbeat(1, wire.FlagShuttingDown)
	op := onlyProposal[meta.RecordRecovery](t, f.ready())
	if op.Policy != cfg.AssignmentPolicy {
		t.Fatalf("recovery policy %s", op.Policy)
	}
	f.mustCommit()
	_, seal := sealsTo(t, f.ready())
	f.reply(2, seal, 3, 0)
	f.ticks(int(cfg.SealTimeoutTicks), 2, 3)
	onlyProposal[meta.CommitRecovery](t, f.ready())
	f.mustCommit()
	if a, _ := f.s.Assignment(st.ID); a.Policy != cfg.AssignmentPolicy {
		t.Fatalf("assignment policy %s, want %s", a.Policy, cfg.AssignmentPolicy)
	}
}

// Spec 000: a withdrawn recovery is followed by a replacement one (Replaces) before any assignment
// change; the replacement seals at the same fence with a new transition, and answers to the old
// transition no longer count.
func TestWithdraw_FollowedByReplacementAtSameFence(t *testing.T) {
	f := newFixture(t, testConfig(), 3)
	st := f.createStream("s", 3, majority, 1, 2, 3)
	f.heartbeatAll(1, 2, 3)
	f.ready()
	first := f.failOwner(st, 1)
	_, s1 := sealsTo(t, f.ready())
	f.reply(2, s1, 9, 0)
	w, err := f.c.Withdraw(st.ID)
	if err != nil {
		t.Fatal(err)
	}
	f.mustApply(w)
	f.c.StateChanged()
	op := onlyProposal[meta.RecordRecovery](t, f.ready())
	if op.Replaces != first.ID || op.ExpectedEpoch != 1 || op.Reason != meta.ReasonOperator {
		t.Fatalf("replacement %+v (withdrawn %d)", op, first.ID)
	}
	f.mustCommit()
	second, _ := f.s.RecoveryOf(st.ID)
	_, s2 := sealsTo(t, f.ready())
	if s2.FenceEpoch != s1.FenceEpoch || s2.TransitionID != second.ID || second.ID == first.ID {
		t.Fatalf("replacement seal %+v, first %+v", s2, s1)
	}
	f.reply(3, s1, 9, 0) // an answer to the withdrawn transition
	f.reply(3, s2, 8, 0)
	f.ticks(int(testConfig().SealTimeoutTicks), 2, 3)
	if fx := f.ready(); len(fx.Proposals) != 0 {
		t.Fatalf("the first transition's answer from node 2 counted: %+v", fx.Proposals)
	}
	f.reply(2, s2, 9, 0)
	if op := onlyProposal[meta.CommitRecovery](t, f.ready()); op.Recovery != second.ID || op.Owner != 2 {
		t.Fatalf("commit %+v", op)
	}
}

// Many streams recover at once: 250 streams losing their owner seal and commit in parallel, their
// pending recoveries recorded by batch ops of at most meta.BatchEntriesMax entries, and their guarded
// commits likewise (issue 25).
func TestRecovery_ManyStreamsAtOnceInBatchOps(t *testing.T) {
	f := newFixture(t, testConfig(), 3)
	var streams []meta.Stream
	for i := range 250 {
		streams = append(streams, f.createStream(fmt.Sprintf("s%03d", i), 3, majority, 1, 2, 3))
	}
	f.heartbeatAll(1, 2, 3)
	f.ready()
	f.heartbeat(1, wire.FlagShuttingDown)
	wantBatches := func(fx *Effects, kind meta.OpKind) {
		t.Helper()
		var sizes []int
		var all []uint64
		for _, p := range fx.Proposals {
			if p.Op.Kind() != kind {
				t.Fatalf("proposal %s, want %s", p.Op.Kind(), kind)
			}
			sizes = append(sizes, len(p.For()))
			all = append(all, p.For()...)
		}
		if !slices.Equal(sizes, []int{100, 100, 50}) || len(all) != 250 || !slices.IsSorted(all) {
			t.Fatalf("batches of %v entries, want 100, 100, 50 in stream order", sizes)
		}
	}
	wantBatches(f.ready(), meta.OpRecordRecoveries)
	f.mustCommit()
	fx := f.ready()
	if len(fx.Seals) != 750 {
		t.Fatalf("%d seals, want 750", len(fx.Seals))
	}
	for _, s := range fx.Seals {
		if s.To != 1 {
			f.reply(s.To, s.Seal, s.Seal.Stream, 0)
		}
	}
	wantBatches(f.ready(), meta.OpCommitRecoveries)
	f.mustCommit()
	for _, st := range streams {
		if a, _ := f.s.Assignment(st.ID); a.Epoch != 2 || a.Owner != 2 {
			t.Fatalf("stream %d: %+v", st.ID, a)
		}
	}
}
