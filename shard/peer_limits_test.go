package shard_test

import (
	"bytes"
	"log/slog"
	"net"
	"net/netip"
	"regexp"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringstream/ringstream/ring"
	"github.com/ringstream/ringstream/shard"
	"github.com/ringstream/ringstream/wire"
)

// newPeerLimitsNode starts node 1 (two shards, a 1 ms tick) that knows node 2 as a peer, with a
// registry and a log the test reads.
func newPeerLimitsNode(t *testing.T, b ring.Backend, frameTicks uint64) *limitsNode {
	t.Helper()
	ln := &limitsNode{reg: prometheus.NewRegistry(), log: &syncBuffer{}, w: &watcher{}}
	cfg := shard.Config{Node: 1, Shards: 2, Cluster: testCluster, Tick: time.Millisecond, Schedule: testTicks,
		Seed: 3, Ring: ring.Config{Backend: b, Logger: quietLogger()}, Registry: ln.reg,
		PeerFrameTimeoutTicks: frameTicks, Logger: slog.New(slog.NewTextHandler(ln.log, nil))}
	n, err := shard.NewNode(cfg)
	if err != nil {
		t.Fatal(err)
	}
	n.SetTickHook(ln.w.hook)
	if err := n.Start([]shard.Peer{{Node: 2, Addr: netip.MustParseAddrPort("127.0.0.1:9")}}); err != nil {
		t.Fatal(err)
	}
	ln.Node = n
	t.Cleanup(func() { stopWithin(t, n, liveness, "stop") })
	return ln
}

// dialAsPeer connects to n's peer listener as node 2's shard 1 and runs the handshake (no secret).
func dialAsPeer(t *testing.T, n *limitsNode) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", n.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	hs := wire.Handshake{Node: 2, Cluster: testCluster, Revision: wire.Revision, Shard: 1, ShardCount: 2}
	if _, err := c.Write(wire.AppendHandshake(nil, hs)); err != nil {
		t.Fatal(err)
	}
	h, body := readFrame(t, c)
	if _, err := wire.DecodeHandshake(&h, body); err != nil {
		t.Fatalf("node's answer: %v", err)
	}
	return c
}

// TestPeerFrameTimeout: on an accepted peer connection, a frame whose header claims a large body and
// whose rest never comes is closed after PeerFrameTimeoutTicks (on the shard the connection was handed
// to), counted and logged by reason; a handshaken connection that sends nothing at all stays open
// (no idle timeout on peer connections).
func TestPeerFrameTimeout(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b ring.Backend) {
		const ticks = 30
		ln := newPeerLimitsNode(t, b, ticks)
		quiet := dialAsPeer(t, ln)
		stuck := dialAsPeer(t, ln)
		whole := wire.AppendStreamPrepare(nil, wire.From{Cluster: testCluster, Node: 2}, &wire.StreamPrepare{Stream: 5, Epoch: 1, Log: wire.LogRecords,
			Count: 1, Batches: bytes.Repeat([]byte{1}, 100)})
		big := wire.AppendStreamPrepare(nil, wire.From{Cluster: testCluster, Node: 2}, &wire.StreamPrepare{Stream: 5, Epoch: 1, Log: wire.LogRecords,
			Count: 1, Batches: bytes.Repeat([]byte{2}, 4<<20)})
		// A whole frame first (handled, nothing pending), then a header and a little of its body.
		if _, err := stuck.Write(append(bytes.Clone(whole), big[:wire.HeaderSize+100]...)); err != nil {
			t.Fatal(err)
		}
		expectClosed(t, stuck, "a peer frame whose rest never comes")
		ln.w.wait(t, "frame timeout counted", func() bool { return ln.closed(t, "peer", "frame_timeout") == 1 })
		if !regexp.MustCompile(`listener=peer reason=frame_timeout .*received=\d+ missing=\d+ peer=2`).
			MatchString(ln.log.String()) {
			t.Fatalf("no log line names the peer's frame timeout:\n%s", ln.log.String())
		}
		if !stillOpen(quiet) {
			t.Fatal("a handshaken peer connection that sends nothing was closed")
		}
		if got := ln.closed(t, "peer", "frame_timeout"); got != 1 {
			t.Fatalf("frame timeouts %d, want 1 (the quiet connection is not in a frame)", got)
		}
	})
}

// TestPeerFrameTimeoutNever: with PeerFrameTimeoutTicks at TimeoutNever, a frame may wait for its rest
// without bound.
func TestPeerFrameTimeoutNever(t *testing.T) {
	ln := newPeerLimitsNode(t, ring.BackendAuto, shard.TimeoutNever)
	stuck := dialAsPeer(t, ln)
	big := wire.AppendStreamPrepare(nil, wire.From{Cluster: testCluster, Node: 2}, &wire.StreamPrepare{Stream: 5, Epoch: 1, Log: wire.LogRecords,
		Count: 1, Batches: bytes.Repeat([]byte{2}, 1<<20)})
	if _, err := stuck.Write(big[:wire.HeaderSize+100]); err != nil {
		t.Fatal(err)
	}
	start := ln.Shards()[1].Stats().Ticks.Load()
	ln.w.wait(t, "100 ticks", func() bool { return ln.Shards()[1].Stats().Ticks.Load() >= start+100 })
	if !stillOpen(stuck) {
		t.Fatal("closed with the frame timeout off")
	}
}
