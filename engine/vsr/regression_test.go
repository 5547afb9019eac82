package vsr

import (
	"testing"

	"github.com/ringstream/ringstream/wire"
)

// Regression tests for the three repros of issue 10 ("The metadata group survives lost and corrupted
// disks and failed persists"). Each lost a committed op on the code before the fix.

// commitOp3OnTwo commits ops 1 and 2 on all three replicas, then op 3 (client 1, request 3) on replica 0
// (the primary) and replica 1 only: replica 2 never sees it. The client is answered.
func commitOp3OnTwo(t *testing.T) *cluster {
	t.Helper()
	c := newCluster(t, 3)
	for req := uint64(1); req <= 2; req++ {
		if err := c.propose(1, req, 1, 1); err != nil {
			t.Fatal(err)
		}
	}
	c.heartbeat()
	c.cut = func(from, to uint8) bool { return from == 2 || to == 2 }
	if err := c.propose(1, 3, 1, 1); err != nil {
		t.Fatal(err)
	}
	c.cut = nil
	if c.replicas[0].Commit() != 3 || len(c.replies) != 3 || c.replies[2].Op != 3 {
		t.Fatalf("commit %d, %d replies: op 3 must be committed and answered", c.replicas[0].Commit(), len(c.replies))
	}
	if c.replicas[2].Op() != 2 {
		t.Fatalf("replica 2 op %d, want 2 (it never saw op 3)", c.replicas[2].Op())
	}
	return c
}

// checkOp3Survives takes replica 0 (the old primary) down, lets replicas 1 and 2 do what they can,
// brings replica 0 back from its disk, has another client's request committed, and checks that op 3
// is still client 1's request 3 everywhere it is held and that every replica applied the same ops.
func checkOp3Survives(t *testing.T, c *cluster) {
	t.Helper()
	want, ok := c.replicas[0].Entry(3)
	if !ok {
		t.Fatal("replica 0 does not hold op 3")
	}
	c.down[0] = true
	c.replicas[1].OnPrimarySilent()
	c.replicas[2].OnPrimarySilent()
	c.tick(60)
	// Whatever view formed without replica 0, a new request must not take op 3's place.
	_ = c.propose(2, 1, 2, 100)
	c.tick(10)
	c.restart(0)
	c.tick(120)
	if c.primary() < 0 {
		t.Fatal("no primary after replica 0 came back")
	}
	if err := c.propose(3, 1, 3, 1000); err != nil && err != ErrStaleRequest {
		t.Fatal(err)
	}
	c.tick(20)
	c.heartbeat()
	for i, r := range c.replicas {
		if e, ok := r.Entry(3); ok && e.Checksum != want.Checksum {
			t.Errorf("replica %d holds op 3 of client %d request %d: the committed op 3 was lost", i, e.Client, e.Request)
		}
		if r.Commit() >= 3 && c.machines[i].counters[1] != 3 {
			t.Errorf("replica %d at commit %d applied client 1's counter to %d, want 3", i, r.Commit(),
				c.machines[i].counters[1])
		}
	}
}

// Repro 1: replica 1 acknowledged op 3, lost its disk and came back. Before the fix it came back as a
// fresh replica at view 0 with an empty log, voted with replica 2, and op 3 went to another request.
func TestIssue10_WipedDiskLosesNoCommittedOp(t *testing.T) {
	c := commitOp3OnTwo(t)
	c.wipe(1)
	checkOp3Survives(t, c)
	if r := c.replicas[1]; !r.Normal() || r.Stats().Recoveries != 1 || r.Op() < 3 {
		t.Fatalf("wiped replica: normal %v, %d recoveries, op %d; want it recovered once with op 3", r.Normal(),
			r.Stats().Recoveries, r.Op())
	}
}

// Repro 2: replica 1's newest superblock copy has one bad byte. Before the fix Recover took the older
// slot, replica 1 came back at op 2 although it acknowledged op 3, and op 3 was lost as in repro 1.
func TestIssue10_CorruptNewestSuperblockCopyRollsNothingBack(t *testing.T) {
	c := commitOp3OnTwo(t)
	c.down[1] = true
	c.corruptNewestSuperblock(1)
	c.restart(1)
	if c.replicas[1].Op() < 3 && c.replicas[1].Normal() {
		t.Fatalf("replica 1 restarted normal at op %d, below the op 3 it acknowledged", c.replicas[1].Op())
	}
	checkOp3Survives(t, c)
}

// Repro 3: of five, replica 2 holds ops 9 and 10 of view 0 uncommitted; view 1 forms without it and
// keeps ops 1..8 but orders other requests at 9 and 10, commits them and checkpoints at 8. A late
// snapshot (op 8, commit 12) reaches replica 2 while it is still normal in view 0, then a late Commit
// entry of view 0. Before the fix it took the snapshot sender's commit point and, at the Commit entry,
// applied its own ops 9 and 10 of view 0.
func TestIssue10_SnapshotInstallRaisesCommitOnlyAsFarAsJustified(t *testing.T) {
	c := newCluster(t, 5)
	for req := uint64(1); req <= 6; req++ {
		if err := c.propose(1, req, 1, 1); err != nil {
			t.Fatal(err)
		}
	}
	c.heartbeat()
	// Ops 7..10 are prepared together; replica 2's acknowledgements never reach the primary, and the
	// others see only ops 7 and 8.
	c.cut = func(from, to uint8) bool {
		return from == 2 && to == 0
	}
	p := c.replicas[0]
	for req := uint64(7); req <= 10; req++ {
		if err := p.Propose(1, req, counterOp(1, 1)); err != nil {
			t.Fatal(err)
		}
	}
	fx := p.Ready()
	for _, env := range fx.Messages {
		if env.To == 2 || env.Msg.Op <= 8 {
			c.queue = append(c.queue, Envelope{To: env.To, Msg: cloneMessage(&env.Msg)})
		}
	}
	c.disks[0].persist(fx)
	p.Advance(fx.PersistID)
	c.deliverAll()
	if p.Commit() != 8 || c.replicas[2].Op() != 10 || c.replicas[2].Commit() != 6 {
		t.Fatalf("primary commit %d, replica 2 op %d commit %d; want 8, 10, 6", p.Commit(), c.replicas[2].Op(),
			c.replicas[2].Commit())
	}
	// Replica 0 goes down; replicas 1, 3 and 4 form view 1 without replica 2 and commit four new ops.
	c.down[0] = true
	c.cut = func(from, to uint8) bool { return from == 2 || to == 2 }
	for _, i := range []int{1, 3, 4} {
		c.replicas[i].OnCommitEntry(0, 8)
	}
	for _, i := range []int{1, 3, 4} {
		c.replicas[i].OnPrimarySilent()
	}
	c.deliverAll()
	if c.primary() != 1 {
		t.Fatalf("primary %d, want replica 1 of view 1", c.primary())
	}
	for req := uint64(1); req <= 4; req++ {
		if err := c.propose(2, req, 2, 1); err != nil {
			t.Fatal(err)
		}
	}
	r1, r2 := c.replicas[1], c.replicas[2]
	if r1.Commit() != 12 || r1.SnapshotOp() != 8 {
		t.Fatalf("replica 1 commit %d checkpoint %d, want 12 and 8", r1.Commit(), r1.SnapshotOp())
	}
	// The late snapshot.
	r1.sendChunk(2, 0)
	fx = r1.Ready()
	for _, env := range fx.Messages {
		if env.To == 2 && env.Msg.Command == wire.CommandVSRSnapshot {
			m := cloneMessage(&env.Msg)
			r2.Step(&m)
		}
	}
	// Then a late Commit entry of view 0's primary (commit 8, true in view 0).
	r2.OnCommitEntry(0, 8)
	r2.CheckInvariants()
	if r2.Commit() < 8 {
		t.Fatalf("replica 2 commit %d: the snapshot was not installed", r2.Commit())
	}
	for op := uint64(9); op <= r2.Commit(); op++ {
		mine, _ := r2.Entry(op)
		committed, _ := r1.Entry(op)
		if mine.Checksum != committed.Checksum {
			t.Fatalf("replica 2 applied op %d of view %d up to commit %d; the committed op %d is of view %d",
				op, mine.View, r2.Commit(), op, committed.View)
		}
	}
}

// Issue 10, item 4: a primary whose persist failed stops being primary and sends nothing more (no
// prepare-ok, no commit, no reply); the backups' timeout moves the group on and the op it could not
// persist still commits there, or another does, but nothing committed is lost.
func TestIssue10_FailedPersistTakesTheReplicaOut(t *testing.T) {
	c := newCluster(t, 3)
	if err := c.propose(1, 1, 1, 1); err != nil {
		t.Fatal(err)
	}
	c.heartbeat()
	p := c.replicas[0]
	if err := p.Propose(1, 2, counterOp(1, 1)); err != nil {
		t.Fatal(err)
	}
	fx := p.Ready()
	if fx.PersistID == 0 {
		t.Fatal("no persist for op 2")
	}
	p.PersistFailed() // the driver's write of op 2 failed with EIO
	if p.IsPrimary() || p.Normal() || !p.Failed() {
		t.Fatalf("after a failed persist: primary %v normal %v failed %v", p.IsPrimary(), p.Normal(), p.Failed())
	}
	if err := p.Propose(1, 3, counterOp(1, 1)); err != ErrPersistFailed {
		t.Fatalf("propose after a failed persist: %v, want ErrPersistFailed", err)
	}
	p.Advance(fx.PersistID) // a late completion of an earlier persist changes nothing
	for _, m := range fx.Messages {
		m := cloneMessage(&m.Msg)
		c.replicas[1].Step(&m) // the prepare of op 2 had left before the failure
	}
	c.deliverAll()
	c.tick(5)
	fx = p.Ready()
	if fx.PersistID != 0 || len(fx.Messages) != 0 || len(fx.Replies) != 0 || p.Commit() != 1 {
		t.Fatalf("failed replica still acts: persist %d, %d messages, %d replies, commit %d", fx.PersistID,
			len(fx.Messages), len(fx.Replies), p.Commit())
	}
	c.replicas[1].OnPrimarySilent()
	c.replicas[2].OnPrimarySilent()
	c.tick(20)
	if c.primary() != 1 {
		t.Fatalf("primary %d, want replica 1 of view 1", c.primary())
	}
	if err := c.propose(2, 1, 2, 1); err != nil {
		t.Fatal(err)
	}
	c.heartbeat()
	for _, i := range []int{1, 2} {
		if c.replicas[i].Commit() < 2 || c.machines[i].counters[1] < 1 {
			t.Fatalf("replica %d commit %d: the group did not move on", i, c.replicas[i].Commit())
		}
	}
	// The new view's start-view and prepares reached the failed replica too: it took none of them.
	if !p.Failed() || p.Normal() || p.View() != 0 || p.Op() != 2 {
		t.Fatalf("failed replica moved: failed %v normal %v view %d op %d", p.Failed(), p.Normal(), p.View(), p.Op())
	}
}
