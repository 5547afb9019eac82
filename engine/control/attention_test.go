package control

import (
	"errors"
	"strings"
	"testing"

	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/wire"
)

// belowPrefixSetup brings a stream to a second owner loss whose seal has not been answered: starts
// [epoch 2 at 100 records on node 2], assignment epoch 2 owner 2 followers 3 and 4.
func belowPrefixSetup(t *testing.T) (*fixture, meta.Stream, wire.StreamSeal) {
	f := newFixture(t, testConfig(), 4)
	st := f.createStream("s", 3, majority, 1, 2, 3)
	f.heartbeatAll(1, 2, 3, 4)
	f.ready()
	f.failOwner(st, 1)
	_, s1 := sealsTo(t, f.ready())
	f.reply(2, s1, 100, 7)
	f.reply(3, s1, 100, 7)
	onlyProposal[meta.CommitRecovery](t, f.ready())
	f.mustCommit()
	f.failOwner(st, 2)
	_, s2 := sealsTo(t, f.ready())
	return f, st, s2
}

// Spec 000: attention judges from the tails copies publish in their heartbeats, so the wait below the
// confirmed prefix stays quiet while a live copy has published nothing (it may hold the prefix), and
// while a live copy published a tail at or past the start (it will answer).
func TestAttention_BelowPrefixQuietWhileALiveCopyPublishedNothing(t *testing.T) {
	f, st, _ := belowPrefixSetup(t)
	f.c.BecomePrimary() // a new primary: nothing published yet
	_, seal := sealsTo(t, f.ready())
	f.reply(3, seal, 60, 0)
	f.reply(4, seal, 0, 0)
	f.ticks(int(testConfig().SealTimeoutTicks), 3, 4)
	f.ready()
	// 3 and 4 answered below the start; 2 is alive (fresh window) and has published nothing.
	if att := f.c.Attention(nil); len(att) != 0 {
		t.Fatalf("attention while node 2 has published nothing: %+v", att)
	}
	f.heartbeat(2, 0, tail(st, 2, wire.RoleOwner, 100, 7))
	if att := f.c.Attention(nil); len(att) != 0 {
		t.Fatalf("attention while node 2 published a tail at the start: %+v", att)
	}
	f.heartbeat(2, wire.FlagShuttingDown)
	att := f.c.Attention(nil)
	if len(att) != 1 || att[0].Kind != AttentionBelowConfirmedPrefix {
		t.Fatalf("attention once no copy that can answer holds the prefix: %+v", att)
	}
	if !strings.Contains(att[0].Why, "100 records") || !strings.Contains(att[0].Why, "node 2") {
		t.Fatalf("attention does not name the start and its node: %s", att[0].Why)
	}
}

// Spec 000, known limits: accepting owner loss moves the stream without sealing; the start recorded
// is the new owner's tails as it last published them, none if it published nothing.
func TestAcceptOwnerLoss_StartIsTheOwnersPublishedTails(t *testing.T) {
	f, st, _ := belowPrefixSetup(t)
	f.heartbeat(3, 0, tail(st, 2, wire.RoleFollower, 60, 5))
	op, err := f.c.AcceptOwnerLoss(st.ID, 3)
	if err != nil {
		t.Fatal(err)
	}
	rec, _ := f.s.RecoveryOf(st.ID)
	want := meta.AcceptOwnerLoss{Stream: st.ID, Incarnation: 1, Recovery: rec.ID, Owner: 3,
		TailsPublished: true, RecordTail: 60, CursorTail: 5}
	if op != want {
		t.Fatalf("op %+v\nwant %+v", op, want)
	}
	r := f.mustApply(op)
	if !strings.Contains(r.Message, "warning") {
		t.Fatalf("an accepted loss below the confirmed prefix does not warn: %s", r)
	}
	if latest, _ := f.s.LatestStart(st.ID); latest != (meta.HistoryStart{Epoch: 3, RecordStart: 60, CursorStart: 5, Node: 3}) {
		t.Fatalf("latest start %+v", latest)
	}
}

// A seal answer is exact (a sealed copy appends nothing until its next assignment) where published
// tails can lag: the accepted start is the answer's.
func TestAcceptOwnerLoss_StartIsTheOwnersSealAnswer(t *testing.T) {
	f, st, seal := belowPrefixSetup(t)
	f.heartbeat(3, 0, tail(st, 2, wire.RoleFollower, 40, 3))
	f.reply(3, seal, 60, 5)
	op, err := f.c.AcceptOwnerLoss(st.ID, 3)
	if err != nil {
		t.Fatal(err)
	}
	if !op.TailsPublished || op.RecordTail != 60 || op.CursorTail != 5 {
		t.Fatalf("op %+v: want the seal answer's tails 60/5", op)
	}
	f.mustApply(op)
	if latest, _ := f.s.LatestStart(st.ID); latest != (meta.HistoryStart{Epoch: 3, RecordStart: 60, CursorStart: 5, Node: 3}) {
		t.Fatalf("latest start %+v", latest)
	}
}

// An owner whose tails the controller does not know is refused: an epoch without a start lets a copy
// returning from an older epoch keep a suffix the new owner overwrote (streamsim seed 322682). Once
// the node answers the seal, the accept goes through with that answer as the start.
func TestAcceptOwnerLoss_UnknownTailsRefused(t *testing.T) {
	f, st, _ := belowPrefixSetup(t)
	f.c.BecomePrimary() // fresh heartbeats only: node 4 has published nothing to this primary
	_, seal := sealsTo(t, f.ready())
	if _, err := f.c.AcceptOwnerLoss(st.ID, 4); !errors.Is(err, ErrOwnerTailsUnknown) {
		t.Fatalf("accept of an owner that published nothing: %v", err)
	}
	f.reply(4, seal, 0, 0)
	op, err := f.c.AcceptOwnerLoss(st.ID, 4)
	if err != nil {
		t.Fatal(err)
	}
	if !op.TailsPublished || op.RecordTail != 0 || op.CursorTail != 0 {
		t.Fatalf("op %+v", op)
	}
	if r := f.mustApply(op); r.Code != meta.ResultOK {
		t.Fatalf("result %s", r)
	}
	if latest, _ := f.s.LatestStart(st.ID); latest != (meta.HistoryStart{Epoch: 3, Node: 4}) {
		t.Fatalf("latest start %+v: want epoch 3 at 0/0 for node 4", latest)
	}
}

func TestOperatorActions_Refusals(t *testing.T) {
	f := newFixture(t, testConfig(), 3)
	st := f.createStream("s", 3, majority, 1, 2, 3)
	if _, err := f.c.AcceptOwnerLoss(st.ID, 2); !errors.Is(err, ErrNoPendingRecovery) {
		t.Fatalf("accept without a recovery: %v", err)
	}
	if _, err := f.c.Withdraw(st.ID + 1); !errors.Is(err, ErrNoStream) {
		t.Fatalf("withdraw of no stream: %v", err)
	}
	f.c.StepDown()
	if _, err := f.c.Withdraw(st.ID); !errors.Is(err, ErrNotPrimary) {
		t.Fatalf("withdraw on a backup: %v", err)
	}
}

// Spec 000 attention list: a follower reporting a silent owner that the controller still sees alive.
func TestAttention_FollowerReportsSilentOwnerStillAlive(t *testing.T) {
	cfg := testConfig()
	f := newFixture(t, cfg, 3)
	st := f.createStream("s", 3, majority, 1, 2, 3)
	f.heartbeatAll(1, 2, 3)
	f.ready()
	silent := tail(st, 1, wire.RoleFollower, 4, 0)
	silent.Flags = wire.CopyOwnerSilent
	f.heartbeat(3, 0, silent)
	f.published[3] = nil // later keep-alive heartbeats do not repeat the report
	att := f.c.Attention(nil)
	if len(att) != 1 || att[0].Kind != AttentionOwnerSilentButAlive || att[0].Node != 3 {
		t.Fatalf("attention %+v", att)
	}
	f.c.OnOwnerSilent(3, st.ID, st.Incarnation, 0) // an older epoch's report does not count
	f.ticks(int(cfg.NodeLivenessTimeoutTicks)-1, 1, 2, 3)
	if att := f.c.Attention(nil); len(att) != 1 {
		t.Fatalf("attention %+v", att)
	}
	f.ticks(1, 1, 2, 3)
	if att := f.c.Attention(nil); len(att) != 0 {
		t.Fatalf("report kept past its time: %+v", att)
	}
	f.c.OnOwnerSilent(2, st.ID, st.Incarnation, 1)
	f.heartbeat(1, wire.FlagShuttingDown)
	for _, a := range f.c.Attention(nil) {
		if a.Kind == AttentionOwnerSilentButAlive {
			t.Fatalf("listed once the owner is lost: %+v", a)
		}
	}
}
