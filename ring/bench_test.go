package ring

import (
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// benchBackends are the two backends every ring benchmark runs on, side by side.
func benchBackends() []struct {
	name    string
	newRing newRingFunc
} {
	return []struct {
		name    string
		newRing newRingFunc
	}{{"io_uring", newIOUringRing}, {"fallback", newFallbackRing}}
}

// benchRing builds a ring on the benchmark's locked thread, or skips where the backend is refused.
func benchRing(b *testing.B, newRing newRingFunc, entries uint32) Ring {
	b.Helper()
	runtime.LockOSThread()
	r, err := newRing(entries)
	if err != nil {
		b.Skipf("ring: %v", err)
	}
	b.Cleanup(func() { r.Close() })
	return r
}

// BenchmarkNop measures the queue itself: batches of nops queued, submitted and dispatched.
func BenchmarkNop(b *testing.B) {
	for _, be := range benchBackends() {
		for _, batch := range []int{1, 8, 64} {
			b.Run(be.name+"/batch="+strconv.Itoa(batch), func(b *testing.B) {
				r := benchRing(b, be.newRing, 64)
				h := &countHandler{}
				b.ReportAllocs()
				b.ResetTimer()
				cpu0, proc0 := threadCPUNs(), processCPUNs()
				for done := 0; done < b.N; {
					n := min(batch, b.N-done)
					for i := 0; i < n; i++ {
						if err := r.Nop(h, uint64(i), 0); err != nil {
							b.Fatal(err)
						}
					}
					want := h.n + n
					for h.n < want {
						if err := r.Wait(want - h.n); err != nil {
							b.Fatal(err)
						}
						r.Dispatch()
					}
					done += n
				}
				b.StopTimer()
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
				b.ReportMetric(float64(threadCPUNs()-cpu0)/float64(b.N), "thread-cpu-ns/op")
				b.ReportMetric(float64(processCPUNs()-proc0)/float64(b.N), "proc-cpu-ns/op")
			})
		}
	}
}

// BenchmarkAppendFdatasync appends 4 KiB to a file and makes it durable, one record per iteration:
// through the ring as a linked writev+fdatasync, and as os.File.Write plus unix.Fdatasync (the
// baseline), in the same run.
func BenchmarkAppendFdatasync(b *testing.B) {
	record := make([]byte, 4096)
	for i := range record {
		record[i] = byte(i * 7)
	}
	for _, be := range benchBackends() {
		b.Run("ring/"+be.name, func(b *testing.B) {
			r := benchRing(b, be.newRing, 64)
			f := benchFile(b)
			fd := int(f.Fd())
			h := &countHandler{}
			bufs := [][]byte{record}
			b.SetBytes(int64(len(record)))
			b.ReportAllocs()
			b.ResetTimer()
			cpu0, proc0 := threadCPUNs(), processCPUNs()
			for i := 0; i < b.N; i++ {
				if err := r.Writev(h, 1, fd, bufs, int64(i)*int64(len(record)), Link); err != nil {
					b.Fatal(err)
				}
				if err := r.Fsync(h, 2, fd, true, 0); err != nil {
					b.Fatal(err)
				}
				want := h.n + 2
				for h.n < want {
					if err := r.Wait(want - h.n); err != nil {
						b.Fatal(err)
					}
					r.Dispatch()
				}
			}
			b.StopTimer()
			if h.failed != 0 {
				b.Fatalf("%d operations failed", h.failed)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "appends/s")
			b.ReportMetric(float64(threadCPUNs()-cpu0)/float64(b.N), "thread-cpu-ns/op")
			b.ReportMetric(float64(processCPUNs()-proc0)/float64(b.N), "proc-cpu-ns/op")
		})
	}
	b.Run("baseline/os.File.Write+Fdatasync", func(b *testing.B) {
		runtime.LockOSThread() // as the ring benchmarks are, so the thread CPU time is comparable
		f := benchFile(b)
		b.SetBytes(int64(len(record)))
		b.ReportAllocs()
		b.ResetTimer()
		cpu0, proc0 := threadCPUNs(), processCPUNs()
		for i := 0; i < b.N; i++ {
			if _, err := f.Write(record); err != nil {
				b.Fatal(err)
			}
			if err := unix.Fdatasync(int(f.Fd())); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "appends/s")
		b.ReportMetric(float64(threadCPUNs()-cpu0)/float64(b.N), "thread-cpu-ns/op")
		b.ReportMetric(float64(processCPUNs()-proc0)/float64(b.N), "proc-cpu-ns/op")
	})
}

// threadCPUNs is the CPU time (user plus system) the calling thread has used. The benchmarks run
// locked to one thread, so it is their own cost, free of the wall-clock time lost to other
// processes on a shared machine. Work the kernel hands to io-wq workers is not in it.
func threadCPUNs() int64 {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// processCPUNs is the CPU time of the whole process, io_uring's io-wq worker threads included (they
// are threads of the process), and the Go runtime's own threads too.
func processCPUNs() int64 {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// benchFile is an empty file in the benchmark's temp dir (on the same disk as the repository's
// TMPDIR); each benchmark appends from offset 0, so every iteration grows the file.
func benchFile(b *testing.B) *os.File {
	b.Helper()
	f, err := os.OpenFile(filepath.Join(b.TempDir(), "append"), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() })
	return f
}

// BenchmarkAppendFdatasyncInterleaved runs, in every iteration, one append of 4 KiB + fdatasync
// through the ring (linked writev+fsync) and then one os.File.Write + unix.Fdatasync on a second
// file, timing each. Alternating puts both under the same disk conditions on a shared machine; the
// ratio is the ring's cost relative to the plain syscalls.
func BenchmarkAppendFdatasyncInterleaved(b *testing.B) {
	record := make([]byte, 4096)
	for i := range record {
		record[i] = byte(i * 7)
	}
	for _, be := range benchBackends() {
		b.Run(be.name, func(b *testing.B) {
			r := benchRing(b, be.newRing, 64)
			ringFile, plainFile := benchFile(b), benchFile(b)
			fd := int(ringFile.Fd())
			h := &countHandler{}
			bufs := [][]byte{record}
			var ringNs, plainNs int64
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				if err := r.Writev(h, 1, fd, bufs, int64(i)*int64(len(record)), Link); err != nil {
					b.Fatal(err)
				}
				if err := r.Fsync(h, 2, fd, true, 0); err != nil {
					b.Fatal(err)
				}
				want := h.n + 2
				for h.n < want {
					if err := r.Wait(want - h.n); err != nil {
						b.Fatal(err)
					}
					r.Dispatch()
				}
				t1 := time.Now()
				if _, err := plainFile.Write(record); err != nil {
					b.Fatal(err)
				}
				if err := unix.Fdatasync(int(plainFile.Fd())); err != nil {
					b.Fatal(err)
				}
				ringNs += int64(t1.Sub(t0))
				plainNs += int64(time.Since(t1))
			}
			b.StopTimer()
			if h.failed != 0 {
				b.Fatalf("%d operations failed", h.failed)
			}
			b.ReportMetric(float64(ringNs)/float64(b.N), "ring-ns/append")
			b.ReportMetric(float64(plainNs)/float64(b.N), "plain-ns/append")
			b.ReportMetric(float64(ringNs)/float64(plainNs), "ring/plain")
		})
	}
}
