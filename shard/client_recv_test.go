package shard_test

import (
	"io"
	"testing"

	"github.com/ringstream/ringstream/internal/allocs"
	"github.com/ringstream/ringstream/ring"
	"github.com/ringstream/ringstream/wire"
)

// Produces larger than a client connection's first receive buffer (a producer's batch of 64 records
// of 1 KiB and more) allocate nothing on the node once the connection's buffer fits them: the reader
// is not grown, zeroed and dropped again for each one.
func TestLargeClientRequestsAllocateNothing(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b ring.Backend) {
		n := newClientNode(t, b, 1, "", &fixedHandler{}, nil)
		defer stopWithin(t, n, liveness, "stop")
		c, _ := dialClient(t, n.ClientAddr(), "")
		for _, size := range []int{100 << 10, 700 << 10} {
			req := wire.AppendProduce(nil, wire.From{Cluster: testCluster}, &wire.Produce{RequestID: 1, Stream: 9,
				ProducerID: 1, Sequence: 1, Count: 1, Batch: make([]byte, size)})
			reply := make([]byte, wire.HeaderSize)
			trip := func() {
				if _, err := c.Write(req); err != nil {
					t.Fatal(err)
				}
				if _, err := io.ReadFull(c, reply); err != nil {
					t.Fatal(err)
				}
			}
			if got := allocs.In(t, 20, trip); got != 0 {
				t.Fatalf("%d allocations in 20 produces of %d bytes, want 0", got, len(req))
			}
		}
	})
}
