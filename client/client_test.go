package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringstream/ringstream/wire"
)

func dialTest(t testing.TB, cfg Config) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// produceOne appends records through a fresh producer and returns its confirms.
func produceOne(t *testing.T, c *Client, cfg ProducerConfig, recs ...string) ([]Confirmed, error) {
	t.Helper()
	var mu sync.Mutex
	var got []Confirmed
	cfg.OnConfirm = func(cf Confirmed) {
		mu.Lock()
		got = append(got, cf)
		mu.Unlock()
	}
	p, err := c.Producer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	for _, r := range recs {
		if err := p.Append(ctx, []byte(r)); err != nil {
			_ = p.Close(ctx)
			return got, err
		}
	}
	err = p.Close(ctx)
	mu.Lock()
	defer mu.Unlock()
	return got, err
}

// A produce refused with CodeNotOwner is looked up again and sent to the new owner, with the same
// producer id and sequence.
func TestRedirectOnNotOwner(t *testing.T) {
	var seed, stale, owner *fakeNode
	var lookups int
	var mu sync.Mutex
	owner = startFake(t, 3, nil)
	st := newFakeStream(owner)
	owner.handle = st.handle
	stale = startFake(t, 2, func(h *wire.Header, body []byte) ([]byte, bool) {
		r := wire.AppendErrorReply(nil, stale.from(), &wire.ErrorReply{RequestID: reqID(h), Stream: h.Group,
			Code: wire.CodeNotOwner, Owner: 3, Message: []byte("not the owner")})
		return r, false
	})
	seed = startFake(t, 1, func(h *wire.Header, body []byte) ([]byte, bool) {
		mu.Lock()
		defer mu.Unlock()
		lookups++
		if lookups == 1 {
			return seed.lookupReply(h, 2, stale.addr), false // an old view: the owner moved since
		}
		return seed.lookupReply(h, 3, owner.addr), false
	})
	c := dialTest(t, testConfig(seed.addr))
	got, err := produceOne(t, c, ProducerConfig{Stream: "orders", Linger: time.Hour, ProducerID: 42}, "a")
	if err != nil {
		t.Fatal(err)
	}
	if stale.count(wire.CommandProduce) != 1 {
		t.Fatalf("stale owner saw %d produces, want 1", stale.count(wire.CommandProduce))
	}
	if len(st.produces) != 1 || st.produces[0].ProducerID != 42 || st.produces[0].Sequence != 1 {
		t.Fatalf("new owner saw %+v, want one produce of producer 42 sequence 1", st.produces)
	}
	if len(got) != 1 || got[0].BaseOffset != 0 || got[0].Count != 1 {
		t.Fatalf("confirms %+v, want one batch of 1 at 0", got)
	}
	if lookups != 2 {
		t.Fatalf("%d lookups, want 2", lookups)
	}
}

// An owner that appended a batch and died before answering: the retry carries the same producer id
// and sequence, the owner answers it from its producer table, and the records are in the log once.
func TestRetrySameSequenceNeverDuplicates(t *testing.T) {
	n, st := ownerCluster(t)
	st.dropAfterAppend = 2 // the first two answers are lost with their connection
	c := dialTest(t, testConfig(n.addr))
	var got []Confirmed
	var mu sync.Mutex
	p, err := c.Producer(ProducerConfig{Stream: "orders", Linger: -1, OnConfirm: func(cf Confirmed) {
		mu.Lock()
		got = append(got, cf)
		mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	for i := range 3 {
		if err := p.Append(ctx, fmt.Appendf(nil, "r%d", i)); err != nil {
			t.Fatal(err)
		}
		if err := p.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if st.tail != 3 {
		t.Fatalf("log holds %d records, want 3 (a retry appended twice?)", st.tail)
	}
	seqs := make([]uint64, len(st.produces))
	for i, m := range st.produces {
		seqs[i] = m.Sequence
		if m.ProducerID != p.ID() {
			t.Fatalf("produce %d carries producer %d, want %d", i, m.ProducerID, p.ID())
		}
	}
	if fmt.Sprint(seqs) != "[1 1 2 2 3]" {
		t.Fatalf("sequences sent %v, want [1 1 2 2 3]", seqs)
	}
	want := "[{0 1 1 1 true} {1 1 1 2 true} {2 1 1 3 false}]"
	if fmt.Sprint(got) != want {
		t.Fatalf("confirms %v, want %s", got, want)
	}
}

// A stream the cluster has no owner for is retried a bounded number of times, then reported clearly.
func TestNoOwnerIsAClearError(t *testing.T) {
	var n *fakeNode
	n = startFake(t, 1, func(h *wire.Header, body []byte) ([]byte, bool) {
		return n.lookupReply(h, 0, ""), false
	})
	c := dialTest(t, testConfig(n.addr))
	_, err := produceOne(t, c, ProducerConfig{Stream: "orders", Linger: -1}, "a")
	if !errors.Is(err, ErrNoOwner) {
		t.Fatalf("err %v, want ErrNoOwner", err)
	}
	if !strings.Contains(err.Error(), `"orders"`) || !strings.Contains(err.Error(), "gave up after 5 attempts") {
		t.Fatalf("err %q does not name the stream and the attempts", err)
	}
	if got := n.count(wire.CommandLookupStream); got != 5 {
		t.Fatalf("%d lookups, want 5 (Retries 4 + 1)", got)
	}
	if _, err := c.Lookup(testCtx(t), "orders"); !errors.Is(err, ErrNoOwner) {
		t.Fatalf("Lookup: %v, want ErrNoOwner", err)
	}
}

// Refusals that cannot clear are returned at once as *Error matching their sentinel.
func TestRefusalsMapToSentinels(t *testing.T) {
	var n *fakeNode
	n = startFake(t, 1, func(h *wire.Header, body []byte) ([]byte, bool) {
		switch h.Command {
		case wire.CommandCreateStream:
			return n.refuse(h, wire.CodeStreamExists, "name taken"), false
		case wire.CommandDeleteStream, wire.CommandLookupStream:
			return n.refuse(h, wire.CodeUnknownStream, "no such stream"), false
		}
		return n.refuse(h, wire.CodeInvalidRequest, "?"), false
	})
	c := dialTest(t, testConfig(n.addr))
	ctx := testCtx(t)
	_, err := c.CreateStream(ctx, "orders", StreamOptions{})
	var e *Error
	if !errors.Is(err, ErrStreamExists) || !errors.As(err, &e) || e.Node != 1 || e.Message != "name taken" {
		t.Fatalf("create: %v, want ErrStreamExists from node 1", err)
	}
	if err := c.DeleteStream(ctx, "orders"); !errors.Is(err, ErrUnknownStream) {
		t.Fatalf("delete: %v, want ErrUnknownStream", err)
	}
	if _, err := c.Fetch(ctx, "orders", 0, FetchOptions{}); !errors.Is(err, ErrUnknownStream) {
		t.Fatalf("fetch: %v, want ErrUnknownStream", err)
	}
	if n.count(wire.CommandCreateStream) != 1 || n.count(wire.CommandDeleteStream) != 1 {
		t.Fatal("a refusal that cannot clear was retried")
	}
	if _, err := c.CreateStream(ctx, "bad\nname", StreamOptions{}); !errors.Is(err, ErrInvalidName) {
		t.Fatalf("create with a control character: %v, want ErrInvalidName", err)
	}
	if _, err := c.CreateStream(ctx, "x", StreamOptions{Copies: 3, Policy: Policy{Kind: wire.PolicyCount}}); !errors.Is(err, ErrInvalidPolicy) {
		t.Fatalf("count policy without a count: %v, want ErrInvalidPolicy", err)
	}
}

// TestNamesCheckedByWiresRule: the client refuses, before sending anything, the names wire's rule
// refuses (issue 21: the client's rule took 'orders/eu', the metadata's did not), with the rule's text;
// and copy counts and policies by theirs.
func TestNamesCheckedByWiresRule(t *testing.T) {
	n := startFake(t, 1, func(h *wire.Header, body []byte) ([]byte, bool) { return nil, false })
	c := dialTest(t, testConfig(n.addr))
	ctx := testCtx(t)
	for _, name := range []string{"orders/eu", "a b/c", "naïve", ".", ".."} {
		_, err := c.CreateStream(ctx, name, StreamOptions{})
		if !errors.Is(err, ErrInvalidName) || !strings.Contains(err.Error(), wire.StreamNameRule) {
			t.Errorf("create %q: %v, want ErrInvalidName with the rule", name, err)
		}
		if err := c.DeleteStream(ctx, name); !errors.Is(err, ErrInvalidName) {
			t.Errorf("delete %q: %v", name, err)
		}
		if err := c.CommitCursor(ctx, "orders", name, 1); !errors.Is(err, ErrInvalidName) ||
			!strings.Contains(err.Error(), wire.ConsumerNameRule) {
			t.Errorf("cursor of consumer %q: %v", name, err)
		}
	}
	if _, err := c.CreateStream(ctx, "x", StreamOptions{Copies: 8}); !errors.Is(err, ErrInvalidCopies) {
		t.Errorf("8 copies: %v, want ErrInvalidCopies", err)
	}
	if _, err := c.CreateStream(ctx, "x", StreamOptions{Copies: 2, Policy: Policy{Kind: wire.PolicyCount, Count: 3}}); !errors.Is(err, ErrInvalidPolicy) {
		t.Errorf("count 3 of 2 copies: %v, want ErrInvalidPolicy", err)
	}
	if got := n.count(wire.CommandCreateStream) + n.count(wire.CommandDeleteStream) + n.count(wire.CommandCommitCursor); got != 0 {
		t.Errorf("%d requests reached the node", got)
	}
}

// TestRuleRefusalsAreFinal: a node's refusal of a value by one of wire's rules matches its sentinel
// and ErrInvalidRequest, and is not retried.
func TestRuleRefusalsAreFinal(t *testing.T) {
	var n *fakeNode
	n = startFake(t, 1, func(h *wire.Header, body []byte) ([]byte, bool) {
		return n.refuse(h, wire.CodeBadCopies, "5 copies on a cluster of 3 nodes: "+wire.CopiesRule), false
	})
	c := dialTest(t, testConfig(n.addr))
	_, err := c.CreateStream(testCtx(t), "x2", StreamOptions{Copies: 5})
	if !errors.Is(err, ErrInvalidCopies) || !errors.Is(err, ErrInvalidRequest) || errors.Is(err, ErrUnavailable) {
		t.Fatalf("create: %v, want ErrInvalidCopies and ErrInvalidRequest", err)
	}
	if got := n.count(wire.CommandCreateStream); got != 1 {
		t.Fatalf("%d creates sent, want 1 (a rule's refusal is final)", got)
	}
}

// TestNotYetIsRetriedOnTheSameRoute: CodeNotYet (issue 21 finding 2: a new incarnation's copy not open
// yet) is a passing state: the produce is retried without a new lookup until it is taken; and once the
// retries run out the error is ErrNotYet.
func TestNotYetIsRetriedOnTheSameRoute(t *testing.T) {
	var s *fakeStream
	var n *fakeNode
	var notYet atomic.Int32
	notYet.Store(3)
	n = startFake(t, 1, func(h *wire.Header, body []byte) ([]byte, bool) {
		switch {
		case h.Command == wire.CommandLookupStream:
			return n.lookupReply(h, 1, n.addr), false
		case h.Command == wire.CommandProduce && notYet.Add(-1) >= 0:
			return n.refuse(h, wire.CodeNotYet, "copy not open yet"), false
		}
		return s.handle(h, body)
	})
	s = newFakeStream(n)
	c := dialTest(t, testConfig(n.addr))
	if _, err := produceOne(t, c, ProducerConfig{Stream: "orders", Linger: -1}, "a"); err != nil {
		t.Fatalf("produce through three not-yets: %v", err)
	}
	if got := n.count(wire.CommandProduce); got != 4 {
		t.Errorf("%d produces, want 4", got)
	}
	if got := n.count(wire.CommandLookupStream); got != 1 {
		t.Errorf("%d lookups, want 1 (not yet keeps the route)", got)
	}
	notYet.Store(100)
	if _, err := produceOne(t, c, ProducerConfig{Stream: "orders", Linger: -1}, "b"); !errors.Is(err, ErrNotYet) {
		t.Errorf("produce past the retries: %v, want ErrNotYet", err)
	}
}

// Bad bytes from a node are a clear protocol error, never a panic or a hang.
func TestBadFramesFromTheNode(t *testing.T) {
	good := func(n *fakeNode, h *wire.Header) []byte { return n.lookupReply(h, 1, n.addr) }
	cases := []struct {
		name  string
		reply func(n *fakeNode, h *wire.Header) []byte
		want  string
	}{
		{"garbage header", func(*fakeNode, *wire.Header) []byte { return make([]byte, wire.HeaderSize) }, "checksum"},
		{"body checksum", func(n *fakeNode, h *wire.Header) []byte {
			f := good(n, h)
			f[len(f)-1] ^= 1
			return f
		}, "checksum"},
		{"wrong command", func(n *fakeNode, h *wire.Header) []byte {
			return wire.AppendDeleteStreamReply(nil, n.from(), &wire.StreamIDReply{RequestID: reqID(h), Stream: 7})
		}, "delete_stream_reply"},
		{"bad lookup reply", func(n *fakeNode, h *wire.Header) []byte {
			f := good(n, h)
			return corruptArea(f, 8, 0) // stream 0
		}, "stream 0"},
		{"bad error reply", func(n *fakeNode, h *wire.Header) []byte {
			f := n.refuse(h, wire.CodeInternal, "x")
			return corruptArea(f, 8, 0xee) // unknown code
		}, "error code"},
		{"reply without a request id", func(n *fakeNode, h *wire.Header) []byte {
			return wire.AppendErrorReply(nil, n.from(), &wire.ErrorReply{Code: wire.CodeInvalidRequest,
				Message: []byte("frame too large")})
		}, "frame too large"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var n *fakeNode
			n = startFake(t, 1, func(h *wire.Header, body []byte) ([]byte, bool) { return tc.reply(n, h), false })
			c := dialTest(t, testConfig(n.addr))
			_, err := c.Lookup(testCtx(t), "orders")
			if !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want ErrProtocol naming %q", err, tc.want)
			}
			if got := n.count(wire.CommandLookupStream); got != 1 {
				t.Fatalf("%d lookups: a protocol error was retried", got)
			}
		})
	}
}

// corruptArea sets one byte of a frame's per-command area and fixes its checksums.
func corruptArea(f []byte, off int, v byte) []byte {
	f[wire.AreaOffset+off] = v
	wire.EndFrame(f, 0)
	return f
}

func TestHandshakeRefusals(t *testing.T) {
	n := startFake(t, 1, func(h *wire.Header, body []byte) ([]byte, bool) { return nil, false })
	n.secret = []byte("0123456789abcdef-node")
	ctx := testCtx(t)
	cfg := testConfig(n.addr)
	cfg.Secret = []byte("0123456789abcdef-other")
	if _, err := Dial(ctx, cfg); !errors.Is(err, wire.ErrAuthFailed) {
		t.Fatalf("wrong secret: %v, want wire.ErrAuthFailed", err)
	}
	cfg.Secret = nil
	if _, err := Dial(ctx, cfg); !errors.Is(err, ErrInvalidRequest) || !strings.Contains(err.Error(), "secret") {
		t.Fatalf("no secret: %v, want the node's refusal naming the secret", err)
	}
	cfg.Secret = n.secret
	c, err := Dial(ctx, cfg)
	if err != nil {
		t.Fatalf("right secret: %v", err)
	}
	_ = c.Close()
	cfg.Cluster = 99
	if _, err := Dial(ctx, cfg); !errors.Is(err, ErrInvalidRequest) || !strings.Contains(err.Error(), "cluster") {
		t.Fatalf("wrong cluster: %v, want a refusal naming the cluster", err)
	}
	if _, err := Dial(ctx, Config{Cluster: 1}); !errors.Is(err, ErrConfig) {
		t.Fatalf("no addresses: %v, want ErrConfig", err)
	}
}

// A node that answers nothing is given up after RequestTimeout, and the request goes to another node.
func TestSilentNodeIsLeftAfterRequestTimeout(t *testing.T) {
	silent := startFake(t, 1, func(h *wire.Header, body []byte) ([]byte, bool) { return nil, false })
	var good *fakeNode
	good = startFake(t, 2, func(h *wire.Header, body []byte) ([]byte, bool) { return good.lookupReply(h, 2, good.addr), false })
	cfg := testConfig(silent.addr, good.addr)
	cfg.RequestTimeout = 200 * time.Millisecond
	c := dialTest(t, cfg)
	r, err := c.Lookup(testCtx(t), "orders")
	if err != nil || r.Owner != 2 {
		t.Fatalf("lookup %+v %v, want node 2's answer", r, err)
	}
	if silent.count(wire.CommandLookupStream) == 0 {
		t.Fatal("the silent node was never asked (the test did not test the timeout)")
	}
}

// An owner the metadata names but nobody can reach is reported as ErrOwnerUnreachable, naming the
// stream, the node and its address.
func TestOwnerUnreachableIsAClearError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	_ = ln.Close() // nothing listens there now
	var n *fakeNode
	n = startFake(t, 1, func(h *wire.Header, body []byte) ([]byte, bool) { return n.lookupReply(h, 3, dead), false })
	c := dialTest(t, testConfig(n.addr))
	err = c.CommitCursor(testCtx(t), "orders", "billing", 1)
	if !errors.Is(err, ErrOwnerUnreachable) || !strings.Contains(err.Error(), `"orders"`) ||
		!strings.Contains(err.Error(), "node 3 at "+dead) || !strings.Contains(err.Error(), "gave up after 5 attempts") {
		t.Fatalf("err %v, want ErrOwnerUnreachable naming the stream and node 3 at %s", err, dead)
	}
}
