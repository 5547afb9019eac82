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
	sb, err := DecodeSuperblock(c.disks[1].newest())
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

// recoveringReplica is replica 2 of three, wiped and recovering with nonce 77, its first messages taken.
func recoveringReplica(t *testing.T) *Replica {
	t.Helper()
	d := formatted(2, true)
	dur, _, err := Recover(d.superblocks, d.snapshots, d.log)
	if err != nil {
		t.Fatal(err)
	}
	dur.RecoveryNonce = 77
	r, err := New(testConfig(3, 2), newCounterMachine(), dur)
	if err != nil {
		t.Fatal(err)
	}
	r.Ready()
	return r
}

func response(from uint8, view uint32, nonce uint64, log []wire.VSREntry) wire.VSRMessage {
	m := wire.VSRMessage{Command: wire.CommandVSRRecoveryResponse, Replica: from, View: view, Request: nonce}
	if log != nil {
		m.LogView, m.Op, m.Entries = view, uint64(len(log)), log
		m.Checksum = log[len(log)-1].Checksum
	}
	return m
}

// The answers that complete a recovery: a quorum of other members, with the latest view's primary and
// its log among them, all to this recovery's nonce.
func TestRecovering_CompletesOnlyOnAQuorumWithTheLatestPrimary(t *testing.T) {
	log := chain(0, 0, 3, 4)
	cases := []struct {
		name      string
		responses []wire.VSRMessage
		want      bool // recovered
	}{
		{"the old primary alone", []wire.VSRMessage{response(0, 3, 77, log)}, false},
		{"latest view's primary answered from an older view", []wire.VSRMessage{response(0, 4, 77, nil),
			response(1, 3, 77, nil)}, false},
		{"a quorum to another nonce", []wire.VSRMessage{response(0, 4, 78, nil), response(1, 4, 78, log)}, false},
		{"a quorum of old views, the latest primary not among them", []wire.VSRMessage{response(0, 3, 77, log),
			response(1, 7, 77, nil)}, false},
		{"a quorum with the latest primary's log", []wire.VSRMessage{response(0, 4, 77, nil),
			response(1, 4, 77, log)}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := recoveringReplica(t)
			for i := range c.responses {
				r.Step(&c.responses[i])
				r.CheckInvariants()
			}
			if got := r.Normal(); got != c.want {
				t.Fatalf("recovered %v (view %d op %d), want %v; drops %v", got, r.View(), r.Op(), c.want,
					r.Stats().Dropped)
			}
			if c.want && (r.View() != 4 || r.Op() != 3 || r.Recovering()) {
				t.Fatalf("recovered to view %d op %d, want view 4 op 3", r.View(), r.Op())
			}
		})
	}
}

// Only a replica in normal status answers a recovery: one in a view change does not know which view
// the group is in.
func TestRecovery_AnsweredOnlyInNormalStatus(t *testing.T) {
	r := mustNew(t, 3, 1)
	rec := wire.VSRMessage{Command: wire.CommandVSRRecovery, Replica: 2, Request: 5}
	r.Step(&rec)
	fx := r.Ready()
	if len(fx.Messages) != 1 || fx.Messages[0].Msg.Command != wire.CommandVSRRecoveryResponse ||
		fx.Messages[0].Msg.Request != 5 || fx.Messages[0].Msg.Op != 0 {
		t.Fatalf("normal backup answered %+v, want one response to nonce 5 without a log", fx.Messages)
	}
	r.OnPrimarySilent()
	r.Advance(r.Ready().PersistID)
	r.Ready()
	r.Step(&rec)
	for _, env := range r.Ready().Messages {
		if env.Msg.Command == wire.CommandVSRRecoveryResponse {
			t.Fatal("a replica in a view change answered a recovery")
		}
	}
}

// A replica that restarts in the middle of its recovery (its own first superblock written, no answer
// in yet) recovers again: every superblock it writes while recovering says so.
func TestRecovering_RestartInTheMiddleRecoversAgain(t *testing.T) {
	c := commitOp3OnTwo(t)
	c.wipe(1)
	c.cut = func(from, to uint8) bool { return to == 1 } // no answer reaches it
	c.tick(2)
	sb, err := DecodeSuperblock(c.disks[1].newest())
	if err != nil || sb.Sequence <= FormatSequence || !c.replicas[1].Recovering() {
		t.Fatalf("superblock %+v %v: want the recovering replica's own superblock written", sb, err)
	}
	c.down[1] = true
	c.restart(1)
	if !c.replicas[1].Recovering() {
		t.Fatalf("restarted in the middle of its recovery: normal %v at op %d, want recovering again",
			c.replicas[1].Normal(), c.replicas[1].Op())
	}
	c.cut = nil
	c.tick(10)
	if !c.replicas[1].Normal() || c.replicas[1].Op() != 3 {
		t.Fatalf("after the restart: normal %v op %d, want recovered at op 3", c.replicas[1].Normal(), c.replicas[1].Op())
	}
}
