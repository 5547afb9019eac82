package wire_test

import (
	"testing"

	"github.com/cespare/xxhash/v2"

	"github.com/ringstream/ringstream/wire"
)

const benchEntries = 1000

// BenchmarkCommitBatchEncode builds one 1000-entry Commit batch in a preallocated outbox per op.
func BenchmarkCommitBatchEncode(b *testing.B) {
	es := commitEntries(benchEntries)
	out := make([]byte, 0, wire.HeaderSize+benchEntries*wire.CommitEntrySize)
	var w wire.BatchWriter
	b.SetBytes(int64(cap(out)))
	b.ReportAllocs()
	for b.Loop() {
		buf := w.Begin(out[:0], wire.CommandCommit, testCluster, testSender)
		for i := range es {
			buf = w.AppendCommit(buf, es[i])
		}
		out = w.End(buf)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/benchEntries, "ns/entry")
}

// BenchmarkCommitBatchDecode parses (both checksums) and decodes one 1000-entry Commit batch per op,
// handing every entry to a visitor.
func BenchmarkCommitBatchDecode(b *testing.B) {
	frame := wire.AppendCommitBatch(nil, testCluster, testSender, commitEntries(benchEntries))
	var v countingVisitor
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	for b.Loop() {
		h, body, err := wire.ParseFrame(frame)
		if err != nil {
			b.Fatal(err)
		}
		batch, err := wire.DecodeCommitBatch(&h, body)
		if err != nil {
			b.Fatal(err)
		}
		batch.Each(&v)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/benchEntries, "ns/entry")
}

// BenchmarkCommitBatchDecodeEntries decodes the entries of an already parsed batch: the per-entry cost
// without the checksum.
func BenchmarkCommitBatchDecodeEntries(b *testing.B) {
	frame := wire.AppendCommitBatch(nil, testCluster, testSender, commitEntries(benchEntries))
	h, body, err := wire.ParseFrame(frame)
	if err != nil {
		b.Fatal(err)
	}
	var v countingVisitor
	b.ReportAllocs()
	for b.Loop() {
		batch, err := wire.DecodeCommitBatch(&h, body)
		if err != nil {
			b.Fatal(err)
		}
		batch.Each(&v)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/benchEntries, "ns/entry")
}

// BenchmarkChecksum measures xxhash64 over 4 KiB and 1 MiB against copying the same bytes (the memcpy
// baseline), in the same run.
func BenchmarkChecksum(b *testing.B) {
	for _, size := range []struct {
		name string
		n    int
	}{{"4KiB", 4 << 10}, {"1MiB", 1 << 20}} {
		src := make([]byte, size.n)
		for i := range src {
			src[i] = byte(i * 31)
		}
		dst := make([]byte, size.n)
		b.Run("xxhash64/"+size.name, func(b *testing.B) {
			b.SetBytes(int64(size.n))
			var sum uint64
			for b.Loop() {
				sum += xxhash.Sum64(src)
			}
			if sum == 1 {
				b.Log(sum)
			}
		})
		b.Run("copy/"+size.name, func(b *testing.B) {
			b.SetBytes(int64(size.n))
			for b.Loop() {
				copy(dst, src)
			}
		})
	}
}

// BenchmarkFrameReader pushes a stream of 1000-entry Commit batches through a FrameReader in 64 KiB
// reads, checksums included.
func BenchmarkFrameReader(b *testing.B) {
	frame := wire.AppendCommitBatch(nil, testCluster, testSender, commitEntries(benchEntries))
	var stream []byte
	for range 16 {
		stream = append(stream, frame...)
	}
	r := wire.NewFrameReader(64<<10, wire.FrameSizeMax)
	var count countingHandler
	b.SetBytes(int64(len(stream)))
	b.ReportAllocs()
	for b.Loop() {
		rest := stream
		for len(rest) > 0 {
			n := copy(r.Free(), rest)
			rest = rest[n:]
			if err := r.Commit(n, &count); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkBytesOnWire encodes heartbeats for 1000 groups both ways, once per op, and reports the
// bytes each takes: one batch frame, and one single-entry batch frame per group.
func BenchmarkBytesOnWire(b *testing.B) {
	es := commitEntries(benchEntries)
	batch := make([]byte, 0, 64<<10)
	singles := make([]byte, 0, 512<<10)
	b.ReportAllocs()
	for b.Loop() {
		batch = wire.AppendCommitBatch(batch[:0], testCluster, testSender, es)
		singles = singles[:0]
		for i := range es {
			singles = wire.AppendCommitBatch(singles, testCluster, testSender, es[i:i+1])
		}
	}
	b.ReportMetric(float64(len(batch)), "batched-B")
	b.ReportMetric(float64(len(singles)), "single-frames-B")
}

// TestBytesOnWire1000Groups pins the arithmetic BENCHMARKS.md quotes: 1000 groups in one batch take
// 256 + 1000*40 bytes, against 1000*256 bytes for one 256-byte frame per group and 1000*(256+40) for one
// single-entry batch per group.
func TestBytesOnWire1000Groups(t *testing.T) {
	es := commitEntries(benchEntries)
	batch := wire.AppendCommitBatch(nil, testCluster, testSender, es)
	var singles []byte
	for i := range es {
		singles = wire.AppendCommitBatch(singles, testCluster, testSender, es[i:i+1])
	}
	if len(batch) != 40_256 || len(singles) != 296_000 {
		t.Fatalf("batched %d bytes, singles %d bytes", len(batch), len(singles))
	}
}
