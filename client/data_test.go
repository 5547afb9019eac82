package client

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringstream/ringstream/wire"
)

// Records produced with each codec come back from fetch in order, at their offsets, and a consumer's
// Poll moves past them.
func TestProduceFetchRoundTripEveryCodec(t *testing.T) {
	for _, codec := range []Codec{CodecNone, CodecZstd, CodecS2} {
		t.Run(codec.String(), func(t *testing.T) {
			n, st := ownerCluster(t)
			c := dialTest(t, testConfig(n.addr))
			ctx := testCtx(t)
			p, err := c.Producer(ProducerConfig{Stream: "orders", Codec: codec, BatchBytes: 256, Linger: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			const count = 100
			for i := range count {
				if err := p.Append(ctx, fmt.Appendf(nil, "record-%03d", i)); err != nil {
					t.Fatal(err)
				}
			}
			if err := p.Close(ctx); err != nil {
				t.Fatal(err)
			}
			if len(st.produces) < 2 {
				t.Fatalf("%d batches: BatchBytes 256 should have split 100 records", len(st.produces))
			}
			for _, m := range st.produces {
				if m.Codec != uint8(codec) {
					t.Fatalf("batch codec %d, want %d", m.Codec, codec)
				}
			}
			cs, err := c.Consumer("orders", 5, FetchOptions{BytesMax: 300})
			if err != nil {
				t.Fatal(err)
			}
			want := uint64(5)
			for want < count {
				recs, err := cs.Poll(ctx)
				if err != nil {
					t.Fatal(err)
				}
				for recs.Next() {
					if recs.Offset() != want || string(recs.Value()) != fmt.Sprintf("record-%03d", want) {
						t.Fatalf("record %d %q, want %d", recs.Offset(), recs.Value(), want)
					}
					want++
				}
				if recs.Err() != nil {
					t.Fatal(recs.Err())
				}
				if cs.Offset() != want {
					t.Fatalf("consumer at %d after records up to %d", cs.Offset(), want)
				}
			}
		})
	}
}

// A fetch at the tail waits (long poll) and answers as soon as records are confirmed there.
func TestFetchLongPoll(t *testing.T) {
	n, _ := ownerCluster(t)
	c := dialTest(t, testConfig(n.addr))
	ctx := testCtx(t)
	cs, err := c.Consumer("orders", 0, FetchOptions{Wait: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 1)
	go func() {
		recs, err := cs.Poll(ctx)
		switch {
		case err != nil:
			got <- err.Error()
		case !recs.Next():
			got <- "empty"
		default:
			got <- string(recs.Value())
		}
	}()
	if _, err := produceOne(t, c, ProducerConfig{Stream: "orders", Linger: -1}, "late"); err != nil {
		t.Fatal(err)
	}
	if v := <-got; v != "late" {
		t.Fatalf("long poll got %q, want the record produced while it waited", v)
	}
	empty, err := c.Fetch(ctx, "orders", 1, FetchOptions{Wait: time.Millisecond})
	if err != nil || empty.Next() || empty.NextOffset() != 1 || empty.ConfirmedTail != 1 {
		t.Fatalf("fetch past the tail: %v %+v, want an empty reply at 1", err, empty)
	}
}

func TestCursors(t *testing.T) {
	n, _ := ownerCluster(t)
	c := dialTest(t, testConfig(n.addr))
	ctx := testCtx(t)
	if _, found, err := c.Cursor(ctx, "orders", "billing"); err != nil || found {
		t.Fatalf("cursor before a commit: found %v err %v", found, err)
	}
	if err := c.CommitCursor(ctx, "orders", "billing", 17); err != nil {
		t.Fatal(err)
	}
	off, found, err := c.Cursor(ctx, "orders", "billing")
	if err != nil || !found || off != 17 {
		t.Fatalf("cursor %d found %v err %v, want 17", off, found, err)
	}
	if err := c.CommitCursor(ctx, "orders", "", 1); !errors.Is(err, ErrInvalidName) {
		t.Fatalf("empty consumer name: %v, want ErrInvalidName", err)
	}
}

func TestStreamAdmin(t *testing.T) {
	var n *fakeNode
	var created wire.CreateStream
	n = startFake(t, 1, func(h *wire.Header, body []byte) ([]byte, bool) {
		switch h.Command {
		case wire.CommandCreateStream:
			m, err := wire.DecodeCreateStream(h, body)
			if err != nil {
				return n.refuse(h, wire.CodeInvalidRequest, err.Error()), false
			}
			created = m
			created.Name = append([]byte(nil), m.Name...)
			return wire.AppendCreateStreamReply(nil, n.from(), &wire.StreamIDReply{RequestID: m.RequestID, Stream: 9,
				Incarnation: 2}), false
		case wire.CommandDeleteStream:
			return wire.AppendDeleteStreamReply(nil, n.from(), &wire.StreamIDReply{RequestID: reqID(h), Stream: 9,
				Incarnation: 2}), false
		case wire.CommandListStreams:
			m, _ := wire.DecodeListStreams(h, body)
			var list []wire.StreamInfo
			for id := m.After + 1; id <= 2500 && len(list) < int(m.Limit); id++ {
				list = append(list, wire.StreamInfo{Stream: id, Incarnation: 1, Copies: 3, Policy: wire.PolicyMajority,
					Name: fmt.Appendf(nil, "s%d", id)})
			}
			more := len(list) > 0 && list[len(list)-1].Stream < 2500
			return wire.AppendListStreamsReply(nil, n.from(), &wire.ListStreamsReply{RequestID: m.RequestID, More: more},
				list), false
		}
		return n.refuse(h, wire.CodeInvalidRequest, "?"), false
	})
	c := dialTest(t, testConfig(n.addr))
	ctx := testCtx(t)
	info, err := c.CreateStream(ctx, "orders", StreamOptions{Copies: 5, Policy: Policy{Kind: wire.PolicyCount, Count: 2}})
	if err != nil {
		t.Fatal(err)
	}
	if info.Stream != 9 || info.Incarnation != 2 || string(created.Name) != "orders" || created.Copies != 5 ||
		created.Policy != wire.PolicyCount || created.ConfirmCount != 2 {
		t.Fatalf("created %+v from request %+v", info, created)
	}
	if info.Policy.String() != "count_durable(2)" {
		t.Fatalf("policy %s", info.Policy)
	}
	if err := c.DeleteStream(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	all, err := c.ListStreams(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2500 || all[2499].Name != "s2500" || n.count(wire.CommandListStreams) != 3 {
		t.Fatalf("listed %d streams in %d pages", len(all), n.count(wire.CommandListStreams))
	}
}

// A corrupt batch in a fetch reply is reported by Records.Err, never a panic.
func TestCorruptFetchedBatch(t *testing.T) {
	good := appendTestBatch(nil, 0, 2, CodecNone, 1, 1, appendRecord(appendRecord(nil, []byte("a")), []byte("b")))
	cases := map[string]func([]byte) []byte{
		"payload checksum": func(b []byte) []byte { b[len(b)-1] ^= 1; return b },
		"record overruns": func([]byte) []byte {
			return appendTestBatch(nil, 0, 2, CodecNone, 1, 1, []byte{1, 'a', 9, 'b'})
		},
		"trailing bytes": func([]byte) []byte {
			return appendTestBatch(nil, 0, 2, CodecNone, 1, 1, []byte{1, 'a', 1, 'b', 0})
		},
		"bad s2": func([]byte) []byte { return appendTestBatch(nil, 0, 2, CodecS2, 1, 1, []byte{0xff, 0xff, 0xff}) },
		"bad zstd": func([]byte) []byte {
			return appendTestBatch(nil, 0, 2, CodecZstd, 1, 1, []byte{0x28, 0xb5, 0x2f, 0xfd, 1})
		},
		"unknown codec": func([]byte) []byte { return appendTestBatch(nil, 0, 2, 9, 1, 1, []byte{1, 'a', 1, 'b'}) },
		"wrong base":    func([]byte) []byte { return appendTestBatch(nil, 1, 2, CodecNone, 1, 1, []byte{1, 'a', 1, 'b'}) },
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			batches := mutate(append([]byte(nil), good...))
			var n *fakeNode
			n = startFake(t, 1, func(h *wire.Header, body []byte) ([]byte, bool) {
				if h.Command == wire.CommandLookupStream {
					return n.lookupReply(h, 1, n.addr), false
				}
				return wire.AppendFetchReply(nil, n.from(), &wire.FetchReply{RequestID: reqID(h), Stream: 7,
					Incarnation: 1, Count: 2, ConfirmedTail: 2, Batches: batches}), false
			})
			c := dialTest(t, testConfig(n.addr))
			recs, err := c.Fetch(testCtx(t), "orders", 0, FetchOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for recs.Next() {
			}
			if !errors.Is(recs.Err(), ErrCorruptBatch) {
				t.Fatalf("Err %v, want ErrCorruptBatch", recs.Err())
			}
		})
	}
}

// The owner goes away mid-produce (its connection closes) and a new owner takes over: the producer
// follows it by itself.
func TestProducerFollowsFailover(t *testing.T) {
	old, oldSt := ownerCluster(t)
	newOwner := startFake(t, 2, nil)
	newSt := newFakeStream(newOwner)
	newOwner.handle = newSt.handle
	var seed *fakeNode
	var failed atomic.Bool
	seed = startFake(t, 3, func(h *wire.Header, body []byte) ([]byte, bool) {
		if failed.Load() {
			return seed.lookupReply(h, 2, newOwner.addr), false
		}
		return seed.lookupReply(h, 1, old.addr), false
	})
	c := dialTest(t, testConfig(seed.addr))
	ctx := testCtx(t)
	p, err := c.Producer(ProducerConfig{Stream: "orders", Linger: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Append(ctx, []byte("before")); err != nil {
		t.Fatal(err)
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	failed.Store(true)
	old.stop() // the owner's process is gone: its listener and connections close
	if err := p.Append(ctx, []byte("after")); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if oldSt.tail != 1 || newSt.tail != 1 || newSt.produces[0].Sequence != 2 {
		t.Fatalf("old owner %d records, new owner %d records, %+v", oldSt.tail, newSt.tail, newSt.produces)
	}
}

// Close ends every goroutine the client started, with a producer and a long poll in flight.
func TestCloseEndsEverything(t *testing.T) {
	n, _ := ownerCluster(t)
	c, err := Dial(testCtx(t), testConfig(n.addr))
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.Producer(ProducerConfig{Stream: "orders", Linger: time.Hour, Codec: CodecZstd})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Append(testCtx(t), []byte("x")); err != nil {
		t.Fatal(err)
	}
	polled := make(chan error, 1)
	go func() {
		_, err := c.Fetch(context.Background(), "orders", 5, FetchOptions{Wait: time.Minute})
		polled <- err
	}()
	for n.count(wire.CommandFetch) == 0 {
		runtime.Gosched()
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-polled; err == nil {
		t.Fatal("a fetch in flight returned no error at Close")
	}
	if err := p.Append(testCtx(t), []byte("y")); !errors.Is(err, ErrClosed) {
		t.Fatalf("Append after Close: %v, want ErrClosed", err)
	}
	// Close waited for every goroutine's last deferred call; a goroutine may still be between that
	// call and its exit, so it gets a bounded number of scheduler turns to finish returning.
	var left string
	for range 1000 {
		if left = clientGoroutine(); left == "" {
			return
		}
		runtime.Gosched()
	}
	t.Fatalf("goroutine left after Close:\n%s", left)
}

// clientGoroutine returns the stack of a goroutine running in a connection or a producer, or "".
func clientGoroutine() string {
	buf := make([]byte, 1<<20)
	stacks := string(buf[:runtime.Stack(buf, true)])
	for _, g := range strings.Split(stacks, "\n\n") {
		if strings.Contains(g, "ringstream/client.(*conn)") || strings.Contains(g, "ringstream/client.(*Producer)") {
			return g
		}
	}
	return ""
}

// A batch refused for good fails the producer: Flush, Append and Close all return that error, and
// nothing after it is sent.
func TestProducerFailureIsSticky(t *testing.T) {
	var n *fakeNode
	n = startFake(t, 1, func(h *wire.Header, body []byte) ([]byte, bool) {
		if h.Command == wire.CommandLookupStream {
			return n.lookupReply(h, 1, n.addr), false
		}
		return n.refuse(h, wire.CodeBatchTooLarge, "batch above the stream's limit"), false
	})
	c := dialTest(t, testConfig(n.addr))
	ctx := testCtx(t)
	p, err := c.Producer(ProducerConfig{Stream: "orders", Linger: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Append(ctx, []byte("a")); err != nil {
		t.Fatal(err)
	}
	if err := p.Flush(ctx); !errors.Is(err, ErrBatchTooLarge) || !strings.Contains(err.Error(), "not confirmed") {
		t.Fatalf("Flush: %v, want ErrBatchTooLarge saying the batch was not confirmed", err)
	}
	if err := p.Append(ctx, []byte("b")); !errors.Is(err, ErrBatchTooLarge) {
		t.Fatalf("Append after the failure: %v, want the same error", err)
	}
	if err := p.Close(ctx); !errors.Is(err, ErrBatchTooLarge) {
		t.Fatalf("Close: %v, want the same error", err)
	}
	if got := n.count(wire.CommandProduce); got != 1 {
		t.Fatalf("%d produces sent, want 1 (a refusal for good is not retried, and nothing follows it)", got)
	}
	if err := p.Append(ctx, make([]byte, 2<<20)); !errors.Is(err, ErrRecordTooLarge) {
		t.Fatalf("a 2 MiB record: %v, want ErrRecordTooLarge", err)
	}
}

// One Client used from many goroutines at once: several producers, one of them appended to from
// several goroutines, and cursor calls beside them. Every record lands once (run with -race).
func TestConcurrentUse(t *testing.T) {
	n, st := ownerCluster(t)
	c := dialTest(t, testConfig(n.addr))
	ctx := testCtx(t)
	shared, err := c.Producer(ProducerConfig{Stream: "orders", BatchBytes: 64})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := range 4 {
		wg.Add(2)
		go func() { // appends to the shared producer
			defer wg.Done()
			for i := range 50 {
				if err := shared.Append(ctx, fmt.Appendf(nil, "s%d-%d", g, i)); err != nil {
					errs <- err
					return
				}
			}
		}()
		go func() { // its own producer, and cursor commits
			defer wg.Done()
			p, err := c.Producer(ProducerConfig{Stream: "orders", Codec: Codec(g % 3)})
			if err != nil {
				errs <- err
				return
			}
			for i := range 50 {
				if err := p.Append(ctx, fmt.Appendf(nil, "p%d-%d", g, i)); err != nil {
					errs <- err
					return
				}
			}
			if err := c.CommitCursor(ctx, "orders", fmt.Sprintf("c%d", g), uint64(g)); err != nil {
				errs <- err
			}
			errs <- p.Close(ctx)
		}()
	}
	wg.Wait()
	if err := shared.Close(ctx); err != nil {
		t.Fatal(err)
	}
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.tail != 400 {
		t.Fatalf("log holds %d records, want 400", st.tail)
	}
}
