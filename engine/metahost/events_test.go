package metahost

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"runtime"
	"testing"

	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/engine/vsr"
	"github.com/ringstream/ringstream/ring"
	"github.com/ringstream/ringstream/shard"
	"github.com/ringstream/ringstream/wire"
)

// backupGroup opens node 2's replica (member 1, a backup of view 0) on a formatted directory, with no
// shard: the test calls its events itself.
func backupGroup(t *testing.T, grace uint64) *Group {
	t.Helper()
	dir := t.TempDir()
	if err := Format(FormatConfig{Dir: dir, Cluster: 42, Node: 2, Replica: 1}); err != nil {
		t.Fatal(err)
	}
	members := []shard.Member{{Index: 0, Node: 1}, {Index: 1, Node: 2}, {Index: 2, Node: 3}}
	g, err := New(Config{Dir: dir, Cluster: 42, Node: 2, Members: members,
		VSR: vsr.DefaultConfig(3, 1), EagerFailoverGraceTicks: grace,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	if st := g.Status(); !st.Normal || st.Primary {
		t.Fatalf("replica 1 of view 0: %+v, want a normal backup", st)
	}
	return g
}

// A backup whose link to the primary's node went down and stayed down for the grace starts a view
// change at the tick the grace ends, not before; a link that comes back within the grace cancels it;
// a link to another backup's node changes nothing.
func TestMetaGroup_EagerFailoverAfterTheGrace(t *testing.T) {
	const grace = 5
	g := backupGroup(t, grace)
	tick := uint64(100)
	g.OnTick(tick)
	g.OnLinkDown(3) // the other backup
	g.OnLinkDown(1) // the primary
	g.OnLinkUp(1)   // back within the grace
	for i := 0; i < 2*grace; i++ {
		tick++
		g.OnTick(tick)
	}
	if !g.Status().Normal {
		t.Fatal("view change although the primary's link came back within the grace")
	}
	g.OnLinkDown(1)
	for i := 1; i < grace; i++ {
		tick++
		g.OnTick(tick)
		if !g.Status().Normal {
			t.Fatalf("view change %d ticks into a grace of %d", i, grace)
		}
	}
	tick++
	g.OnTick(tick)
	if st := g.Status(); st.Normal || st.View != 1 {
		t.Fatalf("after the grace: %+v, want a view change to view 1", st)
	}
}

func TestMetaGroup_EagerFailoverGraceValidated(t *testing.T) {
	dir := t.TempDir()
	if err := Format(FormatConfig{Dir: dir, Cluster: 42, Node: 1, Replica: 0}); err != nil {
		t.Fatal(err)
	}
	members := []shard.Member{{Index: 0, Node: 1}, {Index: 1, Node: 2}, {Index: 2, Node: 3}}
	cfg := Config{Dir: dir, Cluster: 42, Node: 1, Members: members, VSR: vsr.DefaultConfig(3, 0),
		EagerFailoverGraceTicks: 201}
	if _, err := New(cfg); !errors.Is(err, ErrConfig) {
		t.Fatalf("grace past the view change timeout: %v, want ErrConfig", err)
	}
}

// turnSender is shard 0 as a test drives it: a real ring, frames recorded instead of sent.
type turnSender struct {
	shard.Sender // methods the test does not use
	rg           ring.Ring
	frames       []sentFrame
}

type sentFrame struct {
	node  uint16
	frame []byte
}

func (s *turnSender) Ring() ring.Ring { return s.rg }
func (s *turnSender) SendFrame(node uint16, frame []byte) error {
	s.frames = append(s.frames, sentFrame{node, bytes.Clone(frame)})
	return nil
}

// A proposal and the persist completions it causes are handled in the loop turns they arrive in, with
// no tick between: the proposal's prepares leave at the next turn, the backups' prepare-oks commit it,
// and the reply comes once the primary's own persist completed, all without OnTick.
func TestMetaGroup_ProposalCommitsBetweenTicks(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	dir := t.TempDir()
	if err := Format(FormatConfig{Dir: dir, Cluster: 42, Node: 1, Replica: 0}); err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	members := []shard.Member{{Index: 0, Node: 1}, {Index: 1, Node: 2}, {Index: 2, Node: 3}}
	g, err := New(Config{Dir: dir, Cluster: 42, Node: 1, Members: members,
		VSR: vsr.DefaultConfig(3, 0), Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	rg, err := ring.New(ring.Config{Entries: 64, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	defer rg.Close()
	s := &turnSender{rg: rg}
	g.Attach(s)
	woken := 0
	g.SetWake(func() { woken++ })
	turn := func() { // one loop turn: completions, then the turn hook
		for rg.InFlight() > 0 {
			if err := rg.Wait(1); err != nil {
				t.Fatal(err)
			}
			rg.Dispatch()
		}
		g.OnTurn()
	}
	g.OnTick(1) // the only tick: the ring is attached, the fresh replica's first superblock persists
	turn()
	if st := g.Status(); !st.Primary {
		t.Fatalf("replica 0 of view 0: %+v, want primary", st)
	}
	s.frames = nil
	done := g.Propose(9, 1, meta.AppendOp(nil, meta.RegisterNode{Node: 600, Address: "10.0.9.1:7000"}))
	if woken != 1 {
		t.Fatalf("propose woke the shard %d times, want 1", woken)
	}
	turn()
	var prepare wire.VSRMessage
	for _, f := range s.frames {
		h, body, err := wire.ParseFrame(f.frame)
		if err != nil {
			t.Fatal(err)
		}
		var m wire.VSRMessage
		if wire.DecodeVSR(&h, body, &m) == nil && m.Command == wire.CommandVSRPrepare && f.node == 2 {
			prepare = m
		}
	}
	if prepare.Op != 1 {
		t.Fatalf("frames %d: no prepare of op 1 to node 2 in the turn after the proposal", len(s.frames))
	}
	ok := wire.VSRMessage{Command: wire.CommandVSRPrepareOK, Replica: 1, View: 0, Op: 1,
		Checksum: prepare.Entries[0].Checksum}
	frame := wire.AppendVSRFrame(nil, wire.From{Cluster: 42, Node: 2}, shard.MetadataGroupID, &ok)
	h, body, err := wire.ParseFrame(frame)
	if err != nil {
		t.Fatal(err)
	}
	g.OnFrame(2, &h, body)
	turn()
	select {
	case res := <-done:
		if res.Err != nil || res.Op != 1 {
			t.Fatalf("result %+v, want op 1 committed", res)
		}
	default:
		t.Fatalf("op 1 not committed after the prepare-ok and the primary's persist: %+v", g.Status())
	}
}
