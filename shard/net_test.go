package shard_test

import (
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ringstream/ringstream/internal/fds"
	"github.com/ringstream/ringstream/ring"
	"github.com/ringstream/ringstream/shard"
	"github.com/ringstream/ringstream/shard/shardtest"
	"github.com/ringstream/ringstream/wire"
)

// liveness bounds how long a test waits for something that must happen; it is a guard against a hang,
// not a timing assertion.
const liveness = 60 * time.Second

// watcher turns a condition checked on every shard tick into an event a test can wait for.
type watcher struct {
	mu   sync.Mutex
	cond func() bool
	done chan struct{}
}

func (w *watcher) hook(*shard.Shard, uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cond != nil && w.cond() {
		close(w.done)
		w.cond = nil
	}
}

func (w *watcher) wait(t testing.TB, what string, cond func() bool) {
	t.Helper()
	w.mu.Lock()
	w.cond = cond
	done := make(chan struct{})
	w.done = done
	w.mu.Unlock()
	select {
	case <-done:
	case <-time.After(liveness):
		t.Fatalf("%s never happened", what)
	}
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newNetNode(t *testing.T, id uint16, shards int, w *watcher, groups ...*shardtest.Group) *shard.Node {
	t.Helper()
	return newNetNodeOn(t, ring.BackendAuto, id, shards, w, groups...)
}

// newNetNodeOn is newNetNode on rings of backend b.
func newNetNodeOn(t *testing.T, b ring.Backend, id uint16, shards int, w *watcher, groups ...*shardtest.Group) *shard.Node {
	t.Helper()
	gs := make([]shard.Group, len(groups))
	for i, g := range groups {
		gs[i] = g
	}
	return newNetNodeCfg(t, shard.Config{Node: id, Shards: shards, Ring: ring.Config{Backend: b}}, w, gs...)
}

// newNetNodeCfg builds a node from cfg, filling the test defaults: the test cluster, a 1 ms tick, the
// short schedule, a fast reconnect and quiet logs.
func newNetNodeCfg(t testing.TB, cfg shard.Config, w *watcher, groups ...shard.Group) *shard.Node {
	t.Helper()
	cfg.Cluster = testCluster
	if cfg.Tick == 0 {
		cfg.Tick = time.Millisecond
	}
	cfg.Schedule, cfg.Seed, cfg.Logger = testTicks, 3, quietLogger()
	cfg.ReconnectBaseTicks, cfg.ReconnectMaxTicks = 2, 8
	cfg.Ring.Logger = quietLogger()
	n, err := shard.NewNode(cfg)
	if err != nil {
		t.Fatalf("node %d: %v", cfg.Node, err)
	}
	for _, g := range groups {
		if err := n.AddGroup(g); err != nil {
			t.Fatal(err)
		}
	}
	if w != nil {
		n.SetTickHook(w.hook)
	}
	return n
}

func linksUp(n *shard.Node, want bool) func() bool {
	return func() bool {
		for _, l := range n.Status() {
			if l.Up != want {
				return false
			}
		}
		return true
	}
}

func openFDs(t *testing.T) int {
	n, err := fds.Count()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// Start and Stop leave no goroutine and no file descriptor behind: rings, sockets, listener.
func TestStartStopLeavesNothingBehind(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend ring.Backend) {
		cycle := func() {
			var w watcher
			g1 := newGroup(1, []uint16{1, 2}, 1, 1)
			g2 := newGroup(1, []uint16{1, 2}, 2, 1)
			a := newNetNodeOn(t, backend, 1, 2, &w, g1)
			b := newNetNodeOn(t, backend, 2, 2, nil, g2)
			if err := a.Start([]shard.Peer{{Node: 2, Addr: b.Addr()}}); err != nil {
				t.Fatal(err)
			}
			if err := b.Start([]shard.Peer{{Node: 1, Addr: a.Addr()}}); err != nil {
				t.Fatal(err)
			}
			w.wait(t, "links up and a reply counted", func() bool {
				return linksUp(a, true)() && linksUp(b, true)() &&
					a.Shards()[shard.ShardOf(1, 2)].Stats().ReplyEntriesCounted.Load() > 0
			})
			if err := a.Stop(); err != nil {
				t.Fatal(err)
			}
			if err := b.Stop(); err != nil {
				t.Fatal(err)
			}
			if err := a.Stop(); err != nil {
				t.Fatalf("second Stop: %v", err)
			}
		}
		cycle() // warm up: the runtime's own lazily created threads and fds
		goroutines, fds := runtime.NumGoroutine(), openFDs(t)
		cycle()
		cycle()
		// Stop returns when every shard goroutine ran its last statement; the runtime may count one
		// until it has finished exiting its locked thread, so give it a bounded moment to do so.
		for i := 0; i < 1000 && runtime.NumGoroutine() > goroutines; i++ {
			runtime.Gosched()
			time.Sleep(time.Millisecond)
		}
		// A leak raises the counts; a goroutine of an earlier test ending meanwhile may only lower them.
		if got := runtime.NumGoroutine(); got > goroutines {
			t.Errorf("goroutines %d after Stop, %d before", got, goroutines)
		}
		if got := openFDs(t); got > fds {
			t.Errorf("open fds %d after Stop, %d before", got, fds)
		}
	})
}

// A node that is built but never started releases its listener on Stop.
func TestStopWithoutStartClosesListener(t *testing.T) {
	fds := openFDs(t)
	n := newNetNode(t, 1, 1, nil)
	if openFDs(t) != fds+1 {
		t.Fatal("listener not open")
	}
	if err := n.Stop(); err != nil {
		t.Fatal(err)
	}
	if openFDs(t) != fds {
		t.Fatal("listener left open")
	}
	if err := n.Start(nil); err == nil {
		t.Fatal("Start after Stop accepted")
	}
}

// rawPeer is a test peer speaking the wire protocol by hand over a Go socket.
type rawPeer struct {
	node uint16
	ln   net.Listener
}

func newRawPeer(t *testing.T, node uint16) *rawPeer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return &rawPeer{node: node, ln: ln}
}

func (p *rawPeer) addr() netip.AddrPort { return netip.MustParseAddrPort(p.ln.Addr().String()) }

func readFrame(t *testing.T, c net.Conn) (wire.Header, []byte) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(liveness))
	head := make([]byte, wire.HeaderSize)
	if _, err := io.ReadFull(c, head); err != nil {
		t.Fatalf("read header: %v", err)
	}
	h, err := wire.ParseHeader(head)
	if err != nil {
		t.Fatalf("header: %v", err)
	}
	frame := append(head, make([]byte, h.BodySize)...)
	if _, err := io.ReadFull(c, frame[wire.HeaderSize:]); err != nil {
		t.Fatalf("read body: %v", err)
	}
	h, body, err := wire.ParseFrame(frame)
	if err != nil {
		t.Fatalf("frame: %v", err)
	}
	return h, body
}

// accept takes the node's link and answers its handshake with one of revision rev.
func (p *rawPeer) accept(t *testing.T, rev uint16) net.Conn {
	t.Helper()
	c, err := p.ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	h, body := readFrame(t, c)
	hs, err := wire.DecodeHandshake(&h, body)
	if err != nil || hs.Check(testCluster) != nil {
		t.Fatalf("node's handshake %+v: %v", hs, err)
	}
	reply := wire.AppendHandshake(nil, wire.Handshake{Node: p.node, Cluster: testCluster, Revision: rev})
	if _, err := c.Write(reply); err != nil {
		t.Fatal(err)
	}
	return c
}

// R18: a dialing shard refuses a peer that answers on wire revision 1; the link stays down and the
// refusal is counted.
func TestR18_DialerRefusesRevisionOne(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend ring.Backend) {
		var w watcher
		peer := newRawPeer(t, 2)
		n := newNetNodeOn(t, backend, 1, 1, &w)
		if err := n.Start([]shard.Peer{{Node: 2, Addr: peer.addr()}}); err != nil {
			t.Fatal(err)
		}
		defer n.Stop()
		peer.accept(t, 1)
		st := n.Shards()[0].Stats()
		w.wait(t, "handshake refusal", func() bool { return st.HandshakeErrors.Load() == 1 })
		if n.Status()[0].Up || st.LinksUp.Load() != 0 {
			t.Fatal("link up after a revision 1 handshake")
		}
		// It reconnects after its backoff, and a revision 2 answer brings the link up.
		peer.accept(t, wire.Revision)
		w.wait(t, "link up", linksUp(n, true))
	})
}

// R18: the accepting node refuses a dialer on revision 1, and a node that is not a configured peer,
// by closing the connection; a proper peer gets this node's handshake back.
func TestR18_AcceptorRefusesRevisionOneAndStrangers(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend ring.Backend) {
		n := newNetNodeOn(t, backend, 1, 2, nil)
		if err := n.Start([]shard.Peer{{Node: 2, Addr: netip.MustParseAddrPort("127.0.0.1:9")}}); err != nil {
			t.Fatal(err)
		}
		defer n.Stop()
		cases := []struct {
			name    string
			hs      wire.Handshake
			refused bool
		}{
			{"revision 1", wire.Handshake{Node: 2, Cluster: testCluster, Revision: 1, ShardCount: 1}, true},
			{"other cluster", wire.Handshake{Node: 2, Cluster: 99, Revision: wire.Revision, ShardCount: 1}, true},
			{"not a peer", wire.Handshake{Node: 5, Cluster: testCluster, Revision: wire.Revision, ShardCount: 1}, true},
			{"peer", wire.Handshake{Node: 2, Cluster: testCluster, Revision: wire.Revision, Shard: 1, ShardCount: 2}, false},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				conn, err := net.Dial("tcp", n.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				if _, err := conn.Write(wire.AppendHandshake(nil, c.hs)); err != nil {
					t.Fatal(err)
				}
				if c.refused {
					conn.SetReadDeadline(time.Now().Add(liveness))
					if n, err := conn.Read(make([]byte, 1)); err != io.EOF {
						t.Fatalf("read %d bytes, %v; want the connection closed", n, err)
					}
					return
				}
				h, body := readFrame(t, conn)
				hs, err := wire.DecodeHandshake(&h, body)
				if err != nil || hs.Node != 1 || hs.Revision != wire.Revision {
					t.Fatalf("answer %+v: %v", hs, err)
				}
			})
		}
	})
}

// R12: superblock saves run on the ring before the batch; a group whose save failed is left out of
// that batch and sent in a later one, while the others go.
func TestR12_FailedSaveSentInLaterBatch(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend ring.Backend) {
		var w watcher
		peer := newRawPeer(t, 2)
		dir := t.TempDir()
		good := newGroup(1, []uint16{1, 2}, 1, 1)
		bad := newGroup(2, []uint16{1, 2}, 1, 1)
		for _, g := range []*shardtest.Group{good, bad} {
			f, err := os.Create(dir + "/" + string(rune('a'+g.GroupID)))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			g.Superblock = f
		}
		bad.FailSaves = 1
		var ready atomic.Bool // the primaries start once the link is up
		good.Ready, bad.Ready = &ready, &ready
		n := newNetNodeOn(t, backend, 1, 1, &w, good, bad)
		if err := n.Start([]shard.Peer{{Node: 2, Addr: peer.addr()}}); err != nil {
			t.Fatal(err)
		}
		defer n.Stop() // before the files close (defers run last first)
		c := peer.accept(t, wire.Revision)
		w.wait(t, "link up", linksUp(n, true))
		ready.Store(true)
		// Group 1 goes once its save is durable; group 2 once its retried save is. Which save finishes
		// first is the disk's business, so the test reads batches until it saw both.
		seen := map[uint64]bool{}
		for i := 0; i < 20 && !(seen[1] && seen[2]); i++ {
			h, body := readFrame(t, c)
			for _, e := range commitEntries(t, parsedFrame{h, body}) {
				seen[e.Group] = true
			}
		}
		if !seen[1] || !seen[2] {
			t.Fatalf("groups seen %v, want 1 and 2", seen)
		}
		st := n.Shards()[0].Stats()
		n.Stop()
		if good.SavesCompleted != 1 || bad.SaveErrors != 1 || bad.SavesCompleted != 1 {
			t.Fatalf("saves: good %d, bad %d failed %d done", good.SavesCompleted, bad.SaveErrors, bad.SavesCompleted)
		}
		if st.SuperblockSaveFailures.Load() != 1 || st.EntriesDeferredSave.Load() != 1 {
			t.Fatalf("failures %d, deferred %d", st.SuperblockSaveFailures.Load(), st.EntriesDeferredSave.Load())
		}
		buf := make([]byte, 16)
		if _, err := good.Superblock.ReadAt(buf, 0); err != nil || buf[0] != 3 {
			t.Fatalf("superblock on disk %v: %v", buf, err)
		}
	})
}

// A link whose peer goes away is reported down (status and metrics) and comes back by itself once
// the peer returns, after its backoff.
func TestLinkDownReportedAndReconnects(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend ring.Backend) {
		var w watcher
		a := newNetNodeOn(t, backend, 1, 2, &w)
		b := newNetNodeOn(t, backend, 2, 1, nil)
		addrB := b.Addr()
		if err := a.Start([]shard.Peer{{Node: 2, Addr: addrB}}); err != nil {
			t.Fatal(err)
		}
		defer a.Stop()
		if err := b.Start([]shard.Peer{{Node: 1, Addr: a.Addr()}}); err != nil {
			t.Fatal(err)
		}
		w.wait(t, "links up", linksUp(a, true))
		b.Stop()
		w.wait(t, "links down", linksUp(a, false))
		if a.Shards()[0].Stats().LinkFailures.Load() == 0 {
			t.Fatal("link failure not counted")
		}
		b2, err := shard.NewNode(shard.Config{Node: 2, Cluster: testCluster, Tick: time.Millisecond,
			Schedule: testTicks, Listen: addrB, Logger: quietLogger(), Ring: ring.Config{Logger: quietLogger()}})
		if err != nil {
			t.Fatalf("restart node 2 on %v: %v", addrB, err)
		}
		if err := b2.Start([]shard.Peer{{Node: 1, Addr: a.Addr()}}); err != nil {
			t.Fatal(err)
		}
		defer b2.Stop()
		w.wait(t, "links up again", linksUp(a, true))
	})
}

// Group-addressed frames a group sends through its shard reach the group on the peer node, routed by
// the header's group to the shard that owns it.
func TestGroupFrameReachesPeerGroup(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend ring.Backend) {
		var w watcher
		sender := newGroup(42, []uint16{1, 2}, 1, 1)
		sender.Cluster, sender.Node, sender.FrameAt, sender.FrameTo = testCluster, 1, 40, 2
		receiver := newGroup(42, []uint16{1, 2}, 2, 1)
		a := newNetNodeOn(t, backend, 1, 2, nil, sender)
		b := newNetNodeOn(t, backend, 2, 3, &w, receiver)
		if err := a.Start([]shard.Peer{{Node: 2, Addr: b.Addr()}}); err != nil {
			t.Fatal(err)
		}
		if err := b.Start([]shard.Peer{{Node: 1, Addr: a.Addr()}}); err != nil {
			t.Fatal(err)
		}
		owner := b.Shards()[shard.ShardOf(42, 3)].Stats()
		w.wait(t, "frame routed", func() bool { return owner.FramesRouted.Load() == 1 })
		a.Stop()
		b.Stop()
		if sender.FrameErr != nil {
			t.Fatalf("send: %v", sender.FrameErr)
		}
		if len(receiver.Frames) != 1 || string(receiver.Frames[0]) != "ringstream" {
			t.Fatalf("frames %q", receiver.Frames)
		}
	})
}

// With PinCores each shard's thread runs on exactly one CPU.
func TestPinCoresPinsEachShard(t *testing.T) {
	var mu sync.Mutex
	cpus := map[int]int{}
	n, err := shard.NewNode(shard.Config{Node: 1, Cluster: testCluster, Shards: 2, PinCores: true,
		Tick: time.Millisecond, Schedule: testTicks, Logger: quietLogger(), Ring: ring.Config{Logger: quietLogger()}})
	if err != nil {
		t.Fatal(err)
	}
	var w watcher
	n.SetTickHook(func(s *shard.Shard, tick uint64) {
		var set unix.CPUSet
		if err := unix.SchedGetaffinity(0, &set); err == nil {
			mu.Lock()
			cpus[s.Index()] = set.Count()
			mu.Unlock()
		}
		w.hook(s, tick)
	})
	if err := n.Start(nil); err != nil {
		t.Fatal(err)
	}
	w.wait(t, "both shards ticked", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(cpus) == 2
	})
	n.Stop()
	for i, c := range cpus {
		if c != 1 {
			t.Errorf("shard %d may run on %d CPUs", i, c)
		}
	}
}

// A peer that accepts the link but never answers the handshake cannot hold it: after
// HandshakeTimeoutTicks the link gives up, counts it and reconnects; a dialer that never sends its
// handshake is closed by the acceptor in the same time.
func TestHandshakeTimeoutOnBothEnds(t *testing.T) {
	var w watcher
	peer := newRawPeer(t, 2)
	n, err := shard.NewNode(shard.Config{Node: 1, Cluster: testCluster, Tick: time.Millisecond,
		Schedule: testTicks, Logger: quietLogger(), Ring: ring.Config{Logger: quietLogger()}, HandshakeTimeoutTicks: 20, ReconnectBaseTicks: 2,
		ReconnectMaxTicks: 4})
	if err != nil {
		t.Fatal(err)
	}
	n.SetTickHook(w.hook)
	if err := n.Start([]shard.Peer{{Node: 2, Addr: peer.addr()}}); err != nil {
		t.Fatal(err)
	}
	defer n.Stop()
	first, err := peer.ln.Accept() // accepted, never answered
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	st := n.Shards()[0].Stats()
	w.wait(t, "dialer handshake timeout", func() bool { return st.HandshakeErrors.Load() >= 1 })
	peer.accept(t, wire.Revision) // the reconnect, answered this time
	w.wait(t, "link up", linksUp(n, true))

	silent, err := net.Dial("tcp", n.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	silent.SetReadDeadline(time.Now().Add(liveness))
	if k, err := silent.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("read %d bytes, %v; want the acceptor to close a silent dialer", k, err)
	}
}

// A group queues its own operation on its shard's ring (Sender.Ring) and gets the completion in the
// shard's loop.
func TestGroupRunsOpsOnShardRing(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend ring.Backend) {
		var w watcher
		g := newGroup(8, []uint16{1, 2}, 1, 1)
		g.NopAt = 3
		n := newNetNodeOn(t, backend, 1, 2, &w, g)
		if err := n.Start(nil); err != nil {
			t.Fatal(err)
		}
		owner := n.Shards()[shard.ShardOf(8, 2)].Stats()
		w.wait(t, "tick 10", func() bool { return owner.Ticks.Load() >= 10 })
		n.Stop()
		if g.NopErr != nil || g.NopDone != 1 {
			t.Fatalf("nop: %v, %d completions", g.NopErr, g.NopDone)
		}
	})
}

// R12 when the ring has no room for every save of a tick: the saves that fit are issued together, the
// other groups hear ErrSaveDeferred and are left out, and every group gets saved and sent within a
// few ticks.
func TestR12_SavesBeyondRingRoomAreDeferred(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend ring.Backend) {
		var w watcher
		peer := newRawPeer(t, 2)
		f, err := os.Create(t.TempDir() + "/superblocks")
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		var ready atomic.Bool
		var groups []*shardtest.Group
		for id := uint64(1); id <= 100; id++ {
			g := newGroup(id, []uint16{1, 2}, 1, 1)
			g.Superblock, g.Ready = f, &ready
			groups = append(groups, g)
		}
		n, err := shard.NewNode(shard.Config{Node: 1, Cluster: testCluster, Tick: time.Millisecond,
			Schedule: testTicks, Logger: quietLogger(), Ring: ring.Config{Backend: backend, Entries: 32, Logger: quietLogger()}})
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range groups {
			n.AddGroup(g)
		}
		n.SetTickHook(w.hook)
		if err := n.Start([]shard.Peer{{Node: 2, Addr: peer.addr()}}); err != nil {
			t.Fatal(err)
		}
		defer n.Stop()
		c := peer.accept(t, wire.Revision)
		w.wait(t, "link up", linksUp(n, true))
		ready.Store(true)
		seen := map[uint64]bool{}
		batches := 0
		for len(seen) < len(groups) {
			h, body := readFrame(t, c)
			if h.Command != wire.CommandCommit {
				continue
			}
			batches++
			for _, e := range commitEntries(t, parsedFrame{h, body}) {
				seen[e.Group] = true
			}
		}
		if batches < 2 {
			t.Fatalf("all %d groups in %d batch: the ring of 32 cannot hold 100 saves", len(groups), batches)
		}
		st := n.Shards()[0].Stats()
		n.Stop()
		if st.SuperblockSavesDeferred.Load() == 0 || st.SuperblockSaveFailures.Load() != 0 {
			t.Fatalf("deferred %d, failed %d", st.SuperblockSavesDeferred.Load(), st.SuperblockSaveFailures.Load())
		}
		for _, g := range groups {
			if g.SavesCompleted == 0 {
				t.Fatalf("group %d never saved", g.GroupID)
			}
		}
	})
}

// A dialer may send frames right behind its handshake, in the same write: the accepting shard reads
// the handshake and not a byte more, so the frames reach the shard the socket is handed to. There a
// frame with a wrong body checksum is dropped whole and counted while the connection goes on (R15),
// and a frame whose header is corrupt closes the connection.
func TestAcceptedConnReadsFramesBehindHandshake(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend ring.Backend) {
		var w watcher
		ids := idRange(1, 41)
		groups := backups(ids) // led by node 1, the raw dialer below
		n := newNetNodeOn(t, backend, 2, 2, &w, groups...)
		if err := n.Start([]shard.Peer{{Node: 1, Addr: netip.MustParseAddrPort("127.0.0.1:9")}}); err != nil {
			t.Fatal(err)
		}
		stopped := false
		defer func() {
			if !stopped {
				n.Stop()
			}
		}()
		total := func(get func(*shard.Stats) uint64) uint64 {
			var sum uint64
			for _, s := range n.Shards() {
				sum += get(s.Stats())
			}
			return sum
		}
		accepted := func(s *shard.Stats) uint64 { return s.CommitEntriesAccepted.Load() }
		dropped := func(s *shard.Stats) uint64 { return s.FramesDropped.Load() }

		conn, err := net.Dial("tcp", n.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		bad := commitBatch(ids, 100)
		bad[wire.HeaderSize+3] ^= 0xff // the body checksum no longer matches
		stream := wire.AppendHandshake(nil, wire.Handshake{Node: 1, Cluster: testCluster, Revision: wire.Revision,
			Shard: 1, ShardCount: 2}) // handed to shard 1, which routes half the entries to shard 0
		stream = append(stream, bad...)
		stream = append(stream, commitBatch(ids, 200)...)
		if _, err := conn.Write(stream); err != nil {
			t.Fatal(err)
		}
		h, body := readFrame(t, conn)
		if hs, err := wire.DecodeHandshake(&h, body); err != nil || hs.Node != 2 {
			t.Fatalf("answer %+v: %v", hs, err)
		}
		w.wait(t, "the good frame handled", func() bool {
			return total(accepted) == uint64(len(ids)) && total(dropped) == 1
		})

		corrupt := commitBatch(ids, 300)
		corrupt[20] ^= 1 // header byte: the header checksum no longer matches
		if _, err := conn.Write(corrupt); err != nil {
			t.Fatal(err)
		}
		conn.SetReadDeadline(time.Now().Add(liveness))
		if k, err := conn.Read(make([]byte, 1)); err != io.EOF {
			t.Fatalf("read %d bytes, %v; want the connection closed", k, err)
		}
		w.wait(t, "the corrupt header counted", func() bool { return total(dropped) == 2 })
		if err := n.Stop(); err != nil {
			t.Fatal(err)
		}
		stopped = true
		if got := total(accepted); got != uint64(len(ids)) {
			t.Fatalf("accepted %d entries after the corrupt frame, want %d", got, len(ids))
		}
		for _, g := range groups {
			if len(g.Received) != 1 || g.Received[0].TimestampMonotonic != 200 {
				t.Fatalf("group %d received %+v, want only the good frame", g.GroupID, g.Received)
			}
		}
	})
}
