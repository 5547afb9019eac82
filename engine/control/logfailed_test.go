package control

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/wire"
)

// failedTail is tail flagged wire.CopyLogFailed with cause.
func failedTail(st meta.Stream, epoch uint32, role wire.CopyRole, record uint64, cause wire.LogFailCause) wire.CopyTail {
	t := tail(st, epoch, role, record, 0)
	t.Flags, t.Cause = wire.CopyLogFailed, cause
	return t
}

// attentionOf returns the entries of kind among the controller's attention.
func (f *fixture) attentionOf(kind AttentionKind) []Attention {
	var out []Attention
	for _, a := range f.c.Attention(nil) {
		if a.Kind == kind {
			out = append(out, a)
		}
	}
	return out
}

// Finding 4: an owner whose disk is full stays owner forever, refusing every produce. An owner whose
// heartbeat flags its log failed is failed over like a lost owner (reason owner_log_failed): the
// members leave it out, the recovery does not wait for its seal answer, and a healthy copy is
// promoted. Attention names the copy and the cause.
func TestOwnerLogFailed_FailsOverWithoutWaitingForIt(t *testing.T) {
	f := newFixture(t, testConfig(), 3)
	st := f.createStream("s", 3, majority, 1, 2, 3)
	f.heartbeat(2, 0, tail(st, 1, wire.RoleFollower, 7, 0))
	f.heartbeat(3, 0, tail(st, 1, wire.RoleFollower, 9, 0))
	f.heartbeat(1, 0, failedTail(st, 1, wire.RoleOwner, 9, wire.LogFailNoSpace))
	op := onlyProposal[meta.RecordRecovery](t, f.ready())
	want := meta.RecordRecovery{Stream: st.ID, Incarnation: 1, ExpectedEpoch: 1, ProposedOwner: 3,
		Members: []uint16{2, 3}, Policy: majority, Reason: meta.ReasonOwnerLogFailed}
	if !reflect.DeepEqual(op, want) {
		t.Fatalf("proposal %+v\nwant     %+v", op, want)
	}
	f.mustCommit()
	to, seal := sealsTo(t, f.ready())
	if !slices.Equal(to, []uint16{1, 2, 3}) {
		t.Fatalf("sealed %v, want every copy of the old assignment", to)
	}
	f.reply(2, seal, 7, 0)
	f.reply(3, seal, 9, 0)
	// Node 1 is alive and has not answered, well within the seal timeout: it said it cannot.
	commit := onlyProposal[meta.CommitRecovery](t, f.ready())
	if commit.Owner != 3 || !slices.Equal(commit.Sealed, []uint16{2, 3}) {
		t.Fatalf("commit %+v: want owner 3, sealed [2 3]", commit)
	}
	entries := f.attentionOf(AttentionCopyLogFailed)
	if len(entries) != 1 || entries[0].Node != 1 || entries[0].Cause != wire.LogFailNoSpace ||
		!strings.Contains(entries[0].Why, "no_space") || !strings.Contains(entries[0].Why, "fails over") {
		t.Fatalf("attention %+v", entries)
	}
}

// A lone copy whose log failed has nothing to fail over to: no recovery, an attention entry.
func TestOwnerLogFailed_LoneCopyWaitsUnderAttention(t *testing.T) {
	f := newFixture(t, testConfig(), 3)
	st := f.createStream("s", 1, majority, 1)
	f.heartbeat(1, 0, failedTail(st, 1, wire.RoleOwner, 9, wire.LogFailIO))
	if fx := f.ready(); len(fx.Proposals) != 0 {
		t.Fatalf("proposals for a lone failed copy: %+v", fx.Proposals)
	}
	if e := f.attentionOf(AttentionCopyLogFailed); len(e) != 1 || !strings.Contains(e[0].Why, "only copy") {
		t.Fatalf("attention %+v", e)
	}
}

// Finding 2: one silently failed follower turned an owner loss into an outage (the recovery waited
// out its seal timeout for "node 3 (alive, not answering)"). A follower flagged failed is never
// waited for: the recovery commits as soon as R healthy copies answered, and while it has fewer,
// attention says the failed copy is not waited for.
func TestFailedFollower_RecoveryDoesNotWaitForIt(t *testing.T) {
	f := newFixture(t, testConfig(), 3)
	st := f.createStream("s", 3, majority, 1, 2, 3)
	f.heartbeat(1, 0, tail(st, 1, wire.RoleOwner, 9, 0))
	f.heartbeat(2, 0, tail(st, 1, wire.RoleFollower, 9, 0))
	f.heartbeat(3, 0, failedTail(st, 1, wire.RoleFollower, 4, wire.LogFailNoSpace))
	f.heartbeat(1, wire.FlagShuttingDown) // the owner is lost in the same turn
	op := onlyProposal[meta.RecordRecovery](t, f.ready())
	if op.Reason != meta.ReasonEagerFailover || !slices.Equal(op.Members, []uint16{2}) {
		t.Fatalf("recovery %+v: want members [2] (the failed follower left out)", op)
	}
	f.mustCommit()
	_, seal := sealsTo(t, f.ready())
	f.reply(2, seal, 9, 0)
	f.ticks(int(testConfig().SealTimeoutTicks), 2, 3)
	if fx := f.ready(); len(fx.Proposals) != 0 {
		t.Fatalf("committed with 1 of 2 answers: %+v", fx.Proposals)
	}
	e := f.attentionOf(AttentionFewerThanR)
	if len(e) != 1 || !strings.Contains(e[0].Why, "node 3 (log failed: no_space, not waited for)") {
		t.Fatalf("attention %+v", e)
	}
	// The old owner's node comes back and answers: R = 2 healthy answers, commit at once.
	f.heartbeat(1, 0, tail(st, 1, wire.RoleOwner, 9, 0))
	f.ready()
	f.reply(1, seal, 9, 0)
	commit := onlyProposal[meta.CommitRecovery](t, f.ready())
	if !slices.Equal(commit.Sealed, []uint16{1, 2}) {
		t.Fatalf("commit %+v", commit)
	}
}

// The same wait as above, but the old owner comes back before the seal timeout: without the flag
// the recovery would wait out the timeout for node 3 (alive, not answering); with it it commits as
// soon as the two healthy copies answered.
func TestFailedFollower_NoSealTimeoutWait(t *testing.T) {
	f := newFixture(t, testConfig(), 3)
	st := f.createStream("s", 3, majority, 1, 2, 3)
	f.heartbeat(2, 0, tail(st, 1, wire.RoleFollower, 9, 0))
	f.heartbeat(3, 0, failedTail(st, 1, wire.RoleFollower, 4, wire.LogFailNoSpace))
	f.heartbeat(1, wire.FlagShuttingDown)
	onlyProposal[meta.RecordRecovery](t, f.ready())
	f.mustCommit()
	_, seal := sealsTo(t, f.ready())
	f.heartbeat(1, 0, tail(st, 1, wire.RoleOwner, 9, 0))
	f.reply(1, seal, 9, 0)
	f.reply(2, seal, 9, 0)
	onlyProposal[meta.CommitRecovery](t, f.ready())
}

// A failed copy's sealed answer counts toward R only as evidence: the furthest healthy copy is
// promoted when no failed answer is past it; otherwise the recovery waits (failed_copy_ahead) until
// the copy heals, and then promotes it.
func TestFailedFollower_SealedAnswerCountsUnlessAhead(t *testing.T) {
	for _, c := range []struct {
		name   string
		failed uint64 // the failed copy's sealed record tail; the healthy one answers 10
		commit bool
	}{
		{"behind", 8, true},
		{"level", 10, true},
		{"ahead", 12, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, testConfig(), 3)
			st := f.createStream("s", 3, majority, 1, 2, 3)
			f.heartbeat(2, 0, tail(st, 1, wire.RoleFollower, 10, 0))
			f.heartbeat(3, 0, failedTail(st, 1, wire.RoleFollower, c.failed, wire.LogFailIO))
			f.heartbeat(1, wire.FlagShuttingDown)
			onlyProposal[meta.RecordRecovery](t, f.ready())
			f.mustCommit()
			_, seal := sealsTo(t, f.ready())
			f.reply(2, seal, 10, 0)
			f.reply(3, seal, c.failed, 0)
			fx := f.ready()
			if !c.commit {
				if len(fx.Proposals) != 0 {
					t.Fatalf("promoted past a failed copy that is ahead: %+v", fx.Proposals)
				}
				e := f.attentionOf(AttentionFailedCopyAhead)
				if len(e) != 1 || e[0].Node != 3 || e[0].Cause != wire.LogFailIO {
					t.Fatalf("attention %+v", e)
				}
				f.heartbeat(3, 0, tail(st, 1, wire.RoleSealed, c.failed, 0)) // healed
				commit := onlyProposal[meta.CommitRecovery](t, f.ready())
				if commit.Owner != 3 || commit.RecordTail != 12 {
					t.Fatalf("after the heal: %+v", commit)
				}
				return
			}
			commit := onlyProposal[meta.CommitRecovery](t, fx)
			if commit.Owner != 2 || !slices.Equal(commit.Sealed, []uint16{2, 3}) {
				t.Fatalf("commit %+v: want owner 2 (never the failed copy), sealed [2 3]", commit)
			}
		})
	}
}

// With R healthy answers, a failed copy's answer is left out of the sealed set (it would only follow
// as a copy that serves nothing), and it is never promoted even when furthest.
func TestFailedFollower_LeftOutWhenHealthyReachR(t *testing.T) {
	f := newFixture(t, testConfig(), 3)
	st := f.createStream("s", 3, majority, 1, 2, 3)
	f.heartbeat(1, 0, tail(st, 1, wire.RoleOwner, 10, 0))
	f.heartbeat(2, 0, tail(st, 1, wire.RoleFollower, 10, 0))
	f.heartbeat(3, 0, failedTail(st, 1, wire.RoleFollower, 12, wire.LogFailIO))
	op := onlyProposal[meta.RecordRecovery](t, f.ready()) // the failed follower is taken out
	if op.Reason != meta.ReasonPlacement || !slices.Equal(op.Members, []uint16{1, 2}) {
		t.Fatalf("recovery %+v", op)
	}
	f.mustCommit()
	_, seal := sealsTo(t, f.ready())
	f.reply(1, seal, 10, 0)
	f.reply(2, seal, 10, 0)
	f.reply(3, seal, 12, 0)
	commit := onlyProposal[meta.CommitRecovery](t, f.ready())
	if commit.Owner != 1 || !slices.Equal(commit.Sealed, []uint16{1, 2}) {
		t.Fatalf("commit %+v: want owner 1, sealed [1 2]", commit)
	}
}

// A follower whose log failed, with the owner alive: a recovery with reason placement takes it out of
// the assignment (so that a later owner loss needs only the healthy copies: E = 2, R = 1), no new copy
// goes to its node while it is failed, and once it heals it is added back as a follower without a
// recovery. Where the healthy copies cannot seal without it, nothing is proposed.
func TestFailedFollower_TakenOutAndPlacedAgainOnceHealed(t *testing.T) {
	f := newFixture(t, testConfig(), 3)
	st := f.createStream("s", 3, majority, 1, 2, 3)
	f.heartbeat(1, 0, tail(st, 1, wire.RoleOwner, 10, 0))
	f.heartbeat(2, 0, tail(st, 1, wire.RoleFollower, 10, 0))
	f.heartbeat(3, 0, failedTail(st, 1, wire.RoleFollower, 4, wire.LogFailNoSpace))
	onlyProposal[meta.RecordRecovery](t, f.ready())
	f.mustCommit()
	_, seal := sealsTo(t, f.ready())
	f.reply(1, seal, 10, 0)
	f.reply(2, seal, 10, 0)
	onlyProposal[meta.CommitRecovery](t, f.ready())
	f.mustCommit()
	a, _ := f.s.Assignment(st.ID)
	if a.Epoch != 2 || a.Owner != 1 || !slices.Equal(a.Followers, []uint16{2}) {
		t.Fatalf("assignment %+v: want epoch 2, owner 1, followers [2]", a)
	}
	f.heartbeat(3, 0, failedTail(st, 1, wire.RoleSealed, 4, wire.LogFailNoSpace))
	if fx := f.ready(); len(fx.Proposals) != 0 {
		t.Fatalf("a copy placed on the failed node: %+v", fx.Proposals)
	}
	f.heartbeat(3, 0, tail(st, 1, wire.RoleSealed, 4, 0)) // healed
	set := onlyProposal[meta.SetAssignment](t, f.ready())
	if !slices.Equal(set.Followers, []uint16{2, 3}) {
		t.Fatalf("placement after the heal: %+v", set)
	}

	// Two of three copies failed: the owner alone cannot seal (R = 2), so the assignment stays.
	g := newFixture(t, testConfig(), 3)
	st = g.createStream("t", 3, majority, 1, 2, 3)
	g.heartbeat(1, 0, tail(st, 1, wire.RoleOwner, 10, 0))
	g.heartbeat(2, 0, failedTail(st, 1, wire.RoleFollower, 10, wire.LogFailIO))
	g.heartbeat(3, 0, failedTail(st, 1, wire.RoleFollower, 4, wire.LogFailNoSpace))
	if fx := g.ready(); len(fx.Proposals) != 0 {
		t.Fatalf("a recovery that cannot seal: %+v", fx.Proposals)
	}
}

// An operator's accept that would promote, without a seal, a copy whose heartbeat says it cannot take
// the role (its log failed, or it reopened within its epoch and waits for a seal) is refused with the
// reason: the stream would wait with no recovery left to end the wait. Once the copy answered the
// seal, the accept goes through.
func TestAcceptOwnerLoss_RefusesACopyThatCannotServe(t *testing.T) {
	for _, c := range []struct {
		name string
		tail func(st meta.Stream) wire.CopyTail
	}{
		{"log failed", func(st meta.Stream) wire.CopyTail { return failedTail(st, 1, wire.RoleOwner, 6, wire.LogFailNoSpace) }},
		{"restarted", func(st meta.Stream) wire.CopyTail {
			t := tail(st, 1, wire.RoleOwner, 6, 0)
			t.Flags = wire.CopyOwnerRestarted
			return t
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, testConfig(), 3)
			st := f.createStream("s", 1, majority, 1)
			restarted := tail(st, 1, wire.RoleOwner, 6, 0)
			restarted.Flags = wire.CopyOwnerRestarted
			f.heartbeat(1, 0, restarted)
			onlyProposal[meta.RecordRecovery](t, f.ready())
			f.mustCommit()
			_, seal := sealsTo(t, f.ready())
			f.heartbeat(1, 0, c.tail(st))
			if _, err := f.c.AcceptOwnerLoss(st.ID, 1); !errors.Is(err, ErrOwnerCannotServe) {
				t.Fatalf("accept: %v, want ErrOwnerCannotServe", err)
			}
			f.reply(1, seal, 6, 0)
			if _, err := f.c.AcceptOwnerLoss(st.ID, 1); err != nil {
				t.Fatalf("accept after the seal answer: %v", err)
			}
		})
	}
}

// With a spare node, the recovery that takes a failed follower out places a replacement there: the
// stream keeps its copy count.
func TestFailedFollower_ReplacedOnASpareNode(t *testing.T) {
	f := newFixture(t, testConfig(), 4)
	st := f.createStream("s", 3, majority, 1, 2, 3)
	f.heartbeat(4, 0)
	f.heartbeat(1, 0, tail(st, 1, wire.RoleOwner, 10, 0))
	f.heartbeat(2, 0, tail(st, 1, wire.RoleFollower, 10, 0))
	f.heartbeat(3, 0, failedTail(st, 1, wire.RoleFollower, 4, wire.LogFailIO))
	op := onlyProposal[meta.RecordRecovery](t, f.ready())
	if op.Reason != meta.ReasonPlacement || !slices.Equal(op.Members, []uint16{1, 2, 4}) {
		t.Fatalf("recovery %+v: want members [1 2 4]", op)
	}
	f.mustCommit()
	_, seal := sealsTo(t, f.ready())
	f.reply(1, seal, 10, 0)
	f.reply(2, seal, 10, 0)
	onlyProposal[meta.CommitRecovery](t, f.ready())
	f.mustCommit()
	if a, _ := f.s.Assignment(st.ID); a.Owner != 1 || !slices.Equal(a.Followers, []uint16{2, 4}) {
		t.Fatalf("assignment %+v: want owner 1, followers [2 4]", a)
	}
}

// A recovery places no replacement on a node whose copy of the stream is flagged failed (one left
// out of an earlier assignment that has not healed yet).
func TestOwnerLoss_NoReplacementOnAFailedCopysNode(t *testing.T) {
	f := newFixture(t, testConfig(), 4)
	st := f.createStream("s", 3, majority, 1, 2, 3)
	f.heartbeat(4, 0, failedTail(st, 1, wire.RoleSealed, 0, wire.LogFailNoSpace))
	f.heartbeat(2, 0, tail(st, 1, wire.RoleFollower, 10, 0))
	f.heartbeat(3, 0, tail(st, 1, wire.RoleFollower, 10, 0))
	f.heartbeat(1, wire.FlagShuttingDown)
	if op := onlyProposal[meta.RecordRecovery](t, f.ready()); !slices.Equal(op.Members, []uint16{2, 3}) {
		t.Fatalf("recovery %+v: want members [2 3], no copy on node 4", op)
	}
}
