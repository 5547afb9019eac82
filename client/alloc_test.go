package client

import (
	"context"
	"encoding/binary"
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
	// FormatRecords with a key, headers and a timestamp: the same.
	r := Record{Key: []byte("user-1"), Value: rec, Timestamp: time.UnixMilli(1_700_000_000_000),
		Headers: []Header{{Key: []byte("src"), Value: []byte("web")}, {Key: []byte("trace"), Value: nil}}}
	got = allocs.In(t, 2000, func() {
		if err := p.AppendRecord(ctx, r); err != nil {
			t.Fatal(err)
		}
	})
	if got != 0 {
		t.Fatalf("%d allocations in 2000 appends of keyed records with headers, want 0", got)
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

// BenchmarkProduceTraced is BenchmarkProduce (no codec) with OnTrace set: -benchmem shows that the
// trace of each batch costs no allocation beside the untraced run's.
func BenchmarkProduceTraced(b *testing.B) {
	n, _ := ownerClusterB(b)
	c, err := Dial(context.Background(), testConfig(n.addr))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	var batches int
	p, err := c.Producer(ProducerConfig{Stream: "orders", BatchBytes: 64 << 10, OnTrace: func(BatchTrace) { batches++ }})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	rec := make([]byte, 100)
	b.SetBytes(int64(len(rec)))
	b.ReportAllocs()
	for b.Loop() {
		if err := p.Append(ctx, rec); err != nil {
			b.Fatal(err)
		}
	}
	if err := p.Close(ctx); err != nil {
		b.Fatal(err)
	}
	if batches == 0 {
		b.Fatal("no batch traced")
	}
}

// BenchmarkProduceRecord is BenchmarkProduce with FormatRecords records of a 10-byte key, two headers
// and the 100-byte value.
func BenchmarkProduceRecord(b *testing.B) {
	n, _ := ownerClusterB(b)
	c, err := Dial(context.Background(), testConfig(n.addr))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	p, err := c.Producer(ProducerConfig{Stream: "orders", BatchBytes: 64 << 10})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	r := Record{Key: []byte("user-00042"), Value: make([]byte, 100),
		Headers: []Header{{Key: []byte("src"), Value: []byte("web")}, {Key: []byte("v"), Value: []byte("2")}}}
	b.SetBytes(int64(len(r.Value)))
	b.ReportAllocs()
	for b.Loop() {
		if err := p.AppendRecord(ctx, r); err != nil {
			b.Fatal(err)
		}
	}
	if err := p.Close(ctx); err != nil {
		b.Fatal(err)
	}
}

// A Consumer's Poll allocates nothing in steady state: the request is built in the call's buffer, the
// reply lands in the call's body, and the records are read in place. The node here answers from
// prebuilt frames without allocating, so every allocation counted is the client's.
func TestPollAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under the race detector")
	}
	c := prebuiltFetchNode(t, pollBatches())
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
		k, keys, headers := 0, 0, 0
		for recs.Next() {
			k++
			keys += len(recs.Key())
			for it := recs.Headers(); it.Next(); {
				headers += len(it.Header().Key)
			}
			_ = recs.Timestamp()
		}
		if k != 32 || recs.Err() != nil || keys != 16*6 || headers != 16*4 {
			t.Fatalf("%d records, %d key bytes, %d header key bytes, err %v", k, keys, headers, recs.Err())
		}
	}
	if got := allocs.In(t, 200, poll); got != 0 {
		t.Fatalf("%d allocations in 200 polls, want 0", got)
	}
}

// pollBatches is 32 records in 4 batches: 2 of FormatValues, 2 of FormatRecords whose records have a
// 6-byte key and headers "src" and "v".
func pollBatches() []byte {
	var batches []byte
	for i := range 4 {
		var payload []byte
		format := FormatValues
		if i%2 == 1 {
			format = FormatRecords
			payload = binary.LittleEndian.AppendUint64(payload, 1_700_000_000_000)
		}
		for j := range 8 {
			v := []byte{byte('a' + i), byte('0' + j)}
			if format == FormatValues {
				payload = appendRecord(payload, v)
				continue
			}
			r := Record{Key: []byte("user-1"), Value: v,
				Headers: []Header{{Key: []byte("src"), Value: []byte("web")}, {Key: []byte("v"), Value: nil}}}
			payload = appendRecord2(payload, &r, int64(j), uint32(j))
		}
		batches = appendTestBatchAt(batches, uint64(8*i), 8, CodecNone, format, 1, uint64(i+1), 0, payload)
	}
	return batches
}

// prebuiltFetchNode is a client of a node that answers every fetch with the 32 records of batches from
// prebuilt frames, allocating nothing itself.
func prebuiltFetchNode(t testing.TB, batches []byte) *Client {
	var n *fakeNode
	n = startFake(t, 1, nil)
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
	return dialTest(t, testConfig(n.addr))
}

// BenchmarkPoll reads 32 records (half of them keyed, with headers) from a prebuilt fetch reply.
func BenchmarkPoll(b *testing.B) {
	c := prebuiltFetchNode(b, pollBatches())
	cs, err := c.Consumer("orders", 0, FetchOptions{})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		cs.Seek(0)
		recs, err := cs.Poll(ctx)
		if err != nil {
			b.Fatal(err)
		}
		for recs.Next() {
			for it := recs.Headers(); it.Next(); {
			}
		}
		if recs.Err() != nil {
			b.Fatal(recs.Err())
		}
	}
}

// BenchmarkProduceClosedLoop is the bench's closed loop (ringstream bench): 16 records of 1 KiB
// appended, then a Flush that waits for their confirm, to the in-test owner; ns/op is per batch.
// The Flush should wake once per batch: when its batch is confirmed, not when it is taken.
func BenchmarkProduceClosedLoop(b *testing.B) {
	n, _ := ownerClusterB(b)
	c, err := Dial(context.Background(), testConfig(n.addr))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	p, err := c.Producer(ProducerConfig{Stream: "orders", BatchBytes: BatchBytesFor(16, 1024), BatchRecords: 16})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	rec := make([]byte, 1024)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		for range 16 {
			if err := p.Append(ctx, rec); err != nil {
				b.Fatal(err)
			}
		}
		if err := p.Flush(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if err := p.Close(ctx); err != nil {
		b.Fatal(err)
	}
}
