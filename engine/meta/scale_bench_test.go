package meta

import (
	"flag"
	"fmt"
	"runtime"
	"testing"
	"time"
)

var scaleStreams = flag.Int("meta.streams", 100_000, "streams in the state of BenchmarkState_Scale (1000000 for the figures in BENCHMARKS.md)")

// scaleState applies the ops that register three nodes and create n three-copy streams, as the
// replica applies them (encoded), without the per-op invariant checks of the tests' fixture.
func scaleState(tb testing.TB, n int) *State {
	tb.Helper()
	s := NewState()
	op := uint64(0)
	apply := func(o Op) {
		op++
		if r := s.applyOp(AppendOp(nil, o), op); !r.OK() {
			tb.Fatalf("%s refused: %s", o.Kind(), r)
		}
	}
	for id := uint16(1); id <= 3; id++ {
		apply(RegisterNode{Node: id, Address: fmt.Sprintf("10.0.0.%d:7002", id)})
	}
	majority := Policy{Kind: PolicyMajorityDurable}
	for i := range n {
		owner := uint16(i%3 + 1)
		var followers []uint16
		for f := uint16(1); f <= 3; f++ {
			if f != owner {
				followers = append(followers, f)
			}
		}
		apply(CreateStream{Name: fmt.Sprintf("orders-%07d", i), Copies: 3, Policy: majority, Owner: owner,
			Followers: followers, Stamped: majority})
	}
	return s
}

func heapInUse() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// BenchmarkState_Scale: the metadata state of -meta.streams streams (three copies each, names of 14
// bytes): heap per stream, the snapshot's size, the time to encode it (a checkpoint), and to decode and
// install it (Restore: a replica catching up from a snapshot). Run with -benchtime=1x.
func BenchmarkState_Scale(b *testing.B) {
	n := *scaleStreams
	before := heapInUse()
	start := time.Now()
	s := scaleState(b, n)
	built := time.Since(start)
	heap := heapInUse() - before
	var snap []byte
	var encode, restore time.Duration
	for b.Loop() {
		t0 := time.Now()
		snap = s.AppendSnapshot(snap[:0])
		encode += time.Since(t0)
		r := NewState()
		t0 = time.Now()
		if err := r.Restore(snap); err != nil {
			b.Fatal(err)
		}
		restore += time.Since(t0)
		if r.Digest() != s.Digest() {
			b.Fatal("the restored state differs")
		}
	}
	runtime.KeepAlive(s)
	per := float64(b.N)
	b.ReportMetric(float64(heap)/float64(n), "heap-B/stream")
	b.ReportMetric(float64(len(snap))/float64(n), "snapshot-B/stream")
	b.ReportMetric(float64(len(snap))/(1<<20), "snapshot-MiB")
	b.ReportMetric(float64(encode.Milliseconds())/per, "encode-ms")
	b.ReportMetric(float64(restore.Milliseconds())/per, "restore-ms")
	b.ReportMetric(float64(built.Milliseconds()), "create-ops-ms")
	b.ReportMetric(0, "ns/op")
}
