package streamhost_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/ringstream/ringstream/wire"
)

// BenchmarkSealRoundTrip: the seal of the three copies of a stream at once (each fences at the next
// epoch durably, commits what is queued, computes its digest and answers), against the log's size:
// 1, 16 and 64 MiB of 1 KiB records on real disks (8 MiB segments: the digest reads the active
// segment, closed ones keep theirs). Reported: the time from the three seals handed to their nodes
// to the last answer.
func BenchmarkSealRoundTrip(b *testing.B) {
	for _, mib := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("log=%dMiB", mib), func(b *testing.B) {
			c := newCluster(b, majority(1, 2, 3))
			records := mib << 10
			newLoadGen(c).run(b, 0, records)
			for _, id := range []uint16{1, 2, 3} {
				waitDurable(b, c.nodes[id], uint64(records))
			}
			fence := uint32(1)
			var took time.Duration
			for b.Loop() {
				fence++
				start := time.Now()
				for _, id := range []uint16{1, 2, 3} {
					n := c.nodes[id]
					m := wire.StreamSeal{Stream: testStream, Incarnation: testIncarnation, FenceEpoch: fence, TransitionID: 1}
					controlFrame(b, n, wire.AppendStreamSeal(nil, wire.From{Cluster: 42, Node: n.id}, &m, nil))
				}
				for _, id := range []uint16{1, 2, 3} {
					select {
					case r := <-c.nodes[id].sink.sealed:
						if r.Status != wire.SealSealed || r.RecordTail != uint64(records) {
							b.Fatalf("node %d: seal answered %+v", id, r)
						}
					case <-time.After(30 * time.Second):
						b.Fatalf("node %d: seal never answered", id)
					}
				}
				took += time.Since(start)
			}
			b.ReportMetric(float64(took.Microseconds())/1000/float64(b.N), "seal-ms")
			b.ReportMetric(0, "ns/op")
		})
	}
}
