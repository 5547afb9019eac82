package client

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/ringstream/ringstream/wire"

	"github.com/ringstream/ringstream/internal/allocs"
)

// Appending a record copies it into the open batch and allocates nothing. The first record goes
// out at once (nothing was in flight) and the owner holds it unanswered, so the appends measured all
// land in the open batch behind it and no send runs meanwhile.
func TestAppendAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under the race detector")
	}
	o := startHoldingOwner(t)
	cfg := testConfig(o.n.addr)
	cfg.RequestTimeout = time.Hour // the held batch is not retried while the appends are measured
	c := dialTest(t, cfg)
	p, err := c.Producer(ProducerConfig{Stream: "orders", Linger: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	defer o.releaseAll()
	ctx := context.Background()
	rec := make([]byte, 100)
	if err := p.Append(ctx, rec); err != nil {
		t.Fatal(err)
	}
	held := o.next(t)
	defer close(held.release)
	got := allocs.In(t, 2000, func() {
		if err := p.Append(ctx, rec); err != nil {
			t.Fatal(err)
		}
	})
	if got != 0 {
		t.Fatalf("%d allocations in 2000 appends, want 0", got)
	}
}

// BenchmarkProduce sends 100-byte records through a producer to the in-test owner (whose own
// allocations per request count in allocs/op too); -benchmem shows what a record costs.
func BenchmarkProduce(b *testing.B) {
	for _, codec := range []Codec{CodecNone, CodecS2, CodecZstd} {
		b.Run(codec.String(), func(b *testing.B) {
			n, st := ownerClusterB(b)
			_ = st
			c, err := Dial(context.Background(), testConfig(n.addr))
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			p, err := c.Producer(ProducerConfig{Stream: "orders", BatchBytes: 64 << 10, Codec: codec})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			rec := make([]byte, 100)
			for i := range rec {
				rec[i] = byte('a' + i%7)
			}
			b.SetBytes(int64(len(rec)))
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if err := p.Append(ctx, rec); err != nil {
					b.Fatal(err)
				}
			}
			if err := p.Close(ctx); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// A Consumer's Poll allocates nothing in steady state: the request is built in the call's buffer, the
// reply lands in the call's body, and the records are read in place. The node here answers from
// prebuilt frames without allocating, so every allocation counted is the client's.
func TestPollAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under the race detector")
	}
	var n *fakeNode
	n = startFake(t, 1, nil)
	var batches []byte
	for i := range 4 {
		var payload []byte
		for j := range 8 {
			payload = appendRecord(payload, []byte{byte('a' + i), byte('0' + j)})
		}
		batches = appendTestBatch(batches, uint64(8*i), 8, CodecNone, 1, uint64(i+1), payload)
	}
	lookup := n.lookupReply(&wire.Header{}, 1, n.addr)
	fetch := wire.AppendFetchReply(nil, n.from(), &wire.FetchReply{RequestID: 1, Stream: 7, Incarnation: 1,
		Count: 32, ConfirmedTail: 32, Batches: batches})
	n.raw = func(c net.Conn) {
		in := make([]byte, 64<<10)
		for {
			if _, err := io.ReadFull(c, in[:wire.HeaderSize]); err != nil {
				return
			}
			h, err := wire.ParseHeader(in)
			if err != nil {
				return
			}
			if _, err := io.ReadFull(c, in[wire.HeaderSize:wire.HeaderSize+int(h.BodySize)]); err != nil {
				return
			}
			out, count := fetch, uint32(32)
			if h.Command == wire.CommandLookupStream {
				out, count = lookup, 0
			}
			copy(out[wire.AreaOffset:], h.Area[:8]) // echo the request id
			wire.EndFrame(out, count)
			if _, err := c.Write(out); err != nil {
				return
			}
		}
	}
	c := dialTest(t, testConfig(n.addr))
	cs, err := c.Consumer("orders", 0, FetchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	poll := func() {
		cs.Seek(0)
		recs, err := cs.Poll(ctx)
		if err != nil {
			t.Fatal(err)
		}
		k := 0
		for recs.Next() {
			k++
		}
		if k != 32 || recs.Err() != nil {
			t.Fatalf("%d records, err %v", k, recs.Err())
		}
	}
	if got := allocs.In(t, 200, poll); got != 0 {
		t.Fatalf("%d allocations in 200 polls, want 0", got)
	}
}
