package shard_test

import (
	"bytes"
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringstream/ringstream/ring"
	"github.com/ringstream/ringstream/shard"
	"github.com/ringstream/ringstream/shard/shardtest"
	"github.com/ringstream/ringstream/wire"
)

// hostGroup is a test group that implements every optional host interface and records what it hears.
// Its fields are written on the shard goroutine and read by the test under mu.
type hostGroup struct {
	*shardtest.Group
	mu       sync.Mutex
	turns    int
	onTurn   func(g *hostGroup) // run from OnTurn when set (shard goroutine)
	ups      []uint16
	downs    []uint16
	drained  []uint16
	sent     []error // DataSent outcomes in order
	sentTags []uint64
	stops    int
}

func (g *hostGroup) OnTurn() {
	g.mu.Lock()
	g.turns++
	f := g.onTurn
	g.mu.Unlock()
	if f != nil {
		f(g)
	}
}

func (g *hostGroup) OnLinkUp(node uint16) { g.mu.Lock(); g.ups = append(g.ups, node); g.mu.Unlock() }
func (g *hostGroup) OnLinkDown(node uint16) {
	g.mu.Lock()
	g.downs = append(g.downs, node)
	g.mu.Unlock()
}
func (g *hostGroup) OnOutboxDrained(node uint16) {
	g.mu.Lock()
	g.drained = append(g.drained, node)
	g.mu.Unlock()
}
func (g *hostGroup) DataSent(node uint16, tag uint64, err error) {
	g.mu.Lock()
	g.sent = append(g.sent, err)
	g.sentTags = append(g.sentTags, tag)
	g.mu.Unlock()
}
func (g *hostGroup) OnStop() { g.mu.Lock(); g.stops++; g.mu.Unlock() }

func (g *hostGroup) read(f func(g *hostGroup)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	f(g)
}

// Node.Run runs a function on the shard at once, not at the next tick: with a tick of one hour the
// function still runs, on the shard it names.
func TestRunExecutesOnTheShardAtOnce(t *testing.T) {
	n, err := shard.NewNode(shard.Config{Node: 1, Cluster: testCluster, Shards: 2, Tick: time.Hour,
		Schedule: testTicks, Logger: quietLogger(), Ring: ring.Config{Logger: quietLogger()}})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Run(0, func(*shard.Shard) {}); !errors.Is(err, shard.ErrNotStarted) {
		t.Fatalf("Run before Start: %v, want ErrNotStarted", err)
	}
	if err := n.Start(nil); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		ran := make(chan int, 1)
		if err := n.Run(i, func(s *shard.Shard) { ran <- s.Index() }); err != nil {
			t.Fatal(err)
		}
		select {
		case got := <-ran:
			if got != i {
				t.Fatalf("ran on shard %d, want %d", got, i)
			}
		case <-time.After(liveness):
			t.Fatalf("Run on shard %d never ran", i)
		}
	}
	if n.Shards()[0].Stats().Ticks.Load() != 0 {
		t.Fatal("a tick ran: the test proves nothing")
	}
	stopWithin(t, n, liveness, "stop")
	if err := n.Run(0, func(*shard.Shard) {}); !errors.Is(err, shard.ErrStopped) {
		t.Fatalf("Run after Stop: %v, want ErrStopped", err)
	}
}

// Groups come and go while the node runs: a primary added at run time reaches its backup (added at
// run time on the other node) and counts its replies; removed, it hears OnStop, sends no more, and
// its backup's Commits are ignored from then on.
func TestAddAndRemoveGroupsWhileRunning(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b ring.Backend) {
		var w watcher
		a := newNetNodeOn(t, b, 1, 2, &w)
		c := newNetNodeOn(t, b, 2, 2, nil)
		if err := a.Start([]shard.Peer{{Node: 2, Addr: c.Addr()}}); err != nil {
			t.Fatal(err)
		}
		defer a.Stop()
		if err := c.Start([]shard.Peer{{Node: 1, Addr: a.Addr()}}); err != nil {
			t.Fatal(err)
		}
		defer c.Stop()
		w.wait(t, "links up", func() bool { return linksUp(a, true)() && linksUp(c, true)() })
		const id = 77
		prim := &hostGroup{Group: newGroup(id, []uint16{1, 2}, 1, 1)}
		prim.CommitEvery = 1
		back := newGroup(id, []uint16{1, 2}, 2, 1)
		if err := c.AddGroup(back); err != nil {
			t.Fatal(err)
		}
		if err := a.AddGroup(prim); err != nil {
			t.Fatal(err)
		}
		if err := a.AddGroup(newGroup(id, []uint16{1, 2}, 1, 1)); !errors.Is(err, shard.ErrDuplicateGroup) {
			t.Fatalf("second group %d: %v, want ErrDuplicateGroup", id, err)
		}
		owner := a.Shards()[shard.ShardOf(id, 2)].Stats()
		w.wait(t, "replies counted", func() bool { return owner.ReplyEntriesCounted.Load() >= 3 })
		if err := a.RemoveGroup(id); err != nil {
			t.Fatal(err)
		}
		if err := a.RemoveGroup(id); !errors.Is(err, shard.ErrUnknownGroup) {
			t.Fatalf("second remove: %v, want ErrUnknownGroup", err)
		}
		w.wait(t, "OnStop", func() bool {
			stops := 0
			prim.read(func(g *hostGroup) { stops = g.stops })
			return stops == 1
		})
		sent := owner.CommitEntriesSent.Load()
		ticks := owner.Ticks.Load()
		w.wait(t, "20 ticks after the removal", func() bool { return owner.Ticks.Load() >= ticks+20 })
		if got := owner.CommitEntriesSent.Load(); got != sent {
			t.Fatalf("%d Commit entries sent after the removal", got-sent)
		}
		// The id is free again: the group comes back and is scheduled anew.
		if err := a.AddGroup(prim); err != nil {
			t.Fatal(err)
		}
		w.wait(t, "Commits after re-adding", func() bool { return owner.CommitEntriesSent.Load() > sent })
	})
}

// The per-turn hook runs in the same loop turn as what woke the shard, before the turn's sends: a
// function handed in with Node.Run arms the hook, which queues a group frame, and both run at the
// same tick number. The peer's group receives the frame.
func TestTurnHookRunsInTheTurnThatWokeTheShard(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b ring.Backend) {
		var w watcher
		const id = 5
		g := &hostGroup{Group: newGroup(id, []uint16{1, 2}, 1, 1)}
		g.Cluster, g.Node = testCluster, 1
		peerGroup := newGroup(id, []uint16{1, 2}, 2, 1)
		a := newNetNodeOn(t, b, 1, 2, &w)
		if err := a.AddGroup(g); err != nil {
			t.Fatal(err)
		}
		c := newNetNodeOn(t, b, 2, 2, &w, peerGroup)
		if err := a.Start([]shard.Peer{{Node: 2, Addr: c.Addr()}}); err != nil {
			t.Fatal(err)
		}
		defer a.Stop()
		if err := c.Start([]shard.Peer{{Node: 1, Addr: a.Addr()}}); err != nil {
			t.Fatal(err)
		}
		defer c.Stop()
		w.wait(t, "links up", func() bool { return linksUp(a, true)() && linksUp(c, true)() })
		var runTick, turnTick atomic.Uint64
		var sendErr atomic.Value
		owner := shard.ShardOf(id, 2)
		err := a.Run(owner, func(s *shard.Shard) {
			runTick.Store(s.Stats().Ticks.Load())
			g.mu.Lock()
			g.onTurn = func(g *hostGroup) {
				g.mu.Lock()
				g.onTurn = nil
				g.mu.Unlock()
				turnTick.Store(s.Stats().Ticks.Load())
				frame := wire.BeginFrame(nil, &wire.Header{Cluster: testCluster, Sender: 1,
					Command: wire.CommandStreamPrepare, Group: id, Incarnation: 1})
				frame = append(frame, "turn"...)
				wire.EndFrame(frame, 0)
				sendErr.Store(errBox{s.SendFrame(2, frame)})
			}
			g.mu.Unlock()
		})
		if err != nil {
			t.Fatal(err)
		}
		routed := c.Shards()[owner].Stats()
		w.wait(t, "frame at the peer", func() bool { return routed.FramesRouted.Load() == 1 })
		stopWithin(t, c, liveness, "peer stop") // orders the group's writes before the reads below
		if e := sendErr.Load().(errBox).err; e != nil {
			t.Fatalf("SendFrame from OnTurn: %v", e)
		}
		if runTick.Load() != turnTick.Load() {
			t.Fatalf("Run at tick %d, OnTurn at tick %d: not the same turn", runTick.Load(), turnTick.Load())
		}
		if len(peerGroup.Frames) != 1 || !bytes.Equal(peerGroup.Frames[0], []byte("turn")) {
			t.Fatalf("frame body %q", peerGroup.Frames[0])
		}
	})
}

type errBox struct{ err error }

// Groups hear their shard's link come up and go down; the shutdown of Stop is not reported.
func TestLinkUpAndDownReachGroups(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b ring.Backend) {
		var w watcher
		g := &hostGroup{Group: newGroup(3, []uint16{1, 2}, 1, 1)}
		a := newNetNodeOn(t, b, 1, 1, &w)
		if err := a.AddGroup(g); err != nil {
			t.Fatal(err)
		}
		c := newNetNodeOn(t, b, 2, 1, nil)
		if err := a.Start([]shard.Peer{{Node: 2, Addr: c.Addr()}}); err != nil {
			t.Fatal(err)
		}
		defer a.Stop()
		if err := c.Start([]shard.Peer{{Node: 1, Addr: a.Addr()}}); err != nil {
			t.Fatal(err)
		}
		w.wait(t, "link up event", func() bool {
			n := 0
			g.read(func(g *hostGroup) { n = len(g.ups) })
			return n == 1
		})
		stopWithin(t, c, liveness, "peer stop")
		w.wait(t, "link down event", func() bool {
			n := 0
			g.read(func(g *hostGroup) { n = len(g.downs) })
			return n >= 1
		})
		stopWithin(t, a, liveness, "stop")
		g.read(func(g *hostGroup) {
			if g.ups[0] != 2 || g.downs[0] != 2 {
				t.Fatalf("events up %v down %v, want node 2", g.ups, g.downs)
			}
			if len(g.downs) != len(g.ups) {
				t.Fatalf("%d up and %d down events", len(g.ups), len(g.downs))
			}
		})
	})
}

// nodeFrames records node-level frames.
type nodeFrames struct {
	mu     sync.Mutex
	frames []wire.Header
	shards []int
}

func (h *nodeFrames) OnNodeFrame(s *shard.Shard, from uint16, hd *wire.Header, body []byte) {
	h.mu.Lock()
	h.frames = append(h.frames, *hd)
	h.shards = append(h.shards, s.Index())
	h.mu.Unlock()
}

// A node-level frame (Group 0, here a node heartbeat) reaches the handler set on the node, on the
// shard that received it, instead of being counted as unroutable.
func TestNodeFramesReachTheNodeHandler(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b ring.Backend) {
		var w watcher
		var h nodeFrames
		a := newNetNodeOn(t, b, 1, 2, &w)
		if err := a.SetNodeHandler(&h); err != nil {
			t.Fatal(err)
		}
		c := newNetNodeOn(t, b, 2, 2, nil)
		if err := a.Start([]shard.Peer{{Node: 2, Addr: c.Addr()}}); err != nil {
			t.Fatal(err)
		}
		defer a.Stop()
		if err := c.Start([]shard.Peer{{Node: 1, Addr: a.Addr()}}); err != nil {
			t.Fatal(err)
		}
		defer c.Stop()
		if err := a.SetNodeHandler(&h); !errors.Is(err, shard.ErrStarted) {
			t.Fatalf("SetNodeHandler after Start: %v, want ErrStarted", err)
		}
		w.wait(t, "links up", func() bool { return linksUp(a, true)() && linksUp(c, true)() })
		frame := wire.BeginFrame(nil, &wire.Header{Cluster: testCluster, Sender: 2, Command: wire.CommandNodeHeartbeat})
		wire.EndFrame(frame, 0)
		sent := make(chan error, 1)
		if err := c.Run(1, func(s *shard.Shard) { sent <- s.SendFrame(1, frame) }); err != nil {
			t.Fatal(err)
		}
		if err := <-sent; err != nil {
			t.Fatal(err)
		}
		w.wait(t, "node frame handled", func() bool {
			h.mu.Lock()
			defer h.mu.Unlock()
			return len(h.frames) == 1
		})
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.frames[0].Command != wire.CommandNodeHeartbeat || h.frames[0].Sender != 2 || h.shards[0] != 1 {
			t.Fatalf("handled %+v on shard %d; want node 2's heartbeat on shard 1 (the dialer's shard)", h.frames[0], h.shards[0])
		}
		var unroutable uint64
		for _, s := range a.Shards() {
			unroutable += s.Stats().FramesUnroutable.Load()
		}
		if unroutable != 0 {
			t.Fatalf("%d frames unroutable", unroutable)
		}
	})
}

// Node.Wake runs one more loop turn on the shard from any goroutine: with a tick of one hour, a
// group's TurnHook runs again after each Wake.
func TestWakeRunsATurn(t *testing.T) {
	g := &hostGroup{Group: newGroup(4, []uint16{1, 2}, 1, 1)}
	turned := make(chan struct{}, 16)
	g.onTurn = func(*hostGroup) { turned <- struct{}{} }
	n := newNetNodeCfg(t, shard.Config{Node: 1, Tick: time.Hour}, nil, g)
	n.Wake(0) // before Start: nothing to wake, no panic
	if err := n.Start(nil); err != nil {
		t.Fatal(err)
	}
	defer n.Stop()
	for i := range 3 {
		for len(turned) > 0 {
			<-turned
		}
		n.Wake(0)
		select {
		case <-turned:
		case <-time.After(liveness):
			t.Fatalf("wake %d: no turn", i)
		}
	}
	if n.Shards()[0].Stats().Ticks.Load() != 0 {
		t.Fatal("a tick ran: the test proves nothing")
	}
	stopWithin(t, n, liveness, "stop")
	if got := n.Shards()[0].Stats().DrainAbandoned.Load(); got != 0 {
		t.Fatalf("%d operations abandoned: Stop waited for the hour-long tick", got)
	}
}

// Turn hooks run in ascending group id order, not in the order the groups were added: groups 9, 3
// and 6 added before Start and group 1 added while the shard runs turn as 1, 3, 6, 9.
func TestTurnHooksRunInGroupIDOrder(t *testing.T) {
	var mu sync.Mutex
	var order []uint64
	turned := make(chan struct{}, 16)
	group := func(id uint64) *hostGroup {
		g := &hostGroup{Group: newGroup(id, []uint16{1, 2}, 1, 1)}
		g.onTurn = func(g *hostGroup) {
			mu.Lock()
			order = append(order, g.GroupID)
			mu.Unlock()
			if g.GroupID == 9 {
				turned <- struct{}{}
			}
		}
		return g
	}
	n := newNetNodeCfg(t, shard.Config{Node: 1, Tick: time.Hour}, nil, group(9), group(3), group(6))
	if err := n.Start(nil); err != nil {
		t.Fatal(err)
	}
	defer n.Stop()
	if err := n.AddGroup(group(1)); err != nil {
		t.Fatal(err)
	}
	if err := n.Run(0, func(*shard.Shard) {}); err != nil { // the group is on the shard after this
		t.Fatal(err)
	}
	mu.Lock()
	order = order[:0]
	mu.Unlock()
	for len(turned) > 0 {
		<-turned
	}
	n.Wake(0)
	select {
	case <-turned:
	case <-time.After(liveness):
		t.Fatal("no turn")
	}
	mu.Lock()
	got := append([]uint64(nil), order...)
	mu.Unlock()
	// The turn of Run may still have been running its hooks when order was reset: every turn's part
	// of got ascends, and a turn ends at 9 and the next one begins at 1.
	if len(got) < 4 {
		t.Fatalf("turn hooks ran %v, want at least one turn of 1 3 6 9", got)
	}
	for i := 1; i < len(got); i++ {
		if got[i] <= got[i-1] && (got[i-1] != 9 || got[i] != 1) {
			t.Fatalf("turn hooks ran in order %v, want turns of 1 3 6 9", got)
		}
	}
}

// A group removed while its superblock save is on the ring: the save completes on the slot the shard
// no longer holds, is counted, and reaches neither the group nor a batch; the group heard OnStop.
func TestRemoveGroupWithSaveInFlight(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b ring.Backend) {
		f, err := os.Create(t.TempDir() + "/sb")
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		g := &hostGroup{Group: newGroup(6, []uint16{1, 2}, 1, 1)}
		g.Superblock, g.CommitEvery = f, 1
		wrap := func(_ int, r ring.Ring) ring.Ring { return &slowSyncRing{Ring: r, fd: int(f.Fd()), delay: time.Second} }
		var w watcher
		peer := newRawPeer(t, 2)
		n := newNetNodeCfg(t, shard.Config{Node: 1, Ring: ring.Config{Backend: b}, WrapRing: wrap}, &w, g)
		if err := n.Start([]shard.Peer{{Node: 2, Addr: peer.addr()}}); err != nil {
			t.Fatal(err)
		}
		defer n.Stop()
		peer.accept(t, wire.Revision)
		st := n.Shards()[0].Stats()
		w.wait(t, "a save on the ring", func() bool { return st.SuperblockSaves.Load() == 1 })
		if err := n.RemoveGroup(6); err != nil {
			t.Fatal(err)
		}
		w.wait(t, "the save of the removed group", func() bool { return st.SavesOfRemovedGroups.Load() == 1 })
		stopWithin(t, n, liveness, "stop")
		g.read(func(g *hostGroup) {
			if g.stops != 1 {
				t.Fatalf("OnStop %d times, want 1", g.stops)
			}
		})
		if g.SavesCompleted != 0 || g.SaveErrors != 0 {
			t.Fatalf("the removed group heard its save: %d done, %d failed", g.SavesCompleted, g.SaveErrors)
		}
		if st.CommitEntriesSent.Load() != 0 {
			t.Fatalf("%d entries sent for a group whose save never completed while it was held", st.CommitEntriesSent.Load())
		}
	})
}

// unrouted takes the group frames of one command for groups the node does not hold.
type unrouted struct {
	nodeFrames
	take wire.Command
}

func (h *unrouted) OnUnroutedFrame(s *shard.Shard, from uint16, hd *wire.Header, body []byte) bool {
	if hd.Command != h.take {
		return false
	}
	h.OnNodeFrame(s, from, hd, body)
	return true
}

// A frame for a group the node does not hold reaches a NodeHandler that implements UnroutedHandler,
// on the shard that owns the group; one it does not take is counted unroutable.
func TestUnroutedFramesReachTheUnroutedHandler(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b ring.Backend) {
		var w watcher
		h := unrouted{take: wire.CommandStreamSeal}
		a := newNetNodeOn(t, b, 1, 2, &w)
		if err := a.SetNodeHandler(&h); err != nil {
			t.Fatal(err)
		}
		c := newNetNodeOn(t, b, 2, 2, nil)
		if err := a.Start([]shard.Peer{{Node: 2, Addr: c.Addr()}}); err != nil {
			t.Fatal(err)
		}
		defer a.Stop()
		if err := c.Start([]shard.Peer{{Node: 1, Addr: a.Addr()}}); err != nil {
			t.Fatal(err)
		}
		defer c.Stop()
		w.wait(t, "links up", func() bool { return linksUp(a, true)() && linksUp(c, true)() })
		const group = 5
		for _, cmd := range []wire.Command{wire.CommandStreamPrepare, wire.CommandStreamSeal} {
			frame := wire.BeginFrame(nil, &wire.Header{Cluster: testCluster, Sender: 2, Group: group, Incarnation: 1, Command: cmd})
			wire.EndFrame(frame, 0)
			sent := make(chan error, 1)
			if err := c.Run(0, func(s *shard.Shard) { sent <- s.SendFrame(1, frame) }); err != nil {
				t.Fatal(err)
			}
			if err := <-sent; err != nil {
				t.Fatal(err)
			}
		}
		w.wait(t, "the seal handled", func() bool {
			h.mu.Lock()
			defer h.mu.Unlock()
			return len(h.frames) == 1
		})
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.frames[0].Command != wire.CommandStreamSeal || h.frames[0].Group != group || h.shards[0] != shard.ShardOf(group, 2) {
			t.Fatalf("handled %+v on shard %d; want the seal for group %d on shard %d", h.frames[0], h.shards[0], group,
				shard.ShardOf(group, 2))
		}
		var unroutable uint64
		for _, s := range a.Shards() {
			unroutable += s.Stats().FramesUnroutable.Load()
		}
		if unroutable != 1 {
			t.Fatalf("%d frames unroutable, want the prepare", unroutable)
		}
	})
}
