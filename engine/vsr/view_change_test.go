package vsr

import (
	"testing"

	"github.com/ringstream/ringstream/wire"
)

func TestViewChange_PrimarySilentElectsNextAndCommittedOpsSurvive(t *testing.T) {
	c := newCluster(t, 3)
	for req := uint64(1); req <= 3; req++ {
		if err := c.propose(1, req, 1, 1); err != nil {
			t.Fatal(err)
		}
	}
	c.down[0] = true
	c.replicas[1].OnPrimarySilent()
	c.replicas[2].OnPrimarySilent()
	c.deliverAll()
	if c.primary() != 1 || c.replicas[1].View() != 1 {
		t.Fatalf("primary %d view %d, want replica 1 in view 1", c.primary(), c.replicas[1].View())
	}
	if err := c.propose(1, 4, 1, 1); err != nil {
		t.Fatal(err)
	}
	c.heartbeat()
	for i := 1; i < 3; i++ {
		if c.replicas[i].Commit() != 4 || c.machines[i].counters[1] != 4 {
			t.Fatalf("replica %d commit %d counter %d, want 4 and 4", i, c.replicas[i].Commit(), c.machines[i].counters[1])
		}
	}
}

// TestViewChange_LateSuspectStillCompletesWithoutTimeouts: the two backups suspect the primary a few
// milliseconds apart (each on its own eager-failover grace). The first one's start-view-change reaches the
// other while it still trusts the primary, which drops it; when the second suspects in turn, the first
// answers its start-view-change with its own once, and the view change completes without waiting for a
// repair timeout's resend (up to RepairTimeoutTicks: 200 ms at a 10 ms tick).
func TestViewChange_LateSuspectStillCompletesWithoutTimeouts(t *testing.T) {
	c := newCluster(t, 3)
	if err := c.propose(1, 1, 1, 1); err != nil {
		t.Fatal(err)
	}
	c.down[0] = true
	c.replicas[1].OnPrimarySilent()
	c.deliverAll()
	if !c.replicas[2].Normal() || c.replicas[2].View() != 0 {
		t.Fatalf("replica 2 normal %v view %d: it must still trust the primary", c.replicas[2].Normal(), c.replicas[2].View())
	}
	c.replicas[2].OnPrimarySilent()
	c.deliverAll() // no tick: no timeout may fire
	if c.primary() != 1 || c.replicas[1].View() != 1 || !c.replicas[2].Normal() || c.replicas[2].View() != 1 {
		t.Fatalf("primary %d, replica 1 view %d, replica 2 normal %v view %d: want view 1 done on both",
			c.primary(), c.replicas[1].View(), c.replicas[2].Normal(), c.replicas[2].View())
	}
	if err := c.propose(1, 2, 1, 1); err != nil {
		t.Fatal(err)
	}
	c.heartbeat()
	if c.replicas[2].Commit() != 2 {
		t.Fatalf("replica 2 commit %d, want 2", c.replicas[2].Commit())
	}
}

func TestViewChange_StalledMovesToNextView(t *testing.T) {
	c := newCluster(t, 3)
	// Replica 1 (primary of view 1) is down: the view change to view 1 stalls and moves on to view 2.
	c.down[0], c.down[1] = true, true
	c.replicas[2].OnPrimarySilent()
	c.deliverAll()
	if c.replicas[2].View() != 1 {
		t.Fatalf("view %d, want 1", c.replicas[2].View())
	}
	c.down[0] = false
	c.replicas[0] = mustNew(t, 3, 0)
	c.tick(40)
	if c.replicas[2].View() < 2 || c.primary() < 0 {
		t.Fatalf("view %d primary %d: the stalled view change did not move on and finish", c.replicas[2].View(), c.primary())
	}
}

// mustNew returns a fresh replica whose first superblock is already durable.
func mustNew(t *testing.T, n int, self uint8) *Replica {
	r, err := New(testConfig(n, self), newCounterMachine(), Durable{Fresh: true})
	if err != nil {
		t.Fatal(err)
	}
	r.Advance(r.Ready().PersistID)
	return r
}

// dvc builds a do-view-change carrying a log of ops 1..op, each entry of view views[i].
func dvc(from uint8, view, logView uint32, views []uint32, commit uint64) wire.VSRMessage {
	var entries []wire.VSREntry
	parent := uint64(0)
	for i, v := range views {
		e := wire.VSREntry{Op: uint64(i + 1), View: v, Client: uint64(from) + 1, Request: uint64(i + 1),
			Parent: parent, Body: counterOp(uint64(from), 1)}
		e.Checksum = entryChecksum(&e)
		parent = e.Checksum
		entries = append(entries, e)
	}
	return wire.VSRMessage{Command: wire.CommandVSRDoViewChange, Replica: from, View: view, LogView: logView,
		Op: uint64(len(views)), Commit: commit, Checksum: parent, Entries: entries}
}

func TestDoViewChange_HighestLogViewWinsOverLongerLog(t *testing.T) {
	// Of five, replica 0 becomes primary of view 5. Replica 1 reports a long log from view 1, replica
	// 2 a shorter one from view 2: the view-2 log wins.
	r := mustNew(t, 5, 0)
	r.startViewChange(5)
	long := dvc(1, 5, 1, []uint32{1, 1, 1, 1}, 0)
	short := dvc(2, 5, 2, []uint32{1, 2}, 0)
	r.Step(&long)
	if r.Normal() {
		t.Fatal("completed the view change with two of five logs")
	}
	r.Step(&short)
	if !r.IsPrimary() || r.Op() != 2 {
		t.Fatalf("primary %v op %d, want primary with the view-2 log of 2 ops", r.IsPrimary(), r.Op())
	}
	e, _ := r.Entry(2)
	if e.View != 2 {
		t.Fatalf("entry 2 from view %d, want 2", e.View)
	}
}

func TestDoViewChange_SameLogViewLongerOpWins(t *testing.T) {
	r := mustNew(t, 3, 0)
	r.startViewChange(3)
	a := dvc(1, 3, 2, []uint32{2, 2, 2}, 0)
	r.Step(&a)
	if !r.IsPrimary() || r.Op() != 3 {
		t.Fatalf("primary %v op %d, want the 3-op log", r.IsPrimary(), r.Op())
	}
}

func TestDoViewChange_BrokenChainIgnored(t *testing.T) {
	r := mustNew(t, 3, 0)
	r.startViewChange(3)
	m := dvc(1, 3, 2, []uint32{2, 2}, 0)
	m.Entries[1].Body = counterOp(99, 99) // checksum no longer matches
	r.Step(&m)
	if r.Normal() {
		t.Fatal("completed the view change on a log with a broken chain")
	}
	if r.Stats().Dropped["do_view_change: log: broken chain"] != 1 {
		t.Fatalf("drops %v", r.Stats().Dropped)
	}
}

func TestStartViewChange_NormalBackupIgnoresHigherViewPrimaryJoins(t *testing.T) {
	r := mustNew(t, 3, 1)
	m := wire.VSRMessage{Command: wire.CommandVSRStartViewChange, Replica: 2, View: 5}
	r.Step(&m)
	if !r.Normal() || r.View() != 0 {
		t.Fatalf("normal %v view %d: one replica's suspicion moved a backup", r.Normal(), r.View())
	}
	p := mustNew(t, 3, 0)
	p.Step(&m)
	if p.Normal() || p.View() != 5 {
		t.Fatalf("primary normal %v view %d: it must join the higher view", p.Normal(), p.View())
	}
}

func TestStartViewChange_QuorumSendsDoViewChangeAfterDurable(t *testing.T) {
	r := mustNew(t, 3, 2) // primary of view 1 is replica 1
	r.OnPrimarySilent()
	fx := r.Ready()
	if fx.PersistID == 0 || fx.Superblock.View != 1 || len(fx.Messages) != 0 {
		t.Fatalf("persist %d view %d msgs %d: the new view must be durable before any message",
			fx.PersistID, fx.Superblock.View, len(fx.Messages))
	}
	r.Advance(fx.PersistID)
	m := wire.VSRMessage{Command: wire.CommandVSRStartViewChange, Replica: 0, View: 1}
	r.Step(&m)
	fx = r.Ready()
	var dvcTo []uint8
	for _, env := range fx.Messages {
		if env.Msg.Command == wire.CommandVSRDoViewChange {
			dvcTo = append(dvcTo, env.To)
		}
	}
	if len(dvcTo) != 1 || dvcTo[0] != 1 {
		t.Fatalf("do_view_change sent to %v, want [1]", dvcTo)
	}
}

func TestQuorumLost_PrimaryStepsDown(t *testing.T) {
	r := mustNew(t, 3, 0)
	r.OnQuorumLost()
	if r.IsPrimary() || r.View() != 1 {
		t.Fatalf("primary %v view %d after quorum lost", r.IsPrimary(), r.View())
	}
}

func TestStartView_BackupInstallsLogAndAcks(t *testing.T) {
	r := mustNew(t, 3, 2)
	m := dvc(1, 4, 4, []uint32{1, 4}, 1)
	m.Command = wire.CommandVSRStartView
	r.Step(&m)
	if !r.Normal() || r.View() != 4 || r.Op() != 2 || r.Commit() != 1 {
		t.Fatalf("normal %v view %d op %d commit %d", r.Normal(), r.View(), r.Op(), r.Commit())
	}
	fx := r.Ready()
	r.Advance(fx.PersistID)
	fx = r.Ready()
	found := false
	for _, env := range fx.Messages {
		if env.Msg.Command == wire.CommandVSRPrepareOK && env.To == 1 && env.Msg.Op == 2 {
			found = true
		}
	}
	if !found {
		t.Fatalf("no prepare_ok for op 2 to the new primary: %+v", fx.Messages)
	}
}

func TestRestart_PrimaryRejoinsThroughViewChangeWithItsLog(t *testing.T) {
	c := newCluster(t, 3)
	for req := uint64(1); req <= 12; req++ {
		if err := c.propose(1, req, 1, 1); err != nil {
			t.Fatal(err)
		}
	}
	c.heartbeat()
	c.restart(0)
	r := c.replicas[0]
	if r.IsPrimary() || r.View() != 1 {
		t.Fatalf("restarted primary: primary %v view %d, want a view change to view 1", r.IsPrimary(), r.View())
	}
	// The superblock's commit may lag the commit heard later; what it names is applied again.
	if r.Commit() < 8 || c.machines[0].counters[1] != r.Commit() {
		t.Fatalf("restarted commit %d counter %d, want the checkpoint (8) and the log applied", r.Commit(),
			c.machines[0].counters[1])
	}
	c.replicas[1].OnPrimarySilent()
	c.replicas[2].OnPrimarySilent()
	c.deliverAll()
	if err := c.propose(1, 13, 1, 1); err != nil {
		t.Fatal(err)
	}
	c.heartbeat()
	for i, m := range c.machines {
		if m.counters[1] != 13 {
			t.Errorf("replica %d counter %d, want 13", i, m.counters[1])
		}
	}
}
