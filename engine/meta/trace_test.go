package meta

import (
	"slices"
	"testing"
)

// traceCopy is one copy in the trace below: its records (each the epoch it was written in, value
// implied by position and epoch) and its log epochs.
type traceCopy struct {
	node   uint16
	log    []uint32 // epoch of each record; a record's identity is (offset, epoch)
	epochs []LogEpoch
}

// cut applies CutPoint for target the way storage does: the record log comes down to the cut and
// log-epochs entries starting past it go.
func (c *traceCopy) cut(target uint32, starts []HistoryStart) {
	cut, ok := CutPoint(c.node, c.epochs, target, starts)
	if !ok {
		return
	}
	if cut.Record < uint64(len(c.log)) {
		c.log = c.log[:cut.Record]
	}
	c.epochs = slices.DeleteFunc(c.epochs, func(e LogEpoch) bool { return e.RecordStart > cut.Record })
}

// apply is a role change at epoch: cut onto the recorded history, then record the new log epoch.
func (c *traceCopy) apply(epoch uint32, starts []HistoryStart) {
	c.cut(epoch, starts)
	c.epochs = append(c.epochs, LogEpoch{Epoch: epoch, RecordStart: uint64(len(c.log))})
}

// DESIGN section 9 and model-check.md, "Variant 1, W = 2: 15 steps": a copy that missed its role
// change reports an older owner's unconfirmed suffix, wins the tie, and its cut on apply removes a
// confirmed record. With the seal cutting onto the starts first (the rule CutPoint gives the seal),
// the stale copy reports 0, the copy holding the confirmed record is promoted, and the record stays.
func TestCutPoint_DesignSection9Trace(t *testing.T) {
	for _, sealCutsFirst := range []bool{true, false} {
		name := map[bool]string{true: "seal cuts first", false: "raw tail"}[sealCutsFirst]
		t.Run(name, func(t *testing.T) {
			f := newFixture(t).withCluster()
			st := f.createStream("s", 1, 2, 3) // A = 1, B = 2, C = 3; majority: W = 2, R = 2
			a := &traceCopy{node: 1, epochs: []LogEpoch{{Epoch: 1}}}
			b := &traceCopy{node: 2, epochs: []LogEpoch{{Epoch: 1}}}
			c := &traceCopy{node: 3, epochs: []LogEpoch{{Epoch: 1}}}
			seal := func(x *traceCopy, target uint32) uint64 {
				if sealCutsFirst {
					x.cut(target, f.starts(st).List)
				}
				return uint64(len(x.log))
			}
			// 1-3: A, owner at epoch 1, appends v1@e1 at offset 0 alone, crashes and restarts.
			a.log = append(a.log, 1)
			// 4-6: B and C sealed at epoch 2 (tails 0 and 0); B promoted on the tie; A is kept as a
			// member (the literal reading: live and not sealed) but never applies epoch 2.
			rec := f.recordRecovery(st, 2, 1, 2, 3)
			bt, ct := seal(b, 2), seal(c, 2)
			f.mustApply(CommitRecovery{Stream: st.ID, Incarnation: 1, Recovery: rec.ID, ExpectedEpoch: 1,
				Owner: 2, RecordTail: bt, Sealed: []uint16{2, 3}})
			if ct != 0 {
				t.Fatal("C not empty")
			}
			f.mustApply(SetAssignment{Stream: st.ID, Incarnation: 1, ExpectedEpoch: 2, Owner: 2,
				Followers: []uint16{1, 3}, Policy: Policy{Kind: PolicyMajorityDurable}})
			// 7-10: B applies, appends v2@e2 at 0; C applies and takes it: offset 0 = v2@e2 confirmed.
			b.apply(2, f.starts(st).List)
			b.log = append(b.log, 2)
			c.apply(2, f.starts(st).List)
			c.log = append(c.log, 2)
			// 11-14: B crashes; A and C are sealed at epoch 4 (the assignment moved to 3 when A joined).
			rec = f.recordRecovery(st, 3, 1, 3)
			at, ct := seal(a, 4), seal(c, 4)
			owner, tail := uint16(3), ct
			if at >= ct { // the tie goes to the lowest node id
				owner, tail = 1, at
			}
			f.mustApply(CommitRecovery{Stream: st.ID, Incarnation: 1, Recovery: rec.ID, ExpectedEpoch: 3,
				ExpectedStartsVersion: 1, Owner: owner, RecordTail: tail, Sealed: []uint16{1, 3}})
			// 15: the new owner applies epoch 4.
			newOwner := map[uint16]*traceCopy{1: a, 3: c}[owner]
			newOwner.apply(4, f.starts(st).List)
			holds := len(newOwner.log) > 0 && newOwner.log[0] == 2
			if sealCutsFirst && (owner != 3 || !holds) {
				t.Fatalf("owner %d log %v: the confirmed v2@e2 at offset 0 is lost", owner, newOwner.log)
			}
			if !sealCutsFirst && (owner != 1 || holds) {
				t.Fatalf("the raw-tail variant no longer loses the record (owner %d log %v): the trace is not reproduced",
					owner, newOwner.log)
			}
		})
	}
}
