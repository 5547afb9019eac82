package client

import (
	"context"
	"testing"
	"time"

	"github.com/ringstream/ringstream/internal/allocs"
)

// Appending a record copies it into the open batch and allocates nothing.
func TestAppendAllocatesNothing(t *testing.T) {
	n, _ := ownerCluster(t)
	c := dialTest(t, testConfig(n.addr))
	p, err := c.Producer(ProducerConfig{Stream: "orders", Linger: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	ctx := context.Background()
	rec := make([]byte, 100)
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
