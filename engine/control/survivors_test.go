package control

import (
	"reflect"
	"testing"

	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/wire"
)

// Issue 22, finding 7: guards a mutation audit could break with every test green.

// A live node that answered the seal with "no copy" holds nothing to wait for: once R copies are
// sealed, the recovery commits without waiting out the seal timeout for it (W = E, so R = 1), in the
// Ready after that answer.
func TestRecovery_NoCopyAnswerIsNotWaitedFor(t *testing.T) {
	cfg := testConfig()
	cfg.AssignmentPolicy = meta.Policy{Kind: meta.PolicyLocalDurable}
	f := newFixture(t, cfg, 3)
	st := f.createStream("s", 3, cfg.AssignmentPolicy, 1, 2, 3)
	f.heartbeatAll(1, 2, 3)
	f.ready()
	f.failOwner(st, 1)
	_, seal := sealsTo(t, f.ready())
	f.reply(2, seal, 8, 0)
	if fx := f.ready(); len(fx.Proposals) != 0 { // node 3 is live and has not answered yet
		t.Fatalf("proposed %+v before node 3 answered", fx.Proposals)
	}
	f.c.OnSealReply(3, wire.StreamSealReply{Stream: seal.Stream, Incarnation: seal.Incarnation, FenceEpoch: seal.FenceEpoch,
		Status: wire.SealNoCopy, TransitionID: seal.TransitionID})
	if op := onlyProposal[meta.CommitRecovery](t, f.ready()); op.Owner != 2 || !reflect.DeepEqual(op.Sealed, []uint16{2}) {
		t.Fatalf("commit %+v, want node 2 promoted at once", op)
	}
}

// Published tails of another incarnation of the same stream id are not this incarnation's: a
// member whose heartbeat shows only those is still lagging, and is sent the assignment again.
func TestAssignments_TailsOfAnotherIncarnationDoNotCount(t *testing.T) {
	cfg := testConfig()
	f := newFixture(t, cfg, 3)
	st := f.createStream("s", 3, majority, 1, 2, 3)
	other := tail(st, 1, wire.RoleFollower, 5, 0)
	other.Incarnation = st.Incarnation + 1
	f.heartbeat(1, 0, tail(st, 1, wire.RoleOwner, 5, 0))
	f.heartbeat(2, 0, tail(st, 1, wire.RoleFollower, 5, 0))
	f.heartbeat(3, 0, other)
	f.ready()
	f.ticks(int(cfg.SealRetryTimeoutTicks), 1, 2, 3)
	if got := assignedTo(f.ready()); !reflect.DeepEqual(got, []uint16{3}) {
		t.Fatalf("resent to %v, want [3]: node 3 published only another incarnation's copy", got)
	}
}
