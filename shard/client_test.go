package shard_test

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringstream/ringstream/internal/allocs"
	"github.com/ringstream/ringstream/ring"
	"github.com/ringstream/ringstream/shard"
	"github.com/ringstream/ringstream/wire"
)

// echoHandler answers every request with an error reply naming the shard it ran on, so a test sees
// where each request was served. With hold set it keeps the requests instead, to be answered later.
type echoHandler struct {
	mu   sync.Mutex
	hold bool
	held []shard.ClientRequest
}

func (e *echoHandler) OnClientRequest(s *shard.Shard, req shard.ClientRequest, h *wire.Header, body []byte) {
	e.mu.Lock()
	hold := e.hold
	if hold {
		e.held = append(e.held, req)
	}
	e.mu.Unlock()
	if !hold {
		answer(s, req)
	}
}

func answer(s *shard.Shard, req shard.ClientRequest) {
	f := wire.AppendErrorReply(nil, wire.From{Cluster: testCluster, Node: 1}, &wire.ErrorReply{
		RequestID: req.RequestID, Stream: req.Stream, Code: wire.CodeUnknownStream,
		Message: fmt.Appendf(nil, "served on shard %d for connection shard %d", s.Index(), req.Shard)})
	if err := s.ReplyClient(req, f); err != nil {
		panic(err)
	}
}

func newClientNode(t *testing.T, b ring.Backend, shards int, secret string, h shard.ClientHandler,
	edit func(*shard.Config)) *shard.Node {
	t.Helper()
	return newClientNodeW(t, b, shards, secret, h, nil, edit)
}

// newClientNodeW is newClientNode with a watcher on the shards' ticks.
func newClientNodeW(t *testing.T, b ring.Backend, shards int, secret string, h shard.ClientHandler, w *watcher,
	edit func(*shard.Config)) *shard.Node {
	t.Helper()
	cfg := shard.Config{Node: 1, Shards: shards, Ring: ring.Config{Backend: b},
		ClientListen: netip.MustParseAddrPort("127.0.0.1:0"), Secret: []byte(secret)}
	if edit != nil {
		edit(&cfg)
	}
	n := newNetNodeCfg(t, cfg, w)
	if h != nil {
		if err := n.SetClientHandler(h); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.Start(nil); err != nil {
		t.Fatal(err)
	}
	return n
}

func clientTotals(n *shard.Node) (accepted, handshakeErr, auth, timeouts, routed, bad, broken, dropped, pushback uint64) {
	for _, s := range n.Shards() {
		c := &s.Stats().Client
		accepted += c.Accepted.Load()
		handshakeErr += c.HandshakeErrors.Load()
		auth += c.AuthRefused.Load()
		timeouts += c.HandshakeTimeouts.Load()
		routed += c.Routed.Load()
		bad += c.BadRequests.Load()
		broken += c.BrokenFrames.Load()
		dropped += c.RepliesDropped.Load()
		pushback += c.Pushback.Load()
	}
	return
}

// readClientFrame reads one whole frame from c, checked.
func readClientFrame(c net.Conn) (wire.Header, []byte, error) {
	_ = c.SetReadDeadline(time.Now().Add(liveness))
	buf := make([]byte, wire.HeaderSize)
	if _, err := io.ReadFull(c, buf); err != nil {
		return wire.Header{}, nil, err
	}
	h, err := wire.ParseHeader(buf)
	if err != nil {
		return wire.Header{}, nil, err
	}
	buf = append(buf, make([]byte, h.BodySize)...)
	if _, err := io.ReadFull(c, buf[wire.HeaderSize:]); err != nil {
		return wire.Header{}, nil, err
	}
	return wire.ParseFrame(buf)
}

// readError reads a frame that must be an error reply.
func readError(t *testing.T, c net.Conn) wire.ErrorReply {
	t.Helper()
	h, body, err := readClientFrame(c)
	if err != nil {
		t.Fatalf("reading a reply: %v", err)
	}
	e, err := wire.DecodeErrorReply(&h, body)
	if err != nil {
		t.Fatalf("reply is not an error reply (%s): %v", h.Command, err)
	}
	return e
}

// expectClosed reads until the node closes the connection.
func expectClosed(t *testing.T, c net.Conn, what string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(liveness))
	if _, err := io.Copy(io.Discard, c); err != nil && !errors.Is(err, net.ErrClosed) &&
		!strings.Contains(err.Error(), "reset") {
		t.Fatalf("%s: want the node to close the connection, got %v", what, err)
	}
}

// dialClient connects and runs the client handshake with secret. The node's refusal, if any, is
// returned as the error reply it sent.
func dialClient(t *testing.T, addr netip.AddrPort, secret string) (net.Conn, *wire.ErrorReply) {
	t.Helper()
	c, err := net.Dial("tcp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	hello := wire.ClientHello{RequestID: 1, Cluster: testCluster, Revision: wire.Revision}
	if secret != "" {
		_, _ = rand.Read(hello.Nonce[:])
	}
	if _, err := c.Write(wire.AppendClientHello(nil, &hello)); err != nil {
		t.Fatal(err)
	}
	h, body, err := readClientFrame(c)
	if err != nil {
		t.Fatalf("reading the challenge: %v", err)
	}
	if h.Command == wire.CommandErrorReply {
		e, err := wire.DecodeErrorReply(&h, body)
		if err != nil {
			t.Fatal(err)
		}
		return c, &e
	}
	ch, err := wire.DecodeClientChallenge(&h, body)
	if err != nil {
		t.Fatal(err)
	}
	// The proof is sent whatever VerifyClientChallenge says: the node must refuse it on its own.
	_ = wire.VerifyClientChallenge([]byte(secret), &hello, &ch)
	p := wire.ClientProof{RequestID: 2}
	if secret != "" {
		p.Proof = wire.ClientHelloProof([]byte(secret), &hello, &ch)
	}
	if _, err := c.Write(wire.AppendClientProof(nil, testCluster, &p)); err != nil {
		t.Fatal(err)
	}
	return c, nil
}

func fetchFrame(id, stream uint64) []byte {
	return wire.AppendFetch(nil, wire.From{Cluster: testCluster}, &wire.Fetch{RequestID: id, Stream: stream, BytesMax: 1})
}

// request sends a fetch for stream and checks that the shard owning it served it.
func request(t *testing.T, c net.Conn, id, stream uint64, shards int) {
	t.Helper()
	if _, err := c.Write(fetchFrame(id, stream)); err != nil {
		t.Fatal(err)
	}
	e := readError(t, c)
	want := fmt.Sprintf("served on shard %d ", shard.ShardOf(stream, shards))
	if e.RequestID != id || e.Stream != stream || !strings.HasPrefix(string(e.Message), want) {
		t.Fatalf("request %d for stream %d: reply %d for stream %d %q, want %q...", id, stream, e.RequestID,
			e.Stream, e.Message, want)
	}
}

func TestClientReachesStreamOnAnotherShard(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b ring.Backend) {
		const shards = 3
		n := newClientNode(t, b, shards, "s3cret", &echoHandler{}, nil)
		defer stopWithin(t, n, liveness, "stop")
		for conn := range 6 {
			c, refused := dialClient(t, n.ClientAddr(), "s3cret")
			if refused != nil {
				t.Fatalf("connection %d refused: %s", conn, refused.Message)
			}
			for stream := uint64(1); stream <= 9; stream++ {
				request(t, c, stream*100+uint64(conn), stream, shards)
			}
			// A request naming no stream is served on the connection's own shard.
			lookup := wire.AppendLookupStream(nil, wire.From{Cluster: testCluster}, &wire.LookupStream{RequestID: 7, Name: []byte("s")})
			if _, err := c.Write(lookup); err != nil {
				t.Fatal(err)
			}
			var on, of int
			e := readError(t, c)
			if _, err := fmt.Sscanf(string(e.Message), "served on shard %d for connection shard %d", &on, &of); err != nil || on != of {
				t.Fatalf("lookup served on shard %d for a connection on shard %d (%q)", on, of, e.Message)
			}
		}
		accepted, _, _, _, routed, _, _, _, _ := clientTotals(n)
		if accepted != 6 || routed < 6*(9-5) {
			// Of 9 streams spread on 3 shards, at most 5 live on any one shard (ShardOf is fixed).
			t.Fatalf("accepted %d, routed %d", accepted, routed)
		}
		// Every shard accepts on its own socket: the kernel spreads connections over all of them
		// (64 connections all missing one of 3 shards: odds about 1e-11).
		idle := func() int {
			for i, s := range n.Shards() {
				if s.Stats().Client.Accepted.Load() == 0 {
					return i
				}
			}
			return -1
		}
		for extra := 0; idle() >= 0 && extra < 64; extra++ {
			c, refused := dialClient(t, n.ClientAddr(), "s3cret")
			if refused != nil {
				t.Fatal(string(refused.Message))
			}
			request(t, c, 1, 2, shards) // the handshake done: the accept is counted
		}
		if i := idle(); i >= 0 {
			t.Fatalf("shard %d accepted no client connection of 70", i)
		}
	})
}

func TestClientSecretRefusedAndCounted(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b ring.Backend) {
		n := newClientNode(t, b, 2, "s3cret", &echoHandler{}, nil)
		defer stopWithin(t, n, liveness, "stop")
		good, refused := dialClient(t, n.ClientAddr(), "s3cret")
		if refused != nil {
			t.Fatalf("right secret refused: %s", refused.Message)
		}
		for i, secret := range []string{"wrong", ""} {
			c, refused := dialClient(t, n.ClientAddr(), secret)
			if refused == nil { // the hello passed: the proof is refused
				e := readError(t, c)
				refused = &e
			}
			if refused.Code != wire.CodeInvalidRequest || !strings.Contains(string(refused.Message), "secret") {
				t.Fatalf("secret %q: refusal %d %q", secret, refused.Code, refused.Message)
			}
			expectClosed(t, c, "refused client")
			if _, herr, auth, _, _, _, _, _, _ := clientTotals(n); herr != uint64(i+1) || auth != uint64(i+1) {
				t.Fatalf("after %d refusals: handshake errors %d, auth refused %d", i+1, herr, auth)
			}
		}
		request(t, good, 1, 5, 2)
	})
}

func TestClientSilentClosedAfterBound(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b ring.Backend) {
		var ticks uint64 = 30
		n := newClientNode(t, b, 2, "", &echoHandler{}, func(c *shard.Config) { c.HandshakeTimeoutTicks = ticks })
		defer stopWithin(t, n, liveness, "stop")
		before := make([]uint64, 2)
		for i, s := range n.Shards() {
			before[i] = tickClock(s)
		}
		silent, err := net.Dial("tcp", n.ClientAddr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer silent.Close()
		half, err := net.Dial("tcp", n.ClientAddr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer half.Close()
		hello := wire.AppendClientHello(nil, &wire.ClientHello{Cluster: testCluster, Revision: wire.Revision})
		if _, err := half.Write(hello[:100]); err != nil {
			t.Fatal(err)
		}
		expectClosed(t, silent, "silent client")
		expectClosed(t, half, "client stopping mid-hello")
		// Each shard that accepted one of them ran the whole bound in between (the bound is in
		// ticks, not time).
		for i, s := range n.Shards() {
			if ran := tickClock(s) - before[i]; s.Stats().Client.Accepted.Load() > 0 && ran < ticks {
				t.Fatalf("shard %d closed a client after %d ticks, before the bound of %d", i, ran, ticks)
			}
		}
		if _, _, _, timeouts, _, _, _, _, _ := clientTotals(n); timeouts != 2 {
			t.Fatalf("handshake timeouts %d, want 2", timeouts)
		}
		c, refused := dialClient(t, n.ClientAddr(), "")
		if refused != nil {
			t.Fatal(string(refused.Message))
		}
		request(t, c, 1, 3, 2)
	})
}

func TestClientBadFramesDisturbNoOne(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b ring.Backend) {
		n := newClientNode(t, b, 2, "", &echoHandler{}, func(c *shard.Config) { c.Client.FrameBytesMax = 4096 + wire.HeaderSize })
		defer stopWithin(t, n, liveness, "stop")
		good, _ := dialClient(t, n.ClientAddr(), "")
		request(t, good, 1, 4, 2)

		// A fetch of 0 bytes: sound header, bad contents. Answered, and the connection serves on.
		h := wire.Header{Command: wire.CommandFetch, Cluster: testCluster, Group: 4}
		binary.LittleEndian.PutUint64(h.Area[:], 77)
		bad := wire.BeginFrame(nil, &h)
		wire.EndFrame(bad, 0)
		malformed, _ := dialClient(t, n.ClientAddr(), "")
		if _, err := malformed.Write(bad); err != nil {
			t.Fatal(err)
		}
		if e := readError(t, malformed); e.RequestID != 77 || e.Stream != 4 || e.Code != wire.CodeBadSize ||
			!strings.Contains(string(e.Message), "bytes_max") {
			t.Fatalf("malformed fetch: reply %d %d %q", e.RequestID, e.Code, e.Message)
		}
		request(t, malformed, 2, 5, 2)

		// A reply command sent as a request: refused by name.
		notReq := wire.AppendErrorReply(nil, wire.From{Cluster: testCluster}, &wire.ErrorReply{RequestID: 78, Code: wire.CodeInternal})
		if _, err := malformed.Write(notReq); err != nil {
			t.Fatal(err)
		}
		if e := readError(t, malformed); e.RequestID != 78 || !strings.Contains(string(e.Message), "not a client request") {
			t.Fatalf("reply sent as a request: %d %q", e.RequestID, e.Message)
		}

		// Too large: told why, then closed.
		big, _ := dialClient(t, n.ClientAddr(), "")
		produce := wire.AppendProduce(nil, wire.From{Cluster: testCluster}, &wire.Produce{RequestID: 9, Stream: 4, Count: 1,
			Batch: make([]byte, 8192)})
		if _, err := big.Write(produce); err != nil {
			t.Fatal(err)
		}
		if e := readError(t, big); e.Code != wire.CodeInvalidRequest || !strings.Contains(string(e.Message), "limit") {
			t.Fatalf("oversized frame: %d %q", e.Code, e.Message)
		}
		expectClosed(t, big, "oversized frame")

		// A header that fails its checks: closed.
		garbage, _ := dialClient(t, n.ClientAddr(), "")
		if _, err := garbage.Write(make([]byte, wire.HeaderSize)); err != nil {
			t.Fatal(err)
		}
		expectClosed(t, garbage, "garbage header")

		request(t, good, 3, 4, 2)
		request(t, malformed, 4, 7, 2)
		if _, _, _, _, _, badN, broken, _, _ := clientTotals(n); badN != 2 || broken != 2 {
			t.Fatalf("bad requests %d, broken frames %d; want 2 and 2", badN, broken)
		}
	})
}

func TestClientPushbackAndReplyToClosed(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b ring.Backend) {
		h := &echoHandler{hold: true}
		var w watcher
		n := newClientNodeW(t, b, 2, "", h, &w, func(c *shard.Config) { c.Client.RequestsMax = 2 })
		defer stopWithin(t, n, liveness, "stop")
		c, _ := dialClient(t, n.ClientAddr(), "")
		for id := uint64(1); id <= 5; id++ {
			if _, err := c.Write(fetchFrame(id, id)); err != nil {
				t.Fatal(err)
			}
		}
		held := func() []shard.ClientRequest {
			h.mu.Lock()
			defer h.mu.Unlock()
			return append([]shard.ClientRequest(nil), h.held...)
		}
		w.wait(t, "two requests handed on", func() bool { return len(held()) >= 2 })
		// The third waits in the connection until one is answered: 20 more ticks change nothing.
		ticks := n.Shards()[0].Stats().Ticks.Load()
		w.wait(t, "20 ticks", func() bool { return n.Shards()[0].Stats().Ticks.Load() >= ticks+20 })
		if got := held(); len(got) != 2 {
			t.Fatalf("%d requests handed on with RequestsMax 2", len(got))
		}
		if _, _, _, _, _, _, _, _, pb := clientTotals(n); pb != 1 {
			t.Fatalf("pushback counted %d times over 20 ticks of one stop, want 1", pb)
		}
		answerOn := func(req shard.ClientRequest) {
			if err := n.Run(shard.ShardOf(req.Stream, 2), func(s *shard.Shard) { answer(s, req) }); err != nil {
				t.Fatal(err)
			}
		}
		first := held()[0]
		answerOn(first)
		if e := readError(t, c); e.RequestID != first.RequestID {
			t.Fatalf("reply %d, want %d", e.RequestID, first.RequestID)
		}
		w.wait(t, "a third request handed on", func() bool { return len(held()) >= 3 })
		if got := held(); len(got) != 3 {
			t.Fatalf("after one answer: %d handed on, want 3", len(got))
		}
		c.Close()
		open := func() (o int64) {
			for _, s := range n.Shards() {
				o += s.Stats().Client.Open.Load()
			}
			return o
		}
		// A connection that stopped reading sees the close once its answers let it read again.
		answerOn(held()[1])
		answerOn(held()[2])
		w.wait(t, "the connection closed", func() bool { return open() == 0 && len(held()) == 5 })
		answerOn(held()[3])
		w.wait(t, "the reply to a closed connection dropped", func() bool {
			_, _, _, _, _, _, _, dropped, _ := clientTotals(n)
			return dropped == 1
		})
	})
}

func TestClientStopWithConnectionsOpen(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b ring.Backend) {
		h := &echoHandler{hold: true}
		n := newClientNode(t, b, 2, "s", h, nil)
		var conns []net.Conn
		for range 4 {
			c, _ := dialClient(t, n.ClientAddr(), "s")
			if _, err := c.Write(fetchFrame(1, 3)); err != nil {
				t.Fatal(err)
			}
			conns = append(conns, c)
		}
		mid, err := net.Dial("tcp", n.ClientAddr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer mid.Close()
		stopWithin(t, n, liveness, "stop with clients")
		for _, c := range append(conns, mid) {
			expectClosed(t, c, "client at Stop")
		}
	})
}

// fixedHandler answers with an error reply built in a buffer it reuses (one shard only).
type fixedHandler struct{ buf []byte }

func (f *fixedHandler) OnClientRequest(s *shard.Shard, req shard.ClientRequest, h *wire.Header, body []byte) {
	f.buf = wire.AppendErrorReply(f.buf[:0], wire.From{Cluster: testCluster, Node: 1},
		&wire.ErrorReply{RequestID: req.RequestID, Stream: req.Stream, Code: wire.CodeUnknownStream})
	if err := s.ReplyClient(req, f.buf); err != nil {
		panic(err)
	}
}

// A request served on the connection's own shard, and its reply, allocate nothing on the node.
func TestClientRequestAllocatesNothing(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b ring.Backend) {
		n := newClientNode(t, b, 1, "", &fixedHandler{}, nil)
		defer stopWithin(t, n, liveness, "stop")
		c, _ := dialClient(t, n.ClientAddr(), "")
		req := fetchFrame(1, 9)
		reply := make([]byte, wire.HeaderSize)
		trip := func() {
			if _, err := c.Write(req); err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(c, reply); err != nil {
				t.Fatal(err)
			}
		}
		for range 50 {
			trip()
		}
		if got := allocs.In(t, 500, trip); got != 0 {
			t.Fatalf("%d allocations in 500 requests and replies, want 0", got)
		}
	})
}

func TestClientConfigRefused(t *testing.T) {
	for _, tc := range []struct {
		edit func(*shard.ClientConfig)
		want string
	}{
		{func(c *shard.ClientConfig) { c.OutboxBytes = 100 }, "client outbox bytes 100"},
		{func(c *shard.ClientConfig) { c.RequestsMax = -1 }, "client requests max -1"},
		{func(c *shard.ClientConfig) { c.FrameBytesMax = wire.FrameSizeMax + 1 }, "client frame bytes max"},
		{func(c *shard.ClientConfig) { c.FrameBytesMax = 10 }, "client frame bytes max 10"},
	} {
		cfg := shard.Config{Node: 1}
		tc.edit(&cfg.Client)
		err := cfg.Validate()
		if !errors.Is(err, shard.ErrConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("want ErrConfig naming %q, got %v", tc.want, err)
		}
	}
	if err := (shard.Config{Node: 1}).Validate(); err != nil {
		t.Fatalf("defaults refused: %v", err)
	}
}
