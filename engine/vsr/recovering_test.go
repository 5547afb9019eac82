package vsr

import (
	"testing"

	"github.com/ringstream/ringstream/wire"
)

// A recovering replica takes part in nothing: it votes in no view change, acknowledges no prepare and
// answers no recovery; everything it sends is its own recovery.
func TestRecovering_VotesAndAcknowledgesNothing(t *testing.T) {
	c := commitOp3OnTwo(t)
	c.wipe(2)
	r := c.replicas[2]
	if !r.Recovering() || r.Normal() || r.Op() != 0 {
		t.Fatalf("wiped replica: recovering %v normal %v op %d", r.Recovering(), r.Normal(), r.Op())
	}
	r.Ready() // its recovery messages
	entries := chain(0, 0, 1, 1)
	for _, m := range []wire.VSRMessage{
		{Command: wire.CommandVSRStartViewChange, Replica: 1, View: 1},
		{Command: wire.CommandVSRDoViewChange, Replica: 0, View: 2, LogView: 1, Op: 1, Checksum: entries[0].Checksum,
			Entries: entries},
		{Command: wire.CommandVSRStartView, Replica: 1, View: 1, LogView: 1, Op: 1, Checksum: entries[0].Checksum,
			Entries: entries},
		{Command: wire.CommandVSRPrepare, Replica: 0, View: 0, Op: 1, Entries: entries},
		{Command: wire.CommandVSRRecovery, Replica: 1, View: 0, Request: 99},
		{Command: wire.CommandVSRRecoveryResponse, Replica: 0, View: 0, Request: 12345},
	} {
		r.Step(&m)
		r.CheckInvariants()
	}
	r.OnCommitEntry(0, 3)
	r.OnPrimarySilent()
	if err := r.Propose(1, 9, counterOp(1, 1)); err != ErrNotPrimary {
		t.Fatalf("propose while recovering: %v", err)
	}
	for round := 0; round < 3; round++ {
		fx := r.Ready()
		if fx.PersistID != 0 {
			if !fx.Superblock.Recovering {
				t.Fatal("a recovering replica persisted a superblock that does not say so")
			}
			r.Advance(fx.PersistID)
		}
		for _, env := range fx.Messages {
			if env.Msg.Command != wire.CommandVSRRecovery {
				t.Fatalf("recovering replica sent %v", env.Msg.Command)
			}
		}
	}
	if !r.Recovering() || r.Op() != 0 || r.Commit() != 0 {
		t.Fatalf("after the messages: recovering %v op %d commit %d", r.Recovering(), r.Op(), r.Commit())
	}
}

// A replica wiped after the group checkpointed gets the checkpoint first, then the primary's log
// above it, and ends with the same state as the others; its superblock says recovering until then.
func TestRecovering_ThroughTheCheckpoint(t *testing.T) {
	c := newCluster(t, 3)
	for req := uint64(1); req <= 20; req++ {
		if err := c.propose(1, req, 1, 1); err != nil {
			t.Fatal(err)
		}
	}
	c.heartbeat()
	if c.replicas[0].SnapshotOp() == 0 {
		t.Fatal("no checkpoint taken")
	}
	c.wipe(1)
	c.tick(10)
	c.heartbeat()
	r := c.replicas[1]
	if !r.Normal() || r.Stats().Recoveries != 1 || r.Stats().SnapshotsIn != 1 {
		t.Fatalf("normal %v, %d recoveries, %d snapshots in", r.Normal(), r.Stats().Recoveries, r.Stats().SnapshotsIn)
	}
	if r.Commit() != 20 || c.machines[1].counters[1] != 20 || r.Digest() != c.replicas[0].Digest() {
		t.Fatalf("commit %d counter %d: want 20 and the primary's digest", r.Commit(), c.machines[1].counters[1])
	}
	sb, err := DecodeSuperblock(c.disks[1].superblocks[0])
	if err != nil || sb.Recovering || sb.Op != 20 {
		t.Fatalf("superblock after recovery %+v %v", sb, err)
	}
	// The recovered replica acknowledges again: with replica 2 cut off, only replica 1 can make the
	// quorum of the next op.
	c.cut = func(from, to uint8) bool { return from == 2 || to == 2 }
	if err := c.propose(1, 21, 1, 1); err != nil {
		t.Fatal(err)
	}
	if c.replicas[0].Commit() != 21 {
		t.Fatalf("primary commit %d, want 21 with the recovered replica's acknowledgement", c.replicas[0].Commit())
	}
}

// A recovery waits for a quorum of other members including the latest view's primary: with the
// primary down, a three-replica group's wiped member stays recovering, then completes once the others
// have moved to a view whose primary answers.
func TestRecovering_WaitsForTheLatestPrimary(t *testing.T) {
	c := commitOp3OnTwo(t)
	c.wipe(1)
	c.down[0] = true
	c.tick(30)
	if !c.replicas[1].Recovering() {
		t.Fatal("recovered without the primary of the latest view")
	}
	c.restart(0)
	c.replicas[2].OnPrimarySilent() // its heartbeat timeout: replica 0 was silent
	c.tick(150)
	c.heartbeat()
	r := c.replicas[1]
	if !r.Normal() || r.Op() < 3 || r.View() == 0 {
		t.Fatalf("normal %v op %d view %d: want recovered into a later view with op 3", r.Normal(), r.Op(), r.View())
	}
}
