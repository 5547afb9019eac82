package shard_test

import (
	"bytes"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringstream/ringstream/ring"
	"github.com/ringstream/ringstream/shard"
	"github.com/ringstream/ringstream/wire"
)

// limitsNode is a started node with a client listener, a registry and a log the test reads.
type limitsNode struct {
	*shard.Node
	reg *prometheus.Registry
	log *syncBuffer
	w   *watcher
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// newLimitsNode starts a one-shard node (a 1 ms tick) with client bounds set by edit.
func newLimitsNode(t *testing.T, b ring.Backend, h shard.ClientHandler, edit func(*shard.ClientConfig)) *limitsNode {
	t.Helper()
	return newLimitsNodeCfg(t, b, 0, h, edit)
}

// newLimitsNodeRing is newLimitsNode with rings of entries submission entries.
func newLimitsNodeRing(t *testing.T, b ring.Backend, entries uint32) *limitsNode {
	t.Helper()
	return newLimitsNodeCfg(t, b, entries, &echoHandler{}, nil)
}

func newLimitsNodeCfg(t *testing.T, b ring.Backend, entries uint32, h shard.ClientHandler, edit func(*shard.ClientConfig)) *limitsNode {
	t.Helper()
	ln := &limitsNode{reg: prometheus.NewRegistry(), log: &syncBuffer{}, w: &watcher{}}
	cfg := shard.Config{Node: 1, Shards: 1, Cluster: testCluster, Tick: time.Millisecond, Schedule: testTicks,
		Seed: 3, Ring: ring.Config{Backend: b, Entries: entries, Logger: quietLogger()},
		ClientListen: netip.MustParseAddrPort("127.0.0.1:0"), Registry: ln.reg,
		Logger: slog.New(slog.NewTextHandler(ln.log, nil))}
	if edit != nil {
		edit(&cfg.Client)
	}
	n, err := shard.NewNode(cfg)
	if err != nil {
		t.Fatal(err)
	}
	n.SetTickHook(ln.w.hook)
	if h != nil {
		if err := n.SetClientHandler(h); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.Start(nil); err != nil {
		t.Fatal(err)
	}
	ln.Node = n
	t.Cleanup(func() { stopWithin(t, n, liveness, "stop") })
	return ln
}

// closed reads ringstream_shard_connections_closed_total for the listener and reason.
func (ln *limitsNode) closed(t *testing.T, listener, reason string) uint64 {
	t.Helper()
	mfs, err := ln.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != "ringstream_shard_connections_closed_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["listener"] == listener && labels["reason"] == reason {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return uint64(sum)
}

// waitClosed waits (on the shard's ticks) until count connections were closed for reason.
func (ln *limitsNode) waitClosed(t *testing.T, reason string, count uint64) {
	t.Helper()
	ln.w.wait(t, reason+" closes", func() bool { return ln.closed(t, "client", reason) >= count })
}

// stillOpen reports that the node has not closed c: a read waits out a short deadline.
func stillOpen(c net.Conn) bool {
	_ = c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestClientIdleClosedAfterBound: an authenticated connection that sends nothing is closed after
// IdleTimeoutTicks, counted and logged by reason; one waiting on a long-poll request is not idle.
func TestClientIdleClosedAfterBound(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b ring.Backend) {
		const ticks = 40
		h := &echoHandler{hold: true}
		ln := newLimitsNode(t, b, h, func(c *shard.ClientConfig) { c.HandshakeTimeoutTicks, c.IdleTimeoutTicks = 20, ticks })
		polling, refused := dialClient(t, ln.ClientAddr(), "")
		if refused != nil {
			t.Fatal(string(refused.Message))
		}
		if _, err := polling.Write(fetchFrame(7, 3)); err != nil {
			t.Fatal(err)
		}
		ln.w.wait(t, "the fetch held", func() bool { h.mu.Lock(); defer h.mu.Unlock(); return len(h.held) == 1 })
		start := tickClock(ln.Shards()[0])
		idle, refused := dialClient(t, ln.ClientAddr(), "")
		if refused != nil {
			t.Fatal(string(refused.Message))
		}
		expectClosed(t, idle, "idle client")
		if ran := tickClock(ln.Shards()[0]) - start; ran < ticks {
			t.Fatalf("idle client closed after %d ticks, before the bound of %d", ran, ticks)
		}
		ln.waitClosed(t, "idle_timeout", 1)
		if !stillOpen(polling) {
			t.Fatal("a connection waiting for its fetch's reply was closed as idle")
		}
		if got := ln.closed(t, "client", "idle_timeout"); got != 1 {
			t.Fatalf("idle closes %d, want 1", got)
		}
		if !regexp.MustCompile(`reason=idle_timeout`).MatchString(ln.log.String()) {
			t.Fatalf("no log line names the idle timeout:\n%s", ln.log.String())
		}
		// Answered, the fetch's connection has nothing under way and is closed as idle in its turn.
		h.mu.Lock()
		req := h.held[0]
		h.mu.Unlock()
		var answered uint64
		if err := ln.Node.Run(0, func(s *shard.Shard) { answered = tickClock(s); answer(s, req) }); err != nil {
			t.Fatal(err)
		}
		if e := readError(t, polling); e.RequestID != 7 {
			t.Fatalf("reply to request %d, want 7", e.RequestID)
		}
		expectClosed(t, polling, "client idle after its reply")
		ln.waitClosed(t, "idle_timeout", 2)
		if ran := tickClock(ln.Shards()[0]) - answered; ran < ticks {
			t.Fatalf("closed %d ticks after its reply, before the idle bound of %d", ran, ticks)
		}
	})
}

// TestClientFrameBodyTimeout: a header promising a body that does not come closes the connection
// after FrameTimeoutTicks, counted and logged; the node serves the next client.
func TestClientFrameBodyTimeout(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b ring.Backend) {
		const ticks = 30
		ln := newLimitsNode(t, b, &echoHandler{}, func(c *shard.ClientConfig) { c.FrameTimeoutTicks = ticks })
		c, refused := dialClient(t, ln.ClientAddr(), "")
		if refused != nil {
			t.Fatal(string(refused.Message))
		}
		request(t, c, 1, 3, 1) // a whole frame: served, and no clock left running
		f := wire.AppendProduce(nil, wire.From{Cluster: testCluster}, &wire.Produce{RequestID: 2, Stream: 3,
			Count: 1, Batch: make([]byte, 100000)})
		start := tickClock(ln.Shards()[0]) // before the bytes can reach the node
		if _, err := c.Write(f[:wire.HeaderSize+10]); err != nil {
			t.Fatal(err)
		}
		expectClosed(t, c, "client silent mid-frame")
		if ran := tickClock(ln.Shards()[0]) - start; ran < ticks {
			t.Fatalf("closed after %d ticks, before the bound of %d", ran, ticks)
		}
		ln.waitClosed(t, "frame_timeout", 1)
		if !regexp.MustCompile(`reason=frame_timeout .*missing=\d+`).MatchString(ln.log.String()) {
			t.Fatalf("no log line names the frame timeout:\n%s", ln.log.String())
		}
		next, refused := dialClient(t, ln.ClientAddr(), "")
		if refused != nil {
			t.Fatal(string(refused.Message))
		}
		request(t, next, 1, 3, 1)
	})
}

// TestClientConnectionsMax: past ConnectionsMax the node closes a new connection at once, counted and
// logged; a place freed by a close is taken again.
func TestClientConnectionsMax(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b ring.Backend) {
		ln := newLimitsNode(t, b, &echoHandler{}, func(c *shard.ClientConfig) { c.ConnectionsMax = 3 })
		var held []net.Conn
		for range 2 {
			c, refused := dialClient(t, ln.ClientAddr(), "")
			if refused != nil {
				t.Fatal(string(refused.Message))
			}
			held = append(held, c)
		}
		half, err := net.Dial("tcp", ln.ClientAddr().String()) // a handshake not finished counts too
		if err != nil {
			t.Fatal(err)
		}
		defer half.Close()
		ln.w.wait(t, "three accepted", func() bool { return ln.Shards()[0].Stats().Client.Accepted.Load() == 3 })
		over, err := net.Dial("tcp", ln.ClientAddr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer over.Close()
		expectClosed(t, over, "connection past the limit")
		if got := ln.closed(t, "client", "connections_max"); got != 1 {
			t.Fatalf("connections_max closes %d, want 1", got)
		}
		if !regexp.MustCompile(`reason=connections_max .*limit=3`).MatchString(ln.log.String()) {
			t.Fatalf("no log line names the connection limit:\n%s", ln.log.String())
		}
		request(t, held[0], 1, 3, 1) // the others are served
		held[1].Close()
		ln.w.wait(t, "a place freed", func() bool { return ln.Shards()[0].Stats().Client.Open.Load() == 1 })
		c, refused := dialClient(t, ln.ClientAddr(), "")
		if refused != nil {
			t.Fatal(string(refused.Message))
		}
		request(t, c, 2, 3, 1)
	})
}

// TestClientPendingBytesBound: a connection stops reading while its unanswered requests hold
// PendingBytesMax bytes, and reads on once a reply frees room.
func TestClientPendingBytesBound(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b ring.Backend) {
		size := len(fetchFrame(1, 3))
		h := &echoHandler{hold: true}
		ln := newLimitsNode(t, b, h, func(c *shard.ClientConfig) {
			c.FrameBytesMax, c.PendingBytesMax = 2*size, 2*size+size/2
			c.FrameTimeoutTicks = 20 // the frames it does not read meanwhile are the node's delay, not the client's
		})
		c, refused := dialClient(t, ln.ClientAddr(), "")
		if refused != nil {
			t.Fatal(string(refused.Message))
		}
		held := func() int { h.mu.Lock(); defer h.mu.Unlock(); return len(h.held) }
		// Two requests and the start of a third, which waits for its rest with its clock running.
		third := fetchFrame(3, 3)
		if _, err := c.Write(append(append(fetchFrame(1, 3), fetchFrame(2, 3)...), third[:100]...)); err != nil {
			t.Fatal(err)
		}
		ln.w.wait(t, "two requests held", func() bool { return held() == 2 })
		// The rest comes, and the connection stops at the bound with that frame unread: the ticks it
		// waits from now on are the node's, so the frame timeout must not close it.
		if _, err := c.Write(append(third[100:], fetchFrame(4, 3)...)); err != nil {
			t.Fatal(err)
		}
		ticks := tickClock(ln.Shards()[0])
		ln.w.wait(t, "50 ticks", func() bool { return tickClock(ln.Shards()[0]) > ticks+50 })
		if n := held(); n != 2 {
			t.Fatalf("%d requests of %d bytes handed on under a bound of %d bytes, want 2", n, size, 2*size+size/2)
		}
		if ln.Shards()[0].Stats().Client.Pushback.Load() == 0 {
			t.Fatal("the stop at the bound was not counted as pushback")
		}
		h.mu.Lock()
		first := h.held[0]
		h.mu.Unlock()
		if err := ln.Node.Run(0, func(s *shard.Shard) { answer(s, first) }); err != nil {
			t.Fatal(err)
		}
		ln.w.wait(t, "the third request taken", func() bool { return held() == 3 })
	})
}

// TestClosesLoggedAtARate: a flood of refused connections gives one log line per reason per second
// on a shard, each with the count it stands for, and the metric counts every one.
func TestClosesLoggedAtARate(t *testing.T) {
	const conns = 60
	ln := newLimitsNode(t, ring.BackendAuto, &echoHandler{}, func(c *shard.ClientConfig) { c.HandshakeTimeoutTicks = 20 })
	var cs []net.Conn
	for range conns {
		c, err := net.Dial("tcp", ln.ClientAddr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		cs = append(cs, c)
	}
	for _, c := range cs {
		expectClosed(t, c, "silent client")
	}
	ln.waitClosed(t, "handshake_timeout", conns)
	// The lines left unlogged are logged as one count within a second (1000 ticks at 1 ms).
	var lines, stood uint64
	countRe := regexp.MustCompile(`(?:unlogged_since_last_line|count)=(\d+)`)
	deadline := time.Now().Add(liveness)
	for {
		lines, stood = 0, 0
		for _, l := range bytes.Split([]byte(ln.log.String()), []byte("\n")) {
			if !bytes.Contains(l, []byte("reason=handshake_timeout")) {
				continue
			}
			lines++
			stood++
			if m := countRe.FindSubmatch(l); m != nil {
				n, _ := strconv.ParseUint(string(m[1]), 10, 64)
				if bytes.Contains(l, []byte("count=")) {
					stood--
				}
				stood += n
			}
		}
		if stood == conns || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond) // a bounded poll on the log, which has no event to wait on
	}
	if stood != conns {
		t.Fatalf("log lines stand for %d handshake timeouts, want %d:\n%s", stood, conns, ln.log.String())
	}
	if lines > 10 {
		t.Fatalf("%d log lines for %d handshake timeouts: not rate-limited", lines, conns)
	}
}

// TestClientPipelinedFramesNotTimedOut: a client that keeps sending, each write ending inside a
// frame, is never closed by the frame timeout: each frame's clock starts at its own first byte.
func TestClientPipelinedFramesNotTimedOut(t *testing.T) {
	const ticks = 40
	ln := newLimitsNode(t, ring.BackendAuto, &echoHandler{}, func(c *shard.ClientConfig) { c.FrameTimeoutTicks = ticks })
	c, refused := dialClient(t, ln.ClientAddr(), "")
	if refused != nil {
		t.Fatal(string(refused.Message))
	}
	replies := make(chan error, 1)
	go func() { // read every reply, so the connection is never stopped at its outbox bound
		for {
			if _, _, err := readClientFrame(c); err != nil {
				replies <- err
				return
			}
		}
	}()
	var stream []byte
	for id := uint64(1); id <= 20000; id++ {
		stream = append(stream, fetchFrame(id, 3)...)
	}
	chunk := len(fetchFrame(1, 3)) + 93 // 349 and 256 are coprime: a write ends on a frame's last byte once in 256
	start := tickClock(ln.Shards()[0])
	for off := 0; off < len(stream) && tickClock(ln.Shards()[0]) < start+3*ticks; off += chunk {
		if _, err := c.Write(stream[off:min(off+chunk, len(stream))]); err != nil {
			t.Fatalf("write after %d ticks: %v", tickClock(ln.Shards()[0])-start, err)
		}
		time.Sleep(time.Millisecond) // a pause between writes, never near the bound
	}
	if ran := tickClock(ln.Shards()[0]) - start; ran < 3*ticks {
		t.Skipf("the writes took only %d ticks", ran)
	}
	if got := ln.closed(t, "client", "frame_timeout"); got != 0 {
		t.Fatalf("a client sending without pause closed %d times for a frame timeout", got)
	}
	select {
	case err := <-replies:
		t.Fatalf("connection failed: %v", err)
	default:
	}
}

// TestClientGoneMidFrame: a client that closes with part of a request sent is counted and logged;
// one that closes between requests is not.
func TestClientGoneMidFrame(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b ring.Backend) {
		ln := newLimitsNode(t, b, &echoHandler{}, nil)
		clean, refused := dialClient(t, ln.ClientAddr(), "")
		if refused != nil {
			t.Fatal(string(refused.Message))
		}
		request(t, clean, 1, 3, 1)
		clean.Close()
		mid, refused := dialClient(t, ln.ClientAddr(), "")
		if refused != nil {
			t.Fatal(string(refused.Message))
		}
		if _, err := mid.Write(fetchFrame(2, 3)[:100]); err != nil {
			t.Fatal(err)
		}
		ln.w.wait(t, "both closed", func() bool {
			return ln.Shards()[0].Stats().Client.Accepted.Load() == 2 && ln.Shards()[0].Stats().Client.Open.Load() == 1
		})
		mid.Close()
		ln.waitClosed(t, "closed_mid_frame", 1)
		ln.w.wait(t, "both closed", func() bool { return ln.Shards()[0].Stats().Client.Open.Load() == 0 })
		if got := ln.closed(t, "client", "closed_mid_frame"); got != 1 {
			t.Fatalf("closed_mid_frame %d, want 1 (the clean close is not counted)", got)
		}
		if !regexp.MustCompile(`reason=closed_mid_frame .*missing=\d+`).MatchString(ln.log.String()) {
			t.Fatalf("no log line names the close mid-frame:\n%s", ln.log.String())
		}
	})
}

// TestClientLimitsConfigRefused: the relations between the client bounds are checked, each refusal
// naming its options.
func TestClientLimitsConfigRefused(t *testing.T) {
	for _, tc := range []struct {
		edit func(*shard.ClientConfig)
		want string
	}{
		{func(c *shard.ClientConfig) { c.FrameBytesMax, c.PendingBytesMax = 8192, 4096 },
			"client pending bytes max 4096 is below client frame bytes max 8192"},
		{func(c *shard.ClientConfig) { c.ConnectionsMax = -1 }, "client connections max -1 is below 1"},
		{func(c *shard.ClientConfig) { c.HandshakeTimeoutTicks, c.IdleTimeoutTicks = 100, 50 },
			"client idle timeout (50 ticks) is below the client handshake timeout (100 ticks)"},
	} {
		cfg := shard.Config{Node: 1}
		tc.edit(&cfg.Client)
		err := cfg.Validate()
		if !errors.Is(err, shard.ErrConfig) || !regexp.MustCompile(regexp.QuoteMeta(tc.want)).MatchString(err.Error()) {
			t.Errorf("want ErrConfig naming %q, got %v", tc.want, err)
		}
	}
	ok := shard.Config{Node: 1, Client: shard.ClientConfig{HandshakeTimeoutTicks: 100, IdleTimeoutTicks: shard.TimeoutNever}}
	if err := ok.Validate(); err != nil {
		t.Fatalf("an idle timeout turned off refused: %v", err)
	}
}

// TestClientShardFull: a shard holds ClientConnsShardMax(ring entries) client connections; one more
// is closed at once, counted and logged, and the shard's own work goes on.
func TestClientShardFull(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b ring.Backend) {
		const entries = 16
		ln := newLimitsNodeRing(t, b, entries)
		held := shard.ClientConnsShardMax(entries)
		for range held - 1 {
			if _, refused := dialClient(t, ln.ClientAddr(), ""); refused != nil {
				t.Fatal(string(refused.Message))
			}
		}
		c, refused := dialClient(t, ln.ClientAddr(), "")
		if refused != nil {
			t.Fatal(string(refused.Message))
		}
		over, err := net.Dial("tcp", ln.ClientAddr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer over.Close()
		expectClosed(t, over, "connection past the shard's share of its ring")
		if got := ln.closed(t, "client", "shard_full"); got != 1 {
			t.Fatalf("shard_full closes %d, want 1", got)
		}
		if !regexp.MustCompile(`reason=shard_full .*ring_entries=16`).MatchString(ln.log.String()) {
			t.Fatalf("no log line names the shard's limit:\n%s", ln.log.String())
		}
		request(t, c, 1, 3, 1)
	})
}

// TestPeerListenerClosesCountedByReason: on the peer listener too, a refused handshake and one that
// never comes are counted by reason and logged.
func TestPeerListenerClosesCountedByReason(t *testing.T) {
	ln := newLimitsNode(t, ring.BackendAuto, &echoHandler{}, nil)
	junk, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer junk.Close()
	if _, err := junk.Write(bytes.Repeat([]byte{0xa5}, wire.HeaderSize)); err != nil {
		t.Fatal(err)
	}
	silent, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	expectClosed(t, junk, "a peer handshake of junk")
	expectClosed(t, silent, "a peer that sends no handshake")
	ln.w.wait(t, "both counted", func() bool {
		return ln.closed(t, "peer", "handshake_refused") == 1 && ln.closed(t, "peer", "handshake_timeout") == 1
	})
	for _, r := range []string{"handshake_refused", "handshake_timeout"} {
		if !regexp.MustCompile(`listener=peer reason=` + r).MatchString(ln.log.String()) {
			t.Fatalf("no log line names the peer's %s:\n%s", r, ln.log.String())
		}
	}
}
