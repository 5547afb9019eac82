package vsr

import (
	"encoding/binary"
	"testing"

	"github.com/ringstream/ringstream/wire"
)

func TestNormal_OpCommitsOnQuorumAndAppliesEverywhere(t *testing.T) {
	c := newCluster(t, 3)
	for req := uint64(1); req <= 5; req++ {
		if err := c.propose(7, req, 7, 1); err != nil {
			t.Fatalf("propose %d: %v", req, err)
		}
	}
	c.heartbeat()
	for i, r := range c.replicas {
		if r.Commit() != 5 {
			t.Errorf("replica %d commit %d, want 5", i, r.Commit())
		}
		if c.machines[i].counters[7] != 5 {
			t.Errorf("replica %d counter %d, want 5", i, c.machines[i].counters[7])
		}
	}
	if len(c.replies) != 5 {
		t.Fatalf("%d replies, want 5", len(c.replies))
	}
	for i, rep := range c.replies {
		if got := binary.LittleEndian.Uint64(rep.Result); got != uint64(i+1) {
			t.Errorf("reply %d result %d, want %d", i, got, i+1)
		}
	}
}

func TestPropose_RefusedOffPrimaryAndWhenPipelineFull(t *testing.T) {
	c := newCluster(t, 3)
	if err := c.replicas[1].Propose(1, 1, counterOp(1, 1)); err != ErrNotPrimary {
		t.Fatalf("backup propose: %v, want ErrNotPrimary", err)
	}
	// Cut the primary off so nothing commits; the pipeline fills.
	c.cut = func(from, to uint8) bool { return from == 0 || to == 0 }
	for req := uint64(1); req <= 4; req++ {
		if err := c.replicas[0].Propose(1, req, counterOp(1, 1)); err != nil {
			t.Fatalf("propose %d: %v", req, err)
		}
	}
	if err := c.replicas[0].Propose(1, 5, counterOp(1, 1)); err != ErrPipelineFull {
		t.Fatalf("propose past pipeline: %v, want ErrPipelineFull", err)
	}
}

func TestClientTable_RetriedRequestAppliesOnce(t *testing.T) {
	c := newCluster(t, 3)
	if err := c.propose(9, 1, 9, 10); err != nil {
		t.Fatal(err)
	}
	// The retry of a committed request is answered from the table, not applied again.
	if err := c.propose(9, 1, 9, 10); err != nil {
		t.Fatal(err)
	}
	// A retry while in the pipeline is refused.
	c.cut = func(from, to uint8) bool { return from == 0 || to == 0 }
	if err := c.replicas[0].Propose(9, 2, counterOp(9, 10)); err != nil {
		t.Fatal(err)
	}
	if err := c.replicas[0].Propose(9, 2, counterOp(9, 10)); err != ErrStaleRequest {
		t.Fatalf("in-flight retry: %v, want ErrStaleRequest", err)
	}
	if err := c.replicas[0].Propose(9, 0, counterOp(9, 10)); err != ErrStaleRequest {
		t.Fatalf("older request: %v, want ErrStaleRequest", err)
	}
	c.cut = nil
	c.tick(5)
	c.heartbeat()
	for i, m := range c.machines {
		if m.counters[9] != 20 {
			t.Errorf("replica %d counter %d, want 20 (each request once)", i, m.counters[9])
		}
	}
	if len(c.replies) < 3 || binary.LittleEndian.Uint64(c.replies[1].Result) != 10 {
		t.Fatalf("retry reply %v, want the cached result 10", c.replies)
	}
}

func TestPrepareOK_LeavesOnlyAfterAdvance(t *testing.T) {
	c := newCluster(t, 3)
	p, b := c.replicas[0], c.replicas[1]
	if err := p.Propose(1, 1, counterOp(1, 1)); err != nil {
		t.Fatal(err)
	}
	fx := p.Ready()
	var prepare wire.VSRMessage
	for _, env := range fx.Messages {
		if env.To == 1 {
			prepare = cloneMessage(&env.Msg)
		}
	}
	b.Step(&prepare)
	fx = b.Ready()
	if fx.PersistID == 0 || len(fx.Entries) != 1 {
		t.Fatalf("backup persist %d with %d entries, want one entry to persist", fx.PersistID, len(fx.Entries))
	}
	if len(fx.Messages) != 0 {
		t.Fatalf("backup sent %d messages before its entry was durable", len(fx.Messages))
	}
	id := fx.PersistID
	b.Advance(id)
	fx = b.Ready()
	if len(fx.Messages) != 1 || fx.Messages[0].Msg.Command != wire.CommandVSRPrepareOK || fx.Messages[0].Msg.Op != 1 {
		t.Fatalf("after Advance: %+v, want one prepare_ok for op 1", fx.Messages)
	}
}

func TestPrimaryCommit_WaitsForItsOwnDurability(t *testing.T) {
	c := newCluster(t, 3)
	c.autoPersist = false
	p := c.replicas[0]
	if err := p.Propose(1, 1, counterOp(1, 1)); err != nil {
		t.Fatal(err)
	}
	pfx := p.Ready()
	id := pfx.PersistID
	for _, env := range pfx.Messages {
		env.Msg = cloneMessage(&env.Msg)
		c.replicas[env.To].Step(&env.Msg)
	}
	for i := 1; i < 3; i++ {
		fx := c.replicas[i].Ready()
		c.replicas[i].Advance(fx.PersistID)
		for _, env := range c.replicas[i].Ready().Messages {
			env.Msg = cloneMessage(&env.Msg)
			p.Step(&env.Msg)
		}
	}
	if p.Commit() != 0 {
		t.Fatalf("primary committed op %d before its own persist was durable", p.Commit())
	}
	p.Advance(id)
	if p.Commit() != 1 {
		t.Fatalf("primary commit %d after Advance, want 1", p.Commit())
	}
}

func TestRepair_GapIsFilledByRequestPrepare(t *testing.T) {
	c := newCluster(t, 3)
	c.cut = func(from, to uint8) bool { return to == 2 || from == 2 }
	for req := uint64(1); req <= 3; req++ {
		if err := c.propose(1, req, 1, 1); err != nil {
			t.Fatal(err)
		}
	}
	c.cut = nil
	if c.replicas[2].Op() != 0 {
		t.Fatalf("cut replica has op %d", c.replicas[2].Op())
	}
	c.heartbeat() // commit 3 > op 0: replica 2 asks for ops from 1
	c.heartbeat()
	if c.replicas[2].Commit() != 3 || c.machines[2].counters[1] != 3 {
		t.Fatalf("repaired replica commit %d counter %d, want 3 and 3", c.replicas[2].Commit(),
			c.machines[2].counters[1])
	}
}

func TestRepair_FarBehindReplicaGetsCheckpoint(t *testing.T) {
	c := newCluster(t, 3)
	c.cut = func(from, to uint8) bool { return to == 2 || from == 2 }
	for req := uint64(1); req <= 20; req++ {
		if err := c.propose(1, req, 1, 1); err != nil {
			t.Fatal(err)
		}
		c.heartbeat()
	}
	if c.replicas[0].SnapshotOp() == 0 {
		t.Fatal("primary took no checkpoint")
	}
	c.cut = nil
	c.heartbeat()
	c.tick(4)
	c.heartbeat()
	r := c.replicas[2]
	if r.Stats().SnapshotsIn == 0 {
		t.Fatal("far-behind replica installed no snapshot")
	}
	if r.Commit() != 20 || c.machines[2].counters[1] != 20 {
		t.Fatalf("replica 2 commit %d counter %d, want 20 and 20", r.Commit(), c.machines[2].counters[1])
	}
	if r.Digest() != c.replicas[0].Digest() {
		t.Fatal("digests differ at the same commit")
	}
}

// Found by the three-node metagroup test: the first prepares were lost (links not up yet) and no other
// op followed, so no backup ever saw a gap to repair. The prepare timeout must get them there.
func TestPrepareTimeout_LostPrepareWithNothingAfterItStillCommits(t *testing.T) {
	c := newCluster(t, 3)
	c.cut = func(from, to uint8) bool { return true }
	if err := c.replicas[0].Propose(1, 1, counterOp(1, 1)); err != nil {
		t.Fatal(err)
	}
	c.deliverAll()
	c.cut = nil
	c.tick(10)
	if c.replicas[0].Commit() != 1 {
		t.Fatalf("primary commit %d after the prepare timeout, want 1", c.replicas[0].Commit())
	}
}

// Found by the simulator (seeds 15327, 25780): a fresh primary sent a prepare, crashed before anything
// was durable, came back fresh as primary of view 0 and put another op at the same op number, which a
// backup holding the first prepare then committed. Nothing may leave a fresh replica before its first
// superblock is durable.
func TestFresh_NothingLeavesBeforeTheFirstSuperblockIsDurable(t *testing.T) {
	r, err := New(testConfig(3, 0), newCounterMachine(), Durable{Fresh: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Propose(1, 1, counterOp(1, 1)); err != nil {
		t.Fatal(err)
	}
	fx := r.Ready()
	if fx.PersistID == 0 || len(fx.Messages) != 0 {
		t.Fatalf("persist %d, %d messages: the prepares must wait for the first persist", fx.PersistID, len(fx.Messages))
	}
	r.Advance(fx.PersistID)
	if fx := r.Ready(); len(fx.Messages) != 2 || fx.Messages[0].Msg.Command != wire.CommandVSRPrepare {
		t.Fatalf("after the first persist: %+v, want the two prepares", fx.Messages)
	}
}

// The primary's persist of an op overlaps its backups': once its first superblock is durable, the
// effects of a proposal carry the op's persist and both prepares together, so the driver starts the
// disk write and the sends at once (the op commits when the primary's persist and one backup's
// prepare-ok are in, not after the primary's persist and then a round trip and a backup's persist).
func TestPrimary_PreparesLeaveWithItsOwnPersist(t *testing.T) {
	r, err := New(testConfig(3, 0), newCounterMachine(), Durable{Fresh: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Propose(1, 1, counterOp(1, 1)); err != nil {
		t.Fatal(err)
	}
	r.Advance(r.Ready().PersistID)
	r.Ready()
	if err := r.Propose(1, 2, counterOp(1, 1)); err != nil {
		t.Fatal(err)
	}
	fx := r.Ready()
	if fx.PersistID == 0 || len(fx.Messages) != 2 || fx.Messages[0].Msg.Command != wire.CommandVSRPrepare ||
		fx.Messages[0].Msg.Op != 2 {
		t.Fatalf("persist %d with %d messages, want op 2's persist and its two prepares in one Ready",
			fx.PersistID, len(fx.Messages))
	}
}

// Found by the simulator (seeds 302403, 304439): a backup the primary needs for its quorum fell behind
// the primary's checkpoint, dropped the newest prepares as a gap and installed the checkpoint instead.
// The primary re-sends from the backup's last acknowledgement, below that checkpoint, and the backup
// dropped those prepares without a word: it was at the commit point, so it asked for nothing either,
// and the group never committed again. It must answer with where its log now starts.
func TestPrepareTimeout_BackupPastItsLastAckByACheckpointCatchesUp(t *testing.T) {
	c := newCluster(t, 3)
	for req := uint64(1); req <= 2; req++ {
		if err := c.propose(1, req, 1, 1); err != nil {
			t.Fatal(err)
		}
	}
	c.heartbeat()
	// Replica 2 misses ops 3..16; the primary checkpoints at 8 and 16 and keeps its log from 9.
	c.cut = func(from, to uint8) bool { return from == 2 || to == 2 }
	for req := uint64(3); req <= 16; req++ {
		if err := c.propose(1, req, 1, 1); err != nil {
			t.Fatal(err)
		}
	}
	p := c.replicas[0]
	if p.Commit() != 16 || p.SnapshotOp() != 16 {
		t.Fatalf("primary commit %d checkpoint %d, want 16 and 16", p.Commit(), p.SnapshotOp())
	}
	// Replica 1 goes down: ops 17..20 need replica 2. Their prepares reach it all at once, past a gap.
	c.cut, c.down[1] = nil, true
	for req := uint64(17); req <= 20; req++ {
		if err := p.Propose(1, req, counterOp(1, 1)); err != nil {
			t.Fatal(err)
		}
	}
	c.deliverAll()
	r2 := c.replicas[2]
	if r2.Stats().SnapshotsIn != 1 || r2.Op() != 16 || r2.Commit() != 16 {
		t.Fatalf("replica 2 snapshots in %d op %d commit %d, want the checkpoint at 16 installed",
			r2.Stats().SnapshotsIn, r2.Op(), r2.Commit())
	}
	c.tick(20)
	c.heartbeat()
	if p.Commit() != 20 || r2.Commit() != 20 || c.machines[2].counters[1] != 20 {
		t.Fatalf("primary commit %d, replica 2 commit %d counter %d; want 20: the backup never caught up",
			p.Commit(), r2.Commit(), c.machines[2].counters[1])
	}
}
