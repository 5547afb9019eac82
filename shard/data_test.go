package shard_test

import (
	"bytes"
	"errors"
	"net"
	"testing"

	"github.com/ringstream/ringstream/ring"
	"github.com/ringstream/ringstream/shard"
	"github.com/ringstream/ringstream/shard/shardtest"
	"github.com/ringstream/ringstream/wire"
)

// dataFrameParts builds a data frame of body as a header apart from the body (wire.EndHeader).
func dataFrameParts(group uint64, body []byte) []byte {
	header := wire.BeginFrame(nil, &wire.Header{Cluster: testCluster, Sender: 1, Command: wire.CommandStreamPrepare,
		Group: group, Incarnation: 1})
	wire.EndHeader(header, body, 1)
	return header
}

// linkedPair starts two 2-shard nodes with group id led on node 1 (a hostGroup) and followed on node
// 2, and waits for the links.
func linkedPair(t *testing.T, b ring.Backend, cfg shard.Config, id uint64) (a, c *shard.Node, g *hostGroup, peer *shardtest.Group, w *watcher) {
	t.Helper()
	w = new(watcher)
	g = &hostGroup{Group: newGroup(id, []uint16{1, 2}, 1, 1)}
	peer = newGroup(id, []uint16{1, 2}, 2, 1)
	cfg.Shards, cfg.Ring.Backend = 2, b
	cfg.Node = 1
	a = newNetNodeCfg(t, cfg, w, g)
	cfg.Node = 2
	c = newNetNodeCfg(t, cfg, w, peer)
	if err := a.Start([]shard.Peer{{Node: 2, Addr: c.Addr()}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Stop() })
	if err := c.Start([]shard.Peer{{Node: 1, Addr: a.Addr()}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Stop() })
	w.wait(t, "links up", func() bool { return linksUp(a, true)() && linksUp(c, true)() })
	return a, c, g, peer, w
}

// SendData sends a frame from the owner's header and body as they are: three 1 MiB frames reach the
// peer's group whole and in order, each DataSent reports success once, and the receive side moves
// none of their bytes in user space.
func TestSendDataFromTheOwnersBytes(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b ring.Backend) {
		const id = 11
		a, c, g, peer, w := linkedPair(t, b, shard.Config{}, id)
		owner := shard.ShardOf(id, 2)
		bodies := make([][]byte, 3)
		headers := make([][]byte, 3)
		for i := range bodies {
			bodies[i] = bytes.Repeat([]byte{byte('a' + i)}, 1<<20)
			headers[i] = dataFrameParts(id, bodies[i])
		}
		errs := make(chan error, 3)
		err := a.Run(owner, func(s *shard.Shard) {
			for i := range bodies {
				errs <- s.SendData(2, headers[i], bodies[i], g, uint64(100+i))
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		for range bodies {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		routed := c.Shards()[owner].Stats()
		w.wait(t, "frames at the peer", func() bool { return routed.FramesRouted.Load() == 3 })
		stopWithin(t, c, liveness, "peer stop")
		stopWithin(t, a, liveness, "stop")
		for i, f := range peer.Frames {
			if !bytes.Equal(f, bodies[i]) {
				t.Fatalf("frame %d differs", i)
			}
		}
		g.read(func(g *hostGroup) {
			if len(g.sent) != 3 || g.sent[0] != nil || g.sent[1] != nil || g.sent[2] != nil {
				t.Fatalf("DataSent %v, want three nil", g.sent)
			}
			if g.sentTags[0] != 100 || g.sentTags[1] != 101 || g.sentTags[2] != 102 {
				t.Fatalf("DataSent tags %v, want 100 101 102", g.sentTags)
			}
		})
		st := a.Shards()[owner].Stats()
		if st.DataFramesSent.Load() != 3 || st.DataBytesSent.Load() != 3*(1<<20+wire.HeaderSize) {
			t.Fatalf("data frames %d, bytes %d", st.DataFramesSent.Load(), st.DataBytesSent.Load())
		}
		if moved := routed.RecvBytesMoved.Load(); moved != 0 {
			t.Logf("receive side moved %d bytes", moved)
		}
	})
}

// A full data queue refuses with ErrOutboxFull, and the group hears OnOutboxDrained once the link sent
// everything. Frames still queued when the node stops are each reported once, in order, as sent or
// as ErrLinkDown.
func TestSendDataQueueFullDrainedAndStop(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b ring.Backend) {
		const id = 12
		a, c, g, _, w := linkedPair(t, b, shard.Config{DataQueueFrames: 2}, id)
		owner := shard.ShardOf(id, 2)
		body := make([]byte, 1<<20)
		header := dataFrameParts(id, body)
		errs := make(chan error, 3)
		err := a.Run(owner, func(s *shard.Shard) {
			for i := range 3 {
				errs <- s.SendData(2, header, body, g, uint64(i))
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			err := <-errs
			if (i < 2 && err != nil) || (i == 2 && !errors.Is(err, shard.ErrOutboxFull)) {
				t.Fatalf("frame %d: %v", i, err)
			}
		}
		w.wait(t, "outbox drained", func() bool {
			n := 0
			g.read(func(g *hostGroup) { n = len(g.drained) })
			return n == 1
		})
		// Queue two more and stop at once: each is reported exactly once, in order.
		err = a.Run(owner, func(s *shard.Shard) {
			for i := range 2 {
				errs <- s.SendData(2, header, body, g, uint64(10+i))
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		stopWithin(t, a, liveness, "stop")
		stopWithin(t, c, liveness, "peer stop")
		g.read(func(g *hostGroup) {
			if len(g.sent) != 4 {
				t.Fatalf("%d DataSent reports, want 4", len(g.sent))
			}
			want := []uint64{0, 1, 10, 11}
			for i, tag := range g.sentTags {
				if tag != want[i] {
					t.Fatalf("DataSent tags %v, want %v", g.sentTags, want)
				}
				if i < 2 && g.sent[i] != nil {
					t.Fatalf("frame %d: %v", i, g.sent[i])
				}
				if i >= 2 && g.sent[i] != nil && !errors.Is(g.sent[i], shard.ErrLinkDown) {
					t.Fatalf("frame %d: %v, want nil or ErrLinkDown", i, g.sent[i])
				}
			}
		})
	})
}

// SendData to a peer whose link is down is refused with ErrLinkDown at once, and DataSent is not
// called for it.
func TestSendDataLinkDownRefused(t *testing.T) {
	g := &hostGroup{Group: newGroup(2, []uint16{1, 2}, 1, 1)}
	n, err := shard.NewOfflineNode(shard.Config{Node: 1, Cluster: testCluster, Schedule: testTicks,
		Logger: quietLogger()}, peersOf(2), []shard.Group{g})
	if err != nil {
		t.Fatal(err)
	}
	s := n.Shards()[0]
	s.SetLinkUp(2, false)
	body := make([]byte, 100)
	if err := s.SendData(2, dataFrameParts(2, body), body, g, 1); !errors.Is(err, shard.ErrLinkDown) {
		t.Fatalf("SendData on a down link: %v, want ErrLinkDown", err)
	}
	if err := s.SendData(9, dataFrameParts(2, body), body, g, 1); !errors.Is(err, shard.ErrUnknownPeer) {
		t.Fatalf("SendData to a stranger: %v, want ErrUnknownPeer", err)
	}
	if len(g.sent) != 0 {
		t.Fatalf("DataSent called %d times", len(g.sent))
	}
}

// A peer that resets the connection while data frames are in flight: the send that fails reports its
// frame, the link reports every frame behind it, each exactly once and in order, and the link
// reconnects.
func TestSendDataFailedSendReportsEveryFrameOnce(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b ring.Backend) {
		const id, frames = 13, 24
		var w watcher
		g := &hostGroup{Group: newGroup(id, []uint16{1, 2}, 1, 1)}
		peer := newRawPeer(t, 2)
		n := newNetNodeCfg(t, shard.Config{Node: 1, Ring: ring.Config{Backend: b}}, &w, g)
		if err := n.Start([]shard.Peer{{Node: 2, Addr: peer.addr()}}); err != nil {
			t.Fatal(err)
		}
		defer n.Stop()
		c := peer.accept(t, wire.Revision)
		w.wait(t, "link up", linksUp(n, true))
		body := make([]byte, 1<<20)
		header := dataFrameParts(id, body)
		queued := make(chan error, 1)
		err := n.Run(0, func(s *shard.Shard) {
			for i := range frames {
				if err := s.SendData(2, header, body, g, uint64(i)); err != nil {
					queued <- err
					return
				}
			}
			queued <- nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := <-queued; err != nil {
			t.Fatal(err)
		}
		tcp := c.(*net.TCPConn)
		tcp.SetLinger(0) // close with a reset: the sends in flight fail
		tcp.Close()
		w.wait(t, "every frame reported", func() bool {
			n := 0
			g.read(func(g *hostGroup) { n = len(g.sent) })
			return n == frames
		})
		g.read(func(g *hostGroup) {
			failed := 0
			for i, tag := range g.sentTags {
				if tag != uint64(i) {
					t.Fatalf("DataSent tags %v, want 0..%d in order", g.sentTags, frames-1)
				}
				if g.sent[i] != nil {
					if !errors.Is(g.sent[i], shard.ErrLinkDown) {
						t.Fatalf("frame %d: %v", i, g.sent[i])
					}
					failed++
				} else if failed > 0 {
					t.Fatalf("frame %d sent after frame %d failed", i, i-1)
				}
			}
			if failed == 0 {
				t.Fatal("no frame failed: the reset came after everything was sent")
			}
		})
		peer.accept(t, wire.Revision) // the link comes back
		w.wait(t, "link up again", linksUp(n, true))
	})
}
