package streamsim

import (
	"strings"
	"testing"

	"github.com/ringstream/ringstream/engine/stream"
)

// traceSim is a scripted three-node run of one stream (A = 1 owner, B = 2 and C = 3 followers,
// majority_durable, so W = 2 and R = 2) with the controller on C.
type traceSim struct {
	t *testing.T
	s *Sim
}

func newTrace(t *testing.T, v Variant) *traceSim {
	o := Options{Seed: 1, Variant: v, Nodes: 3, Streams: 1, Copies: 3, Scripted: true, MetaNode: 3, MetaDelayTicks: 1,
		Ticks: 1 << 20}
	if *verbose {
		o.Log = t.Logf
	}
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return &traceSim{t: t, s: s}
}

// until runs ticks until cond holds, failing after limit ticks or at a violation.
func (tr *traceSim) until(what string, limit int, cond func() bool) {
	tr.t.Helper()
	for range limit {
		if cond() {
			return
		}
		if err := tr.s.RunTicks(1); err != nil {
			tr.t.Fatalf("%s: %v", what, err)
		}
	}
	tr.t.Fatalf("%s: not within %d ticks", what, limit)
}

func (tr *traceSim) epoch() uint32 {
	a, _ := tr.s.meta.state.Assignment(tr.s.strs[0].st.ID)
	return a.Epoch
}

func (tr *traceSim) owner() uint16 {
	a, _ := tr.s.meta.state.Assignment(tr.s.strs[0].st.ID)
	return a.Owner
}

// applied reports whether node holds an open copy at epoch in role.
func (tr *traceSim) applied(node uint16, epoch uint32, role stream.Role) bool {
	hc := tr.s.nodes[node].copies[0]
	return hc != nil && hc.asg.Epoch == epoch && hc.c.Role() == role && tr.s.nodes[node].disks[0].ownEpoch() == epoch
}

func (tr *traceSim) recTail(node uint16) uint64 { return tr.s.nodes[node].disks[0].rec().tail() }

// runTrace plays model-check.md's 15-step trace (DESIGN section 9) on the real controller and copies.
// Two things differ from the model, both from the real membership rules: a copy that was down at a
// commit is left out of it (meta keeps only sealed copies), so A rejoins epoch 2's members through a
// follower addition (epoch 3 here); and the model's epochs 2 and 3 are this run's 2-3 and 4. It
// returns the run's first violation (nil if none).
func runTrace(t *testing.T, v Variant) (*traceSim, error) {
	tr := newTrace(t, v)
	const a, b, c = 1, 2, 3
	tr.until("epoch 1 applied", 20, func() bool {
		return tr.applied(a, 1, stream.RoleOwner) && tr.applied(b, 1, stream.RoleFollower) && tr.applied(c, 1, stream.RoleFollower)
	})
	// A never gets an assignment before epoch 4 (it "never applies e2"), and none of its prepares
	// reach anyone.
	tr.s.net.drop = func(e *envelope) bool {
		return e.from == a && e.kind == kindPrepare ||
			e.to == a && e.kind == kindAssign && e.assign.Assignment.Epoch < 4
	}
	// 1. A, the owner at e1, appends v1@e1 at offset 0; no other copy gets it.
	tr.s.Produce(0, a, 1, 1, 1)
	tr.until("v1 durable on A", 20, func() bool { return tr.s.nodes[a].disks[0].rec().durableTail() == 1 })
	// 2. A crashes (owner loss 1), keeping [v1@e1]: it was synced.
	tr.s.kill(tr.s.nodes[a], 0)
	// 4-6. The controller seals B and C (both report tail 0) and commits e2 with owner B (the tie
	// goes to the lowest id).
	tr.until("epoch 2 committed", 200, func() bool { return tr.epoch() == 2 })
	if o := tr.owner(); o != b {
		t.Fatalf("epoch 2 owner %d, want B", o)
	}
	// 3. A restarts with its log [v1@e1]; it rejoins as a follower of B (epoch 3), never applying it.
	tr.s.restart(tr.s.nodes[a])
	tr.until("A added back at epoch 3", 200, func() bool { return tr.epoch() == 3 })
	// 7-10. B applies, appends v2 at offset 0 and replicates it to C: v2 is confirmed at 0.
	tr.until("B and C at epoch 3", 50, func() bool {
		return tr.applied(b, 3, stream.RoleOwner) && tr.applied(c, 3, stream.RoleFollower)
	})
	tr.s.Produce(0, b, 2, 1, 1)
	tr.until("v2 acknowledged", 50, func() bool {
		base, ok := tr.s.work.acked[ackKey{stream: tr.s.strs[0].st.ID, pid: 2, seq: 1}]
		return ok && base == 0
	})
	if got := tr.recTail(a); got != 1 {
		t.Fatalf("A's tail %d, want its stale v1 only", got)
	}
	// 11. B crashes (owner loss 2).
	tr.s.kill(tr.s.nodes[b], 0)
	// 12-14. The controller seals A and C at e4 and commits.
	tr.until("epoch 4 committed", 200, func() bool { return tr.epoch() == 4 })
	// 15. The new owner applies e4.
	owner := tr.owner()
	err := tr.s.RunTicks(30)
	t.Logf("%s: epoch 4 owner %d; A's tail %d, C's tail %d; violation: %v", v, owner, tr.recTail(a), tr.recTail(c), err)
	return tr, err
}

// TestTrace_RawTailLosesConfirmedRecord: with a seal that reports the raw tail, A reports its stale
// v1, wins the tie with C, and its cut on applying e4 empties it: the owner lacks confirmed v2.
func TestTrace_RawTailLosesConfirmedRecord(t *testing.T) {
	tr, err := runTrace(t, RawTailSeal)
	if tr.owner() != 1 {
		t.Fatalf("epoch 4 owner %d, want A (raw tail 1 ties C's, lowest id)", tr.owner())
	}
	if err == nil || !strings.Contains(err.Error(), "owner 1 lacks confirmed [0,1)@e3 p2/1") {
		t.Fatalf("want the confirmed v2 lost on owner A, got %v", err)
	}
}

// TestTrace_CutFirstSealKeepsConfirmedRecord: the seal cuts A onto the history first, so A reports 0,
// C (holding v2) is promoted, and v2 stays at offset 0 on every copy of e4.
func TestTrace_CutFirstSealKeepsConfirmedRecord(t *testing.T) {
	tr, err := runTrace(t, Correct)
	if err != nil {
		t.Fatal(err)
	}
	if tr.owner() != 3 {
		t.Fatalf("epoch 4 owner %d, want C", tr.owner())
	}
	tr.until("A follows C at epoch 4 and holds v2", 100, func() bool {
		ids := tr.s.nodes[1].disks[0].rec().ids
		return tr.applied(1, 4, stream.RoleFollower) && len(ids) == 1 && ids[0].pid == 2
	})
	if ids := tr.s.nodes[3].disks[0].rec().ids; len(ids) != 1 || ids[0].pid != 2 || ids[0].base != 0 {
		t.Fatalf("C's log %v, want v2 at 0", ids)
	}
}
