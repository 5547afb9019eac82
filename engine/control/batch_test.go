package control

import (
	"slices"
	"testing"

	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/wire"
)

// threeLost creates streams a, b, c on nodes 1 2 3 (owner 1) and loses node 1: the next Ready records
// their recoveries in one batch op.
func threeLost(t *testing.T) (*fixture, []meta.Stream, meta.RecordRecoveries) {
	f := newFixture(t, testConfig(), 4)
	var sts []meta.Stream
	for _, name := range []string{"a", "b", "c"} {
		sts = append(sts, f.createStream(name, 3, majority, 1, 2, 3))
	}
	f.heartbeatAll(1, 2, 3, 4)
	f.ready()
	f.heartbeat(1, wire.FlagShuttingDown)
	op := onlyProposal[meta.RecordRecoveries](t, f.ready())
	if got := f.fx.Proposals[0].For(); !slices.Equal(got, []uint64{sts[0].ID, sts[1].ID, sts[2].ID}) {
		t.Fatalf("batch for %v", got)
	}
	return f, sts, op
}

// An entry the metadata group refuses backs off alone, as a refused single op does, and is proposed
// again (against the state it then finds) after SealRetryTimeoutTicks; the other entries' recoveries
// go on to their seals.
func TestBatch_RefusedEntryBacksOffAloneAndIsRetried(t *testing.T) {
	f, sts, op := threeLost(t)
	// Stream b moves under the decision (a change that needs no recovery, made by someone else).
	b := sts[1]
	f.mustApply(meta.SetAssignment{Stream: b.ID, Incarnation: 1, ExpectedEpoch: 1, Owner: 1,
		Followers: []uint16{2, 3}, Policy: meta.Policy{Kind: meta.PolicyCountDurable, Count: 2}})
	r := f.apply(op)
	if e, ok := r.Entry(b.ID); !ok || e.Code != meta.ResultEpochMismatch {
		t.Fatalf("result %s %+v", r, r.Entries)
	}
	f.c.ProposalApplied(f.fx.Proposals[0].For(), r)
	f.c.StateChanged()
	if s := f.c.Stats(); s.ProposalsRefused != 1 {
		t.Fatalf("refused %d entries, want 1", s.ProposalsRefused)
	}
	fx := f.ready()
	if len(fx.Proposals) != 0 {
		t.Fatalf("refused entry proposed again during its back-off: %+v", fx.Proposals)
	}
	sealed := map[uint64]bool{}
	for _, s := range fx.Seals {
		sealed[s.Seal.Stream] = true
	}
	if !sealed[sts[0].ID] || sealed[b.ID] || !sealed[sts[2].ID] {
		t.Fatalf("seals for %v, want a and c", sealed)
	}
	f.ticks(int(testConfig().SealRetryTimeoutTicks), 2, 3, 4)
	again := onlyProposal[meta.RecordRecovery](t, f.ready())
	if again.Stream != b.ID || again.ExpectedEpoch != 2 {
		t.Fatalf("retry %+v, want a single record of b at epoch 2", again)
	}
}

// A batch that was never proposed (or lost in a view change) frees every stream it was for.
func TestBatch_DroppedBatchFreesEveryStreamAtOnce(t *testing.T) {
	f, _, _ := threeLost(t)
	for _, s := range f.fx.Proposals[0].For() {
		f.c.ProposalDropped(s)
	}
	op := onlyProposal[meta.RecordRecoveries](t, f.ready())
	if len(op.Entries) != 3 {
		t.Fatalf("%d entries proposed again, want 3", len(op.Entries))
	}
}

// A batch refused whole (its bytes did not decode: no entries in the result) refuses each stream.
func TestBatch_RefusedWholeRefusesEveryStream(t *testing.T) {
	f, _, _ := threeLost(t)
	f.c.ProposalApplied(f.fx.Proposals[0].For(), meta.Result{Code: meta.ResultMalformed})
	if s := f.c.Stats(); s.ProposalsRefused != 3 {
		t.Fatalf("refused %d, want 3", s.ProposalsRefused)
	}
	if fx := f.ready(); len(fx.Proposals) != 0 {
		t.Fatalf("proposed during the back-off: %+v", fx.Proposals)
	}
}

// Ready commits every recovery that is ready in one tick in one batch op; a recovery that is not
// ready yet waits for a later one.
func TestBatch_ReadyRecoveriesCommitInOneOp(t *testing.T) {
	f, sts, _ := threeLost(t)
	f.mustCommit()
	fx := f.ready()
	seals := slices.Clone(fx.Seals)
	for _, s := range seals {
		if s.Seal.Stream != sts[2].ID && s.To != 1 {
			f.reply(s.To, s.Seal, 10, 0)
		}
	}
	op := onlyProposal[meta.CommitRecoveries](t, f.ready())
	if len(op.Entries) != 2 || op.Entries[0].Stream != sts[0].ID || op.Entries[1].Stream != sts[1].ID {
		t.Fatalf("commit batch %+v", op)
	}
	f.mustCommit()
	for _, s := range seals {
		if s.Seal.Stream == sts[2].ID && s.To != 1 {
			f.reply(s.To, s.Seal, 10, 0)
		}
	}
	if op := onlyProposal[meta.CommitRecovery](t, f.ready()); op.Stream != sts[2].ID {
		t.Fatalf("last commit %+v", op)
	}
}

// Placement's changes that need no recovery, found in one pass, go out as one SetAssignments op.
func TestBatch_PlacementOfManyStreamsInOneOp(t *testing.T) {
	f := newFixture(t, testConfig(), 3)
	a := f.createStream("a", 3, meta.Policy{Kind: meta.PolicyLocalDurable}, 1, 2, 3)
	b := f.createStream("b", 3, meta.Policy{Kind: meta.PolicyLocalDurable}, 2, 1, 3)
	f.heartbeatAll(1, 2, 3)
	op := onlyProposal[meta.SetAssignments](t, f.ready())
	if len(op.Entries) != 2 || op.Entries[0].Stream != a.ID || op.Entries[1].Stream != b.ID ||
		op.Entries[1].Owner != 2 || op.Entries[0].Policy != majority {
		t.Fatalf("placement batch %+v", op)
	}
	f.mustCommit()
	if fx := f.ready(); len(fx.Proposals) != 0 {
		t.Fatalf("proposed again after the batch committed: %+v", fx.Proposals)
	}
}

// A batch result that names no entry for a stream (a result from another op) refuses that stream;
// the streams it names get their own codes.
func TestBatch_ResultWithoutAStreamsEntryRefusesIt(t *testing.T) {
	f, sts, _ := threeLost(t)
	f.c.ProposalApplied(f.fx.Proposals[0].For(), meta.Result{Code: meta.ResultOK, Entries: []meta.EntryResult{
		{Stream: sts[0].ID, Code: meta.ResultOK}, {Stream: sts[2].ID, Code: meta.ResultOK}}})
	if s := f.c.Stats(); s.ProposalsRefused != 1 {
		t.Fatalf("refused %d, want 1 (stream b, which the result does not name)", s.ProposalsRefused)
	}
}
