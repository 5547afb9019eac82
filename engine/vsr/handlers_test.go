package vsr

import (
	"testing"

	"github.com/cespare/xxhash/v2"
	"github.com/ringstream/ringstream/wire"
)

// Each handler's guards: a message it must decline is counted under its reason and changes nothing.

func TestOnPrepare_Guards(t *testing.T) {
	good := chain(0, 0, 2, 0)
	cases := []struct {
		name   string
		msg    wire.VSRMessage
		reason string
	}{
		{"older view", wire.VSRMessage{Command: wire.CommandVSRPrepare, Replica: 0, View: 0, Op: 1,
			Entries: good[:1]}, "prepare: older view"},
		{"malformed: op differs from entry", wire.VSRMessage{Command: wire.CommandVSRPrepare, Replica: 0, View: 3,
			Op: 2, Entries: good[:1]}, "prepare: malformed"},
		{"entry checksum", wire.VSRMessage{Command: wire.CommandVSRPrepare, Replica: 0, View: 3, Op: 1,
			Entries: []wire.VSREntry{{Op: 1, Checksum: 5}}}, "prepare: entry checksum"},
		{"gap", wire.VSRMessage{Command: wire.CommandVSRPrepare, Replica: 0, View: 3, Op: 2,
			Entries: good[1:2]}, "prepare: gap"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := mustNew(t, 3, 1)
			// Put the backup in view 3 (primary replica 0) with an empty log.
			sv := wire.VSRMessage{Command: wire.CommandVSRStartView, Replica: 0, View: 3, LogView: 3}
			r.Step(&sv)
			if c.name == "older view" {
				c.msg.View = 2
			}
			r.Step(&c.msg)
			if r.Stats().Dropped[c.reason] != 1 || r.Op() != 0 {
				t.Fatalf("drops %v op %d, want one %q and no append", r.Stats().Dropped, r.Op(), c.reason)
			}
		})
	}
}

func TestOnPrepare_NewerViewAsksForStartView(t *testing.T) {
	r := mustNew(t, 3, 2)
	e := chain(0, 0, 1, 4)
	m := wire.VSRMessage{Command: wire.CommandVSRPrepare, Replica: 1, View: 4, Op: 1, Entries: e}
	r.Step(&m)
	fx := r.Ready()
	if len(fx.Messages) != 1 || fx.Messages[0].Msg.Command != wire.CommandVSRRequestStartView ||
		fx.Messages[0].To != 1 || fx.Messages[0].Msg.View != 4 {
		t.Fatalf("messages %+v, want a request_start_view for view 4 to replica 1", fx.Messages)
	}
}

func TestOnPrepareOK_Guards(t *testing.T) {
	c := newCluster(t, 3)
	c.cut = func(from, to uint8) bool { return true }
	p := c.replicas[0]
	if err := p.Propose(1, 1, counterOp(1, 1)); err != nil {
		t.Fatal(err)
	}
	c.drain(0)
	head, _ := p.Head(1)
	for _, m := range []wire.VSRMessage{
		{Command: wire.CommandVSRPrepareOK, Replica: 1, View: 1, Op: 1, Checksum: head}, // other view
		{Command: wire.CommandVSRPrepareOK, Replica: 1, View: 0, Op: 2, Checksum: head}, // past op
		{Command: wire.CommandVSRPrepareOK, Replica: 1, View: 0, Op: 1, Checksum: 99},   // checksum differs
	} {
		p.Step(&m)
	}
	d := p.Stats().Dropped
	if d["prepare_ok: other view"] != 1 || d["prepare_ok: op outside the window"] != 1 ||
		d["prepare_ok: checksum differs"] != 1 || p.Commit() != 0 {
		t.Fatalf("drops %v commit %d", d, p.Commit())
	}
	ok := wire.VSRMessage{Command: wire.CommandVSRPrepareOK, Replica: 1, View: 0, Op: 1, Checksum: head}
	p.Step(&ok)
	if p.Commit() != 1 {
		t.Fatalf("commit %d after a quorum (primary durable + one backup), want 1", p.Commit())
	}
}

func TestOnRequest_StepProposesOnPrimaryOnly(t *testing.T) {
	c := newCluster(t, 3)
	m := wire.VSRMessage{Command: wire.CommandVSRRequest, Replica: 2, Client: 4, Request: 1, Payload: counterOp(4, 2)}
	c.replicas[1].Step(&m)
	if c.replicas[1].Stats().Dropped["request: not the primary"] != 1 {
		t.Fatalf("backup drops %v", c.replicas[1].Stats().Dropped)
	}
	c.replicas[0].Step(&m)
	c.deliverAll()
	c.heartbeat()
	if c.machines[2].counters[4] != 2 {
		t.Fatalf("request from a peer not applied: %v", c.machines[2].counters)
	}
}

func TestOnRequestStartView_OnlyPrimaryOfThatViewAnswers(t *testing.T) {
	c := newCluster(t, 3)
	if err := c.propose(1, 1, 1, 1); err != nil {
		t.Fatal(err)
	}
	ask := wire.VSRMessage{Command: wire.CommandVSRRequestStartView, Replica: 2, View: 0}
	c.replicas[1].Step(&ask)
	if c.replicas[1].Stats().Dropped["request_start_view: not the primary of that view"] != 1 {
		t.Fatal("backup answered a request_start_view")
	}
	c.replicas[0].Step(&ask)
	fx := c.replicas[0].Ready()
	if len(fx.Messages) != 1 || fx.Messages[0].Msg.Command != wire.CommandVSRStartView || fx.Messages[0].To != 2 ||
		fx.Messages[0].Msg.Op != 1 || len(fx.Messages[0].Msg.Entries) != 1 {
		t.Fatalf("messages %+v, want a start_view with the one-op log to replica 2", fx.Messages)
	}
}

func TestOnRequestPrepare_NothingToSendIsCounted(t *testing.T) {
	r := mustNew(t, 3, 0)
	m := wire.VSRMessage{Command: wire.CommandVSRRequestPrepare, Replica: 1, View: 0, Op: 5}
	r.Step(&m)
	if r.Stats().Dropped["request_prepare: nothing to send"] != 1 {
		t.Fatalf("drops %v", r.Stats().Dropped)
	}
}

func TestOnSnapshot_BadOrOldCheckpointIgnored(t *testing.T) {
	r := mustNew(t, 3, 1)
	junk := []byte("junk")
	bad := wire.VSRMessage{Command: wire.CommandVSRSnapshot, Replica: 0, Op: 3, Checksum: xxhash.Sum64(junk),
		Total: uint32(len(junk)), Payload: junk}
	r.Step(&bad)
	old := wire.VSRMessage{Command: wire.CommandVSRSnapshot, Replica: 0, Op: 0, Total: 1, Payload: []byte{1}}
	r.Step(&old)
	d := r.Stats().Dropped
	if d["snapshot: vsr: bad record"] != 1 || d["snapshot: not ahead of commit"] != 1 ||
		r.Commit() != 0 || r.Stats().SnapshotsRefused != 1 {
		t.Fatalf("drops %v commit %d refused %d", d, r.Commit(), r.Stats().SnapshotsRefused)
	}
}

func TestStep_SenderMustBeAPeerAndViewBelowLimit(t *testing.T) {
	r := mustNew(t, 3, 1)
	self := wire.VSRMessage{Command: wire.CommandVSRStartViewChange, Replica: 1, View: 1}
	outside := wire.VSRMessage{Command: wire.CommandVSRStartViewChange, Replica: 7, View: 1}
	limit := wire.VSRMessage{Command: wire.CommandVSRStartViewChange, Replica: 2, View: 1<<32 - 1}
	r.Step(&self)
	r.Step(&outside)
	r.Step(&limit)
	d := r.Stats().Dropped
	if d["sender not a peer"] != 2 || d["view at its limit"] != 1 || r.View() != 0 {
		t.Fatalf("drops %v view %d", d, r.View())
	}
}

func TestOnCommitEntry_BackupAppliesAndAsksForMissingOps(t *testing.T) {
	c := newCluster(t, 3)
	c.cut = func(from, to uint8) bool { return to == 2 }
	if err := c.propose(1, 1, 1, 1); err != nil {
		t.Fatal(err)
	}
	r := c.replicas[2]
	r.OnCommitEntry(0, 1)
	fx := r.Ready()
	if len(fx.Messages) != 1 || fx.Messages[0].Msg.Command != wire.CommandVSRRequestPrepare || fx.Messages[0].Msg.Op != 1 {
		t.Fatalf("messages %+v, want a request_prepare from op 1", fx.Messages)
	}
	r.OnCommitEntry(0, 1) // asked already: not again before the repair timeout
	if fx := r.Ready(); len(fx.Messages) != 0 {
		t.Fatalf("asked twice: %+v", fx.Messages)
	}
}
