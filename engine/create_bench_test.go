package engine

import (
	"context"
	"flag"
	"fmt"
	"testing"
	"time"

	"github.com/ringstream/ringstream/client"
)

var createStreams = flag.Int("create.streams", 10000, "BenchmarkCreateStreams: streams created in batches")

// BenchmarkCreateStreams: on three real nodes (real rings, disks and loopback links, the metadata
// group on one shared disk), -create.streams three-copy streams created with batched creates
// (client.CreateStreams) against 300 created one at a time (client.CreateStream) in the same
// cluster: creates/s of each and their ratio. Every create is committed by the metadata group
// (one op per hundred names in a batch, one per name alone) before it is answered.
func BenchmarkCreateStreams(b *testing.B) {
	const single = 300
	for b.Loop() {
		c := newFailoverCluster(b, 200)
		waitForTB(b, "every node registered", func() bool {
			p := c.primary(0)
			return p != nil && len(p.Status().Heartbeats.Nodes) == 3
		})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		cl, err := client.Dial(ctx, client.Config{Addrs: []string{c.client[1].String()}, Cluster: nodeTestCluster,
			BackoffMin: 5 * time.Millisecond, BackoffMax: 100 * time.Millisecond})
		if err != nil {
			b.Fatal(err)
		}
		opts := client.StreamOptions{Copies: 3}
		start := time.Now()
		for i := range single {
			if _, err := cl.CreateStream(ctx, fmt.Sprintf("one-%d", i), opts); err != nil {
				b.Fatal(err)
			}
		}
		oneRate := float64(single) / time.Since(start).Seconds()
		names := make([]string, *createStreams)
		for i := range names {
			names[i] = fmt.Sprintf("many-%d", i)
		}
		start = time.Now()
		results, err := cl.CreateStreams(ctx, names, opts)
		if err != nil {
			b.Fatal(err)
		}
		took := time.Since(start)
		for _, r := range results {
			if r.Err != nil {
				b.Fatalf("%s: %v", r.Info.Name, r.Err)
			}
		}
		batchRate := float64(len(names)) / took.Seconds()
		b.Logf("%d streams in batches: %v (%.0f creates/s); %d one at a time: %.0f creates/s; ratio %.1fx",
			len(names), took.Round(time.Millisecond), batchRate, single, oneRate, batchRate/oneRate)
		b.ReportMetric(batchRate, "batched-creates/s")
		b.ReportMetric(oneRate, "single-creates/s")
		b.ReportMetric(batchRate/oneRate, "ratio")
		b.ReportMetric(0, "ns/op")
		cl.Close()
		cancel()
		c.stop()
	}
}
