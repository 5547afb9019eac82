package sim

import (
	"testing"

	"github.com/ringstream/ringstream/engine/vsr"
	"github.com/ringstream/ringstream/wire"
)

// persistOp queues persist id at sequence seq: op `op` of view 1 appended after parent, the superblock
// naming it.
func persistOp(d *disk, id, seq, op, parent uint64) uint64 {
	e := wire.VSREntry{Op: op, View: 1, Client: 1, Request: op, Parent: parent, Body: []byte("op")}
	e.Checksum = vsr.EntryChecksum(&e)
	sb := vsr.FormatSuperblock(vsr.Identity{Cluster: 1, Node: 1, Replica: 0}, false)
	sb.Sequence, sb.View, sb.LogView, sb.Op, sb.Head = seq, 1, 1, op, e.Checksum
	d.persist(&vsr.Effects{PersistID: id, Entries: []wire.VSREntry{e}, Superblock: sb}, 0, persistOK)
	return e.Checksum
}

var noMisdirection = misdirection{superblock: func() bool { return false }, log: func() bool { return false }}

// keepOneCopy crashes d keeping, of its one job, the superblock copy k whole and nothing else (the
// log's append is lost): one of the states a power loss before the fsync may leave.
func keepOneCopy(d *disk, k int) {
	j := d.jobs[0]
	d.jobs = nil
	d.apply(j.writes[1+k], len(j.writes[1+k].data))
}

// open recovers d and cuts its log, with or without the repair at open, as the simulator's start.
func open(t *testing.T, d *disk, repair bool) vsr.Durable {
	t.Helper()
	dur, valid, err := vsr.Recover(d.superblocks, d.snapshots, d.log)
	if err != nil {
		t.Fatal(err)
	}
	d.log = d.log[:valid]
	if repair {
		d.repairSuperblocks(dur)
	}
	return dur
}

// TestDisk_RepairAtOpen: a power loss keeps one copy of persist 3's superblock (op 2) and loses its
// log append. The replica resumes at op 2 from that copy. Without the repair at open, the persist
// after the next overwrites that copy's area and op 2 is nowhere (the replica recovers for a state
// it never lost); and one bad sector on the only copy would roll it back to op 1. With the repair,
// both leave op 2 in force.
func TestDisk_RepairAtOpen(t *testing.T) {
	for _, repair := range []bool{false, true} {
		var d disk
		d.format(0, false)
		h1 := persistOp(&d, 1, 2, 1, 0)
		d.complete(0, noMisdirection)
		h2 := persistOp(&d, 2, 3, 2, h1)
		keepOneCopy(&d, 2)
		if dur := open(t, &d, repair); dur.Recovering || dur.Superblock.Op != 2 || len(dur.Unlogged) == 0 {
			t.Fatalf("repair=%v: after the power loss: %+v; want op 2 in force from one copy", repair, dur.Superblock)
		}
		saved := d.clone()

		h3 := persistOp(&d, 3, 4, 3, h2)
		persistOp(&d, 4, 5, 4, h3) // overwrites the area of sequence 3
		d.complete(0, noMisdirection)
		dur := open(t, &d, repair)
		if dur.Recovering == repair {
			t.Fatalf("repair=%v: two persists later recovering=%v (%v), want %v", repair, dur.Recovering, dur.Cause,
				!repair)
		}

		d = saved
		area := vsr.AreaOf(3) * vsr.SuperblockCopies
		d.superblocks[area+2][40] ^= 1 // a bad sector on the copy kept
		dur = open(t, &d, false)
		if got := dur.Superblock.Op; (got == 2) != repair {
			t.Fatalf("repair=%v: one bad copy later op %d in force", repair, got)
		}
	}
}

// TestDisk_PowerLossLeavesNewOrPrevious: whatever subset of one persist's writes a power loss keeps,
// whole or torn, the replica resumes at the previous op or the new one, never in recovery.
func TestDisk_PowerLossLeavesNewOrPrevious(t *testing.T) {
	for seed := 0; seed < 2000; seed++ {
		var d disk
		d.format(0, false)
		h1 := persistOp(&d, 1, 2, 1, 0)
		d.complete(0, noMisdirection)
		persistOp(&d, 2, 3, 2, h1)
		x := uint64(seed)*0x9e3779b97f4a7c15 + 1
		pick := func(n int) int {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
			return int(x % uint64(n))
		}
		d.crash(true, pick, persistOK)
		dur := open(t, &d, true)
		if dur.Recovering || dur.Superblock.Op < 1 {
			t.Fatalf("seed %d: recovering %v (%v) at op %d, want op 1 or 2", seed, dur.Recovering, dur.Cause,
				dur.Superblock.Op)
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
