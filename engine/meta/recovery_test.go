package meta

import (
	"reflect"
	"strings"
	"testing"
)

// Spec 000, "Safety argument" and "One rule for W": the recovery's R comes from the same function as
// the owner's W, over the assignment being recovered.
func TestRecordRecovery_SealThresholdFromAssignment(t *testing.T) {
	cases := []struct {
		name      string
		policy    Policy
		followers []uint16
		r         uint8
	}{
		{"3 copies majority: both followers", Policy{Kind: PolicyMajorityDurable}, []uint16{2, 3}, 2},
		{"3 copies every copy: any one", Policy{Kind: PolicyLocalDurable}, []uint16{2, 3}, 1},
		{"5 copies majority", Policy{Kind: PolicyMajorityDurable}, []uint16{2, 3, 4, 5}, 3},
		{"2 copies unset policy", Policy{}, []uint16{2}, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t).withCluster()
			f.mustApply(CreateStream{Name: "s", Copies: uint8(1 + len(c.followers)),
				Policy: Policy{Kind: PolicyMajorityDurable}, Owner: 1, Followers: c.followers, Stamped: c.policy})
			st, _ := f.s.StreamByName("s")
			rec := f.recordRecovery(st, 2, 2, 6)
			want := Recovery{ID: f.op, Stream: st.ID, FromEpoch: 1, ProposedOwner: 2, Members: []uint16{2, 6},
				SealThreshold: c.r, Policy: Policy{Kind: PolicyMajorityDurable}, Reason: ReasonLivenessExpiry,
				Status: RecoveryPending}
			if !reflect.DeepEqual(rec, want) {
				t.Fatalf("recovery %+v\nwant %+v", rec, want)
			}
		})
	}
}

func TestRecordRecovery_Guards(t *testing.T) {
	f := newFixture(t).withCluster()
	st := f.createStream("s", 1, 2, 3)
	record := func(epoch uint32, replaces uint64, members ...uint16) RecordRecovery {
		return RecordRecovery{Stream: st.ID, Incarnation: 1, ExpectedEpoch: epoch, Replaces: replaces,
			ProposedOwner: members[0], Members: members, Policy: Policy{Kind: PolicyMajorityDurable},
			Reason: ReasonEagerFailover}
	}
	f.refused(record(2, 0, 2, 3), ResultEpochMismatch)
	f.refused(record(1, 5, 2, 3), ResultRecoveryMismatch) // nothing to replace
	f.refused(record(1, 0, 2, 40), ResultNodeNotRegistered)
	stale := record(1, 0, 2, 3)
	stale.Incarnation = 2
	f.refused(stale, ResultIncarnationMismatch)
	f.mustApply(record(1, 0, 2, 3))
	first, _ := f.s.RecoveryOf(st.ID)
	f.refused(record(1, 0, 2, 3), ResultRecoveryRecorded)
	f.refused(record(1, first.ID, 2, 3), ResultRecoveryRecorded) // still pending, not withdrawn
}

// Spec 000, "Copies with a longer tail": an operator withdraws a stream recovery and the controller
// records a new one at the same fence epoch.
func TestRecordRecovery_ReplacesWithdrawnRecovery(t *testing.T) {
	f := newFixture(t).withCluster()
	st := f.createStream("s", 1, 2, 3)
	first := f.recordRecovery(st, 2, 2, 3)
	f.mustApply(WithdrawRecovery{Stream: st.ID, Incarnation: 1, Recovery: first.ID})
	if r, _ := f.s.RecoveryOf(st.ID); r.Status != RecoveryWithdrawn {
		t.Fatalf("recovery after withdraw: %+v", r)
	}
	replace := RecordRecovery{Stream: st.ID, Incarnation: 1, ExpectedEpoch: 1, ProposedOwner: 3,
		Members: []uint16{3, 4}, Policy: Policy{Kind: PolicyMajorityDurable}, Reason: ReasonOperator}
	f.refused(replace, ResultRecoveryMismatch) // Replaces must name the withdrawn one
	replace.Replaces = first.ID + 1
	f.refused(replace, ResultRecoveryMismatch)
	replace.Replaces = first.ID
	f.mustApply(replace)
	second, _ := f.s.RecoveryOf(st.ID)
	if second.ID <= first.ID || second.Status != RecoveryPending || second.ProposedOwner != 3 ||
		second.FromEpoch != 1 || second.Reason != ReasonOperator {
		t.Fatalf("replacing recovery %+v (first %d)", second, first.ID)
	}
}

func TestWithdrawRecovery_Guards(t *testing.T) {
	f := newFixture(t).withCluster()
	st := f.createStream("s", 1, 2, 3)
	f.refused(WithdrawRecovery{Stream: st.ID, Incarnation: 1, Recovery: 1}, ResultRecoveryMismatch)
	rec := f.recordRecovery(st, 2, 2, 3)
	f.refused(WithdrawRecovery{Stream: st.ID, Incarnation: 1, Recovery: rec.ID + 1}, ResultRecoveryMismatch)
	f.refused(WithdrawRecovery{Stream: st.ID + 1, Incarnation: 1, Recovery: rec.ID}, ResultStreamNotFound)
	f.mustApply(WithdrawRecovery{Stream: st.ID, Incarnation: 1, Recovery: rec.ID})
	f.refused(WithdrawRecovery{Stream: st.ID, Incarnation: 1, Recovery: rec.ID}, ResultRecoveryNotPending)
}

func TestRecoveries_ListedInIDOrder(t *testing.T) {
	f := newFixture(t).withCluster()
	a := f.createStream("a", 1, 2, 3)
	b := f.createStream("b", 4, 5, 6)
	rb := f.recordRecovery(b, 5, 5, 6)
	ra := f.recordRecovery(a, 2, 2, 3)
	f.mustApply(WithdrawRecovery{Stream: b.ID, Incarnation: 1, Recovery: rb.ID})
	got := f.s.Recoveries()
	if len(got) != 2 || got[0].ID != rb.ID || got[1].ID != ra.ID || got[0].Status != RecoveryWithdrawn {
		t.Fatalf("Recoveries() = %+v", got)
	}
}

// Spec 000, the recovery steps: one guarded write sets the assignment (the chosen owner, the other
// sealed copies, the members the proposal added), clears the pending recovery and appends the new
// owner's history start.
func TestCommitRecovery_SetsAssignmentClearsRecoveryAppendsStart(t *testing.T) {
	f := newFixture(t).withCluster()
	st := f.createStream("s", 1, 2, 3)
	// Owner 1 is lost; the proposal keeps 2 and 3 and adds 4.
	rec := f.recordRecovery(st, 2, 2, 3, 4)
	f.mustApply(CommitRecovery{Stream: st.ID, Incarnation: 1, Recovery: rec.ID, ExpectedEpoch: 1,
		ExpectedStartsVersion: 0, Owner: 3, RecordTail: 120, CursorTail: 9, Sealed: []uint16{2, 3}})
	want := Assignment{Epoch: 2, Owner: 3, Followers: []uint16{2, 4}, Policy: Policy{Kind: PolicyMajorityDurable}}
	if a := f.assignment(st); !reflect.DeepEqual(a, want) {
		t.Fatalf("assignment %+v, want %+v", a, want)
	}
	if _, ok := f.s.RecoveryOf(st.ID); ok {
		t.Fatal("recovery not cleared")
	}
	wantStarts := Starts{Version: 1, List: []HistoryStart{{Epoch: 2, RecordStart: 120, CursorStart: 9, Node: 3}}}
	if s := f.starts(st); !reflect.DeepEqual(s, wantStarts) {
		t.Fatalf("starts %+v, want %+v", s, wantStarts)
	}
	if latest, ok := f.s.LatestStart(st.ID); !ok || latest != wantStarts.List[0] {
		t.Fatalf("latest start %+v, %v", latest, ok)
	}
}

// Copies of the old assignment that were not sealed stay out of the new one (spec 000: copies left
// out stay sealed until a later assignment includes them); the old owner is in if it was sealed.
func TestCommitRecovery_UnsealedCopiesLeftOut(t *testing.T) {
	f := newFixture(t).withCluster()
	st := f.createStream("s", 1, 2, 3, 4, 5) // 5 copies majority: R = 3
	rec := f.recordRecovery(st, 2, 2, 3, 4, 5)
	f.mustApply(CommitRecovery{Stream: st.ID, Incarnation: 1, Recovery: rec.ID, ExpectedEpoch: 1,
		Owner: 4, RecordTail: 50, Sealed: []uint16{1, 2, 4}})
	if a := f.assignment(st); a.Owner != 4 || !reflect.DeepEqual(a.Followers, []uint16{1, 2}) {
		t.Fatalf("assignment %+v, want owner 4 followers [1 2]", a)
	}
}

func TestCommitRecovery_Guards(t *testing.T) {
	f := newFixture(t).withCluster()
	st := f.createStream("s", 1, 2, 3)
	rec := f.recordRecovery(st, 2, 2, 3)
	good := CommitRecovery{Stream: st.ID, Incarnation: 1, Recovery: rec.ID, ExpectedEpoch: 1,
		ExpectedStartsVersion: 0, Owner: 2, RecordTail: 10, Sealed: []uint16{2, 3}}
	mod := func(m func(*CommitRecovery)) CommitRecovery { c := good; m(&c); return c }

	f.refused(mod(func(c *CommitRecovery) { c.Recovery++ }), ResultRecoveryMismatch)
	f.refused(mod(func(c *CommitRecovery) { c.ExpectedEpoch = 2 }), ResultEpochMismatch)
	f.refused(mod(func(c *CommitRecovery) { c.ExpectedStartsVersion = 1 }), ResultStartsVersionMismatch)
	f.refused(mod(func(c *CommitRecovery) { c.Incarnation = 2 }), ResultIncarnationMismatch)
	f.refused(mod(func(c *CommitRecovery) { c.Sealed = []uint16{2, 4} }), ResultSealedNotCopy)
	// Spec 000: with 3 copies and W = 2, R = 2; with fewer answers the stream waits.
	f.refused(mod(func(c *CommitRecovery) { c.Sealed = []uint16{2} }), ResultTooFewSealed)

	f.mustApply(WithdrawRecovery{Stream: st.ID, Incarnation: 1, Recovery: rec.ID})
	f.refused(good, ResultRecoveryNotPending)
}

func TestCommitRecovery_RefusedBeyondCopiesMax(t *testing.T) {
	f := newFixture(t)
	for id := uint16(1); id <= 14; id++ {
		f.mustApply(RegisterNode{Node: id, Address: "h:1"})
	}
	st := f.createStream("s", 1, 2, 3, 4, 5, 6, 7) // 7 copies majority: R = 4
	a := f.assignment(st)
	f.mustApply(RecordRecovery{Stream: st.ID, Incarnation: 1, ExpectedEpoch: a.Epoch, ProposedOwner: 8,
		Members: []uint16{8, 9, 10, 11, 12, 13, 14}, Policy: Policy{Kind: PolicyMajorityDurable},
		Reason: ReasonOperator})
	rec, _ := f.s.RecoveryOf(st.ID)
	f.refused(CommitRecovery{Stream: st.ID, Incarnation: 1, Recovery: rec.ID, ExpectedEpoch: 1,
		Owner: 2, Sealed: []uint16{2, 3, 4, 5}}, ResultTooManyCopies)
}

// Spec 000, "The confirmed prefix" and its unit test list: a second owner loss waits for a copy at or
// past the latest history start and promotes once one answers; the recorded starts only grow.
func TestCommitRecovery_SecondOwnerLossWaitsForConfirmedPrefix(t *testing.T) {
	f := newFixture(t).withCluster()
	st := f.createStream("s", 1, 2, 3)
	first := f.recordRecovery(st, 2, 2, 3, 4)
	f.mustApply(CommitRecovery{Stream: st.ID, Incarnation: 1, Recovery: first.ID, ExpectedEpoch: 1,
		Owner: 2, RecordTail: 100, CursorTail: 4, Sealed: []uint16{2, 3}})
	// Epoch 2: owner 2, followers 3 and 4 (4 is new and empty). Owner 2 is lost before they catch up.
	second := f.recordRecovery(st, 3, 3, 4)
	if second.SealThreshold != 2 {
		t.Fatalf("R = %d, want 2", second.SealThreshold)
	}
	behind := CommitRecovery{Stream: st.ID, Incarnation: 1, Recovery: second.ID, ExpectedEpoch: 2,
		ExpectedStartsVersion: 1, Owner: 3, RecordTail: 99, CursorTail: 4, Sealed: []uint16{3, 4}}
	r := f.refused(behind, ResultBelowConfirmedPrefix)
	if !strings.Contains(r.Message, "100") || !strings.Contains(r.Message, "node 2") {
		t.Fatalf("refusal does not name the start and its node: %s", r)
	}
	atStart := behind
	atStart.RecordTail = 100
	f.mustApply(atStart)
	s := f.starts(st)
	if s.Version != 2 || len(s.List) != 2 || s.List[1] != (HistoryStart{Epoch: 3, RecordStart: 100, CursorStart: 4, Node: 3}) {
		t.Fatalf("starts %+v", s)
	}
	if s.List[1].RecordStart < s.List[0].RecordStart {
		t.Fatal("history starts went down")
	}
}

// A decision taken on one starts list cannot commit once another commit changed it.
func TestCommitRecovery_StaleStartsVersionRefused(t *testing.T) {
	f := newFixture(t).withCluster()
	st := f.createStream("s", 1, 2, 3)
	first := f.recordRecovery(st, 2, 2, 3)
	f.mustApply(CommitRecovery{Stream: st.ID, Incarnation: 1, Recovery: first.ID, ExpectedEpoch: 1,
		Owner: 2, RecordTail: 10, Sealed: []uint16{2, 3}})
	second := f.recordRecovery(st, 3, 3)
	f.refused(CommitRecovery{Stream: st.ID, Incarnation: 1, Recovery: second.ID, ExpectedEpoch: 2,
		ExpectedStartsVersion: 0, Owner: 3, RecordTail: 10, Sealed: []uint16{3}}, ResultStartsVersionMismatch)
}

// Spec 000, known limits: accepting owner loss moves the stream without a seal and records the new
// owner's tails as last published in its heartbeats.
func TestAcceptOwnerLoss_RecordsPublishedTailsAsStart(t *testing.T) {
	f := newFixture(t).withCluster()
	st := f.createStream("s", 1, 2, 3)
	rec := f.recordRecovery(st, 2, 2, 3, 5)
	f.mustApply(AcceptOwnerLoss{Stream: st.ID, Incarnation: 1, Recovery: rec.ID, Owner: 3,
		TailsPublished: true, RecordTail: 40, CursorTail: 2})
	want := Assignment{Epoch: 2, Owner: 3, Followers: []uint16{2, 5}, Policy: Policy{Kind: PolicyMajorityDurable}}
	if a := f.assignment(st); !reflect.DeepEqual(a, want) {
		t.Fatalf("assignment %+v, want %+v", a, want)
	}
	if _, ok := f.s.RecoveryOf(st.ID); ok {
		t.Fatal("recovery not cleared")
	}
	wantStarts := Starts{Version: 1, List: []HistoryStart{{Epoch: 2, RecordStart: 40, CursorStart: 2, Node: 3}}}
	if s := f.starts(st); !reflect.DeepEqual(s, wantStarts) {
		t.Fatalf("starts %+v, want %+v", s, wantStarts)
	}
}

// Spec 000, known limits: if the new owner published nothing, no start is recorded, and the op says so.
func TestAcceptOwnerLoss_NoPublishedTailsRecordsNoStart(t *testing.T) {
	f := newFixture(t).withCluster()
	st := f.createStream("s", 1, 2, 3)
	rec := f.recordRecovery(st, 2, 2, 3)
	r := f.apply(AcceptOwnerLoss{Stream: st.ID, Incarnation: 1, Recovery: rec.ID, Owner: 2})
	if r.Code != ResultOKNoStart || !r.OK() || !strings.Contains(r.Message, "no history start") {
		t.Fatalf("result %s, want ok_no_start", r)
	}
	if s := f.starts(st); s.Version != 0 || len(s.List) != 0 {
		t.Fatalf("starts %+v, want none", s)
	}
	if a := f.assignment(st); a.Epoch != 2 || a.Owner != 2 {
		t.Fatalf("assignment %+v", a)
	}
}

// Spec 000, known limits: an accepted promotion can land below the confirmed prefix; it is applied
// (the operator accepted it) and the result warns.
func TestAcceptOwnerLoss_BelowConfirmedPrefixWarns(t *testing.T) {
	f := newFixture(t).withCluster()
	st := f.createStream("s", 1, 2, 3)
	first := f.recordRecovery(st, 2, 2, 3)
	f.mustApply(CommitRecovery{Stream: st.ID, Incarnation: 1, Recovery: first.ID, ExpectedEpoch: 1,
		Owner: 2, RecordTail: 100, Sealed: []uint16{2, 3}})
	second := f.recordRecovery(st, 3, 3)
	r := f.mustApply(AcceptOwnerLoss{Stream: st.ID, Incarnation: 1, Recovery: second.ID, Owner: 3,
		TailsPublished: true, RecordTail: 60})
	if r.Code != ResultOK || !strings.Contains(r.Message, "warning") {
		t.Fatalf("result %s, want ok with a warning", r)
	}
	if latest, _ := f.s.LatestStart(st.ID); latest.RecordStart != 60 || latest.Epoch != 3 {
		t.Fatalf("latest start %+v", latest)
	}
}

func TestAcceptOwnerLoss_Guards(t *testing.T) {
	f := newFixture(t).withCluster()
	st := f.createStream("s", 1, 2, 3)
	rec := f.recordRecovery(st, 2, 2, 3)
	good := AcceptOwnerLoss{Stream: st.ID, Incarnation: 1, Recovery: rec.ID, Owner: 2}
	mod := func(m func(*AcceptOwnerLoss)) AcceptOwnerLoss { c := good; m(&c); return c }
	f.refused(mod(func(o *AcceptOwnerLoss) { o.Recovery++ }), ResultRecoveryMismatch)
	f.refused(mod(func(o *AcceptOwnerLoss) { o.Owner = 1 }), ResultOwnerNotProposedMember)
	f.refused(mod(func(o *AcceptOwnerLoss) { o.Incarnation = 3 }), ResultIncarnationMismatch)
	f.mustApply(WithdrawRecovery{Stream: st.ID, Incarnation: 1, Recovery: rec.ID})
	f.refused(good, ResultRecoveryNotPending)
}

// Mutation-audit hole: the confirmed-prefix guard reads the latest history start, not the first. With
// starts 100 (epoch 2) then 200 (epoch 3), a tail of 150 passes the first and must be refused; with
// starts 100 then 60 (an accepted loss below the prefix), a tail of 80 fails the first and must pass.
func TestCommitRecovery_GuardReadsLatestOfSeveralStarts(t *testing.T) {
	setup := func(t *testing.T, second AcceptOwnerLoss, secondTail uint64) (*fixture, Stream, Recovery) {
		f := newFixture(t).withCluster()
		st := f.createStream("s", 1, 2, 3)
		first := f.recordRecovery(st, 2, 2, 3)
		f.mustApply(CommitRecovery{Stream: st.ID, Incarnation: 1, Recovery: first.ID, ExpectedEpoch: 1,
			Owner: 2, RecordTail: 100, Sealed: []uint16{2, 3}})
		rec := f.recordRecovery(st, 3, 1, 3)
		if secondTail != 0 {
			f.mustApply(CommitRecovery{Stream: st.ID, Incarnation: 1, Recovery: rec.ID, ExpectedEpoch: 2,
				ExpectedStartsVersion: 1, Owner: 3, RecordTail: secondTail, Sealed: []uint16{3}})
		} else {
			second.Stream, second.Incarnation, second.Recovery = st.ID, 1, rec.ID
			f.mustApply(second)
		}
		return f, st, f.recordRecovery(st, 1, 1, 3)
	}
	commit := func(st Stream, rec Recovery, tail uint64) CommitRecovery {
		return CommitRecovery{Stream: st.ID, Incarnation: 1, Recovery: rec.ID, ExpectedEpoch: 3,
			ExpectedStartsVersion: 2, Owner: 3, RecordTail: tail, Sealed: []uint16{1, 3}}
	}
	t.Run("latest above first", func(t *testing.T) {
		f, st, rec := setup(t, AcceptOwnerLoss{}, 200)
		f.refused(commit(st, rec, 150), ResultBelowConfirmedPrefix)
		f.mustApply(commit(st, rec, 200))
	})
	t.Run("latest below first", func(t *testing.T) {
		f, st, rec := setup(t, AcceptOwnerLoss{Owner: 3, TailsPublished: true, RecordTail: 60}, 0)
		if s := f.starts(st); len(s.List) != 2 || s.List[1].RecordStart != 60 {
			t.Fatalf("starts %+v", s)
		}
		f.mustApply(commit(st, rec, 80))
	})
}

// Mutation-audit hole: the commit stamps the recovery's policy on the new assignment, not the old
// assignment's (spec 000: the controller stamps the cluster policy on every replicated assignment).
func TestCommitRecovery_StampsTheRecoveryPolicy(t *testing.T) {
	f := newFixture(t).withCluster()
	every := Policy{Kind: PolicyLocalDurable}
	f.mustApply(CreateStream{Name: "s", Copies: 3, Policy: Policy{Kind: PolicyMajorityDurable}, Owner: 1,
		Followers: []uint16{2, 3}, Stamped: every})
	st, _ := f.s.StreamByName("s")
	rec := f.recordRecovery(st, 2, 2, 3) // stamps majority_durable
	if rec.SealThreshold != 1 {
		t.Fatalf("R %d, want 1 (the old assignment confirms on every copy)", rec.SealThreshold)
	}
	f.mustApply(CommitRecovery{Stream: st.ID, Incarnation: 1, Recovery: rec.ID, ExpectedEpoch: 1,
		Owner: 2, RecordTail: 10, Sealed: []uint16{2}})
	if a := f.assignment(st); a.Policy != rec.Policy || a.Policy == every {
		t.Fatalf("assignment policy %s, want the recovery's %s", a.Policy, rec.Policy)
	}
	// The same for an accepted owner loss.
	f.mustApply(RecordRecovery{Stream: st.ID, Incarnation: 1, ExpectedEpoch: 2, ProposedOwner: 3,
		Members: []uint16{3}, Policy: every, Reason: ReasonOperator})
	accept, _ := f.s.RecoveryOf(st.ID)
	f.mustApply(AcceptOwnerLoss{Stream: st.ID, Incarnation: 1, Recovery: accept.ID, Owner: 3})
	if a := f.assignment(st); a.Policy != every {
		t.Fatalf("assignment policy after accepted loss %s, want the recovery's %s", a.Policy, every)
	}
}
