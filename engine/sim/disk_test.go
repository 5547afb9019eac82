package sim

import (
	"testing"

	"github.com/ringstream/ringstream/engine/vsr"
)

// persistSuperblock queues a persist of only a superblock at sequence seq (view seq, op 0).
func persistSuperblock(d *disk, id, seq uint64) {
	sb := vsr.FormatSuperblock(vsr.Identity{Cluster: 1, Node: 1, Replica: 0}, false)
	sb.Sequence, sb.View, sb.LogView = seq, uint32(seq), uint32(seq)
	d.persist(&vsr.Effects{PersistID: id, Superblock: sb}, 0, persistOK)
}

// tearCopy crashes d with its one job's superblock copies 0..k-1 written and copy k cut in half.
func tearCopy(d *disk, k int) {
	d.crash(true, k, func(n int) int { return n / 2 }, persistOK)
}

// TestDisk_RepairAtOpenKeepsASuperblockQuorum: a crash tears copy 2 of four (copies 0 and 1 hold the
// new superblock, 3 the old); a second crash stops the next persist after its copy 0. Without the
// repair at open the replica is left with no two copies alike (found by seed 928 before the repair);
// with it the superblock in force still has a quorum.
func TestDisk_RepairAtOpenKeepsASuperblockQuorum(t *testing.T) {
	for _, repair := range []bool{false, true} {
		var d disk
		d.format(0, false)
		persistSuperblock(&d, 1, 2)
		d.complete(0, misdirection{superblock: func() bool { return false }, log: func() bool { return false }})
		persistSuperblock(&d, 2, 3)
		tearCopy(&d, 2)
		dur, _, err := vsr.Recover(d.superblocks, d.snapshots, d.log)
		if err != nil || dur.Recovering || dur.Superblock.Sequence != 3 {
			t.Fatalf("after the first tear: %+v, %v; want sequence 3 in force", dur.Superblock, err)
		}
		if repair {
			d.repairSuperblocks(dur)
		}
		persistSuperblock(&d, 1, 4)
		tearCopy(&d, 1)
		dur, _, err = vsr.Recover(d.superblocks, d.snapshots, d.log)
		if err != nil {
			t.Fatal(err)
		}
		if dur.Recovering == repair {
			t.Fatalf("repair=%v: recovering=%v (cause %v), want %v", repair, dur.Recovering, dur.Cause, !repair)
		}
		if repair && dur.Superblock.Sequence != 3 {
			t.Fatalf("repaired: sequence %d in force, want 3", dur.Superblock.Sequence)
		}
	}
}

// TestDurableMark_CoversOnlyWhatASyncedSuperblockHeld: the durability check's mark.
func TestDurableMark_CoversOnlyWhatASyncedSuperblockHeld(t *testing.T) {
	var m durableMark
	m.raise(vsr.Superblock{View: 3, LogView: 2, Op: 10})
	m.raise(vsr.Superblock{View: 4, LogView: 4, Op: 7}) // a later view's shorter log
	for _, c := range []struct {
		view, logView uint32
		op            uint64
		want          bool
	}{
		{4, 4, 7, true}, {4, 4, 8, false}, {5, 4, 7, false}, {3, 2, 10, true}, {4, 2, 12, true}, {4, 3, 0, true},
	} {
		if got := m.covers(c.view, c.logView, c.op); got != c.want {
			t.Errorf("covers(view %d, log view %d, op %d) = %v, want %v", c.view, c.logView, c.op, got, c.want)
		}
	}
}
