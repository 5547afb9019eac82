package segment

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
	"golang.org/x/sys/unix"

	"github.com/ringstream/ringstream/ring"
	"github.com/ringstream/ringstream/ring/ringtest"
)

// benchEnv is newEnv for benchmarks: the caller has locked its thread.
func benchEnv(b *testing.B, backend ring.Backend) *env {
	b.Helper()
	r, err := ring.New(ring.Config{Backend: backend, Entries: 256, Logger: quietLogger()})
	if err != nil {
		b.Fatalf("ring.New(%s): %v", backend, err)
	}
	b.Cleanup(func() { _ = r.Close() })
	return &env{
		r:   r,
		dir: filepath.Join(b.TempDir(), "copy"),
		cfg: Config{Logger: quietLogger()},
		ev:  &recorder{appends: make([]appendEvent, 0, 1<<16)},
	}
}

func benchBackends(b *testing.B, fn func(b *testing.B, backend ring.Backend)) {
	for _, backend := range []ring.Backend{ring.BackendFallback, ring.BackendIOUring} {
		b.Run(string(backend), func(b *testing.B) {
			skipUnavailable(b, backend)
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			fn(b, backend)
		})
	}
}

// skipUnavailable skips a benchmark on io_uring where the kernel refuses it, naming the reason.
func skipUnavailable(b *testing.B, backend ring.Backend) {
	if ok, reason := ringtest.Available(); backend == ring.BackendIOUring && !ok {
		b.Skip(reason)
	}
}

// discardEvents drops every event, so the benchmark measures the log, not a recorder.
type discardEvents struct{ acks int }

func (d *discardEvents) AppendDone(LogKind, uint64, uint64, error) { d.acks++ }
func (d *discardEvents) ReadDone(LogKind, uint64, []byte, error)   {}
func (d *discardEvents) SealDone(uint64, Seal, error)              {}
func (d *discardEvents) Done(Result)                               {}

// openDiscarding opens a copy on e that drops its events, so a benchmark measures the log, not a
// recorder. The caller closes it (CloseSync) on its own locked thread.
func openDiscarding(b *testing.B, e *env) *Copy {
	b.Helper()
	c, _, err := OpenSync(e.r, e.dir, e.cfg, &discardEvents{})
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// benchGroups are the group commit sizes the append benchmarks and their baseline share.
func benchGroups() []int { return []int{1, 16, 64, 256} }

// BenchmarkAppendGroupCommit: 1 KiB records, one batch per record, group commits of G records
// (one writev + one fdatasync each). One op is one group; records/s and MB/s of payload.
func BenchmarkAppendGroupCommit(b *testing.B) {
	for _, g := range benchGroups() {
		b.Run(fmt.Sprintf("group=%d", g), func(b *testing.B) {
			benchBackends(b, func(b *testing.B, backend ring.Backend) {
				e := benchEnv(b, backend)
				c := openDiscarding(b, e)
				defer c.CloseSync()
				payload := make([]byte, 1024)
				h := BatchHeader{RecordCount: 1, Epoch: 1}
				b.SetBytes(int64(g * 1024))
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					for j := 0; j < g; j++ {
						if _, err := c.Append(1, &h, payload); err != nil {
							b.Fatal(err)
						}
					}
					c.Flush()
					for c.Records().DurableTail() != c.Records().NextOffset() {
						if err := e.r.Wait(1); err != nil {
							b.Fatal(err)
						}
						e.r.Dispatch()
					}
				}
				b.StopTimer()
				b.ReportMetric(float64(b.N*g)/b.Elapsed().Seconds(), "records/s")
			})
		})
	}
}

// BenchmarkBaselineWriteFdatasync: the physical baseline of BenchmarkAppendGroupCommit: the same
// bytes (batch header + 1 KiB per record) in the same group sizes, one pwrite + one fdatasync
// per group, plain syscalls on a growing file.
func BenchmarkBaselineWriteFdatasync(b *testing.B) {
	for _, g := range benchGroups() {
		b.Run(fmt.Sprintf("group=%d", g), func(b *testing.B) {
			f, err := os.Create(filepath.Join(b.TempDir(), "baseline"))
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			fd := int(f.Fd())
			buf := make([]byte, g*(BatchHeaderSize+1024))
			var off int64
			b.SetBytes(int64(g * 1024))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := unix.Pwrite(fd, buf, off); err != nil {
					b.Fatal(err)
				}
				if err := unix.Fdatasync(fd); err != nil {
					b.Fatal(err)
				}
				off += int64(len(buf))
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N*g)/b.Elapsed().Seconds(), "records/s")
		})
	}
}

// fillLog appends size bytes in batches of 256 KiB payload and waits for them.
func fillLog(b *testing.B, e *env, c *Copy, size int64) {
	b.Helper()
	payload := make([]byte, 256<<10)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	for c.Records().SizeBytes() < size {
		for k := 0; k < 16 && c.Records().SizeBytes()+int64(k)*int64(len(payload)) < size; k++ {
			h := BatchHeader{RecordCount: 256, Epoch: 1}
			if _, err := c.Append(1, &h, payload); err != nil {
				b.Fatal(err)
			}
		}
		c.Flush()
		for c.Records().Busy() {
			c.Flush()
			if err := e.r.Wait(1); err != nil {
				b.Fatal(err)
			}
			e.r.Dispatch()
		}
	}
}

// digestOnce computes the record log's seal digest through the ring, without the seal's fence
// write, and returns it.
func digestOnce(b *testing.B, e *env, c *Copy) SealDigest {
	l := c.Records()
	l.requestSealDigest()
	for l.dig.running || len(l.dig.jobs) > 0 {
		if err := e.r.Wait(1); err != nil {
			b.Fatal(err)
		}
		e.r.Dispatch()
	}
	return l.dig.sealRes
}

// sealOnce seals c (fence write + fdatasync + digest) and returns the result.
func sealOnce(b *testing.B, e *env, c *Copy) Seal {
	e.ev.seals = e.ev.seals[:0]
	if err := c.Seal(1, 1); err != nil {
		b.Fatal(err)
	}
	for len(e.ev.seals) == 0 {
		if err := e.r.Wait(1); err != nil {
			b.Fatal(err)
		}
		e.r.Dispatch()
	}
	if e.ev.seals[0].err != nil {
		b.Fatal(e.ev.seals[0].err)
	}
	return e.ev.seals[0].seal
}

// preparedCopy fills a copy in a fresh directory with size bytes through a ring of its own, on
// the calling goroutine's locked thread, closes it and returns the directory. A ring serves only
// the thread that created it, so each leaf benchmark reopens the copy with its own ring.
func preparedCopy(b *testing.B, backend ring.Backend, segmentBytes, size int64) string {
	b.Helper()
	e := benchEnv(b, backend)
	e.cfg.SegmentBytes = segmentBytes
	c, _, err := OpenSync(e.r, e.dir, e.cfg, e.ev)
	if err != nil {
		b.Fatal(err)
	}
	fillLog(b, e, c, size)
	if err := c.CloseSync(); err != nil {
		b.Fatal(err)
	}
	return e.dir
}

// openPrepared opens a prepared copy with a new ring on the leaf benchmark's locked thread.
func openPrepared(b *testing.B, backend ring.Backend, dir string, segmentBytes int64) (*env, *Copy) {
	b.Helper()
	runtime.LockOSThread()
	b.Cleanup(runtime.UnlockOSThread)
	e := benchEnv(b, backend)
	e.dir = dir
	e.cfg.SegmentBytes = segmentBytes
	c, _, err := OpenSync(e.r, e.dir, e.cfg, e.ev)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.CloseSync() })
	return e, c
}

// BenchmarkDigest: the seal digest (without the seal's fence write) of a log whose active segment
// holds 64 MiB, read through the ring in 1 MiB chunks and hashed; and verify mode over a log of
// four closed 16 MiB segments (large synchronous reads through the ring). Page cache warm.
// BenchmarkBaselineSequentialRead is its physical baseline.
func BenchmarkDigest(b *testing.B) {
	benchBackends(b, func(b *testing.B, backend ring.Backend) {
		active := preparedCopy(b, backend, 1<<30, 64<<20)
		closed := preparedCopy(b, backend, 16<<20, 64<<20+1)
		b.Run("digest", func(b *testing.B) {
			e, c := openPrepared(b, backend, active, 1<<30)
			size := c.Records().SizeBytes()
			b.SetBytes(size)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if d := digestOnce(b, e, c); d.BytesRead != size {
					b.Fatalf("digest read %d of %d bytes", d.BytesRead, size)
				}
			}
		})
		b.Run("verify", func(b *testing.B) {
			_, c := openPrepared(b, backend, closed, 16<<20)
			b.SetBytes(c.Records().SizeBytes())
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := c.Records().VerifySync(); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
}

// BenchmarkBaselineSequentialRead: the physical baseline of BenchmarkDigest: plain pread of the
// same 64 MiB in 1 MiB chunks, without and with xxhash64.
func BenchmarkBaselineSequentialRead(b *testing.B) {
	path := filepath.Join(b.TempDir(), "baseline")
	data := make([]byte, 64<<20)
	for i := range data {
		data[i] = byte(i * 7)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		b.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	fd := int(f.Fd())
	buf := make([]byte, 1<<20)
	for _, hash := range []bool{false, true} {
		b.Run(fmt.Sprintf("xxhash=%v", hash), func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			h := xxhash.New()
			for i := 0; i < b.N; i++ {
				h.Reset()
				for off := int64(0); off < int64(len(data)); off += int64(len(buf)) {
					n, err := unix.Pread(fd, buf, off)
					if err != nil || n != len(buf) {
						b.Fatal(n, err)
					}
					if hash {
						_, _ = h.Write(buf[:n])
					}
				}
			}
		})
	}
}

// BenchmarkSealVsLogSize: seal cost for retained logs of 1 MiB to 1 GiB with 1 MiB segments (the
// active segment holds up to 1 MiB in each): the full seal (fence write + fdatasync + digest) and
// the digest alone, with the bytes each read. Next to them, the cost of reading the whole
// retained log, which a seal without per-segment digests would pay.
func BenchmarkSealVsLogSize(b *testing.B) {
	for _, size := range []int64{1 << 20, 16 << 20, 256 << 20, 1 << 30} {
		b.Run(fmt.Sprintf("size=%dMiB", size>>20), func(b *testing.B) {
			benchBackends(b, func(b *testing.B, backend ring.Backend) {
				dir := preparedCopy(b, backend, 1<<20, size)
				b.Run("seal", func(b *testing.B) {
					e, c := openPrepared(b, backend, dir, 1<<20)
					var read int64
					b.ResetTimer()
					for i := 0; i < b.N; i++ {
						read = sealOnce(b, e, c).BytesRead
					}
					b.ReportMetric(float64(read), "bytes-read/op")
					b.ReportMetric(float64(c.Records().Segments()), "segments")
				})
				b.Run("digest-only", func(b *testing.B) {
					e, c := openPrepared(b, backend, dir, 1<<20)
					var read int64
					b.ResetTimer()
					for i := 0; i < b.N; i++ {
						read = digestOnce(b, e, c).BytesRead
					}
					b.ReportMetric(float64(read), "bytes-read/op")
				})
				b.Run("baseline-read-all", func(b *testing.B) {
					_, c := openPrepared(b, backend, dir, 1<<20)
					buf := make([]byte, 1<<20)
					b.SetBytes(c.Records().SizeBytes())
					b.ResetTimer()
					for i := 0; i < b.N; i++ {
						for _, s := range c.Records().segs {
							for off := int64(0); off < s.size; off += int64(len(buf)) {
								if _, err := unix.Pread(s.fd, buf[:min(int64(len(buf)), s.size-off)], off); err != nil {
									b.Fatal(err)
								}
							}
						}
					}
				})
			})
		})
	}
}

// BenchmarkPrealloc measures the decision not to preallocate: one 4 KiB pwrite + fdatasync at the
// end of a growing file, into fallocate'd space (KEEP_SIZE and full size), and over prewritten
// blocks.
func BenchmarkPrealloc(b *testing.B) {
	const block = 4 << 10
	const span = 256 << 20
	cases := []struct {
		name  string
		setup func(b *testing.B, fd int)
	}{
		{"growing", func(*testing.B, int) {}},
		{"fallocate-keep-size", func(b *testing.B, fd int) {
			if err := unix.Fallocate(fd, unix.FALLOC_FL_KEEP_SIZE, 0, span); err != nil {
				b.Skip(err)
			}
		}},
		{"fallocate", func(b *testing.B, fd int) {
			if err := unix.Fallocate(fd, 0, 0, span); err != nil {
				b.Skip(err)
			}
		}},
		{"prewritten", func(b *testing.B, fd int) {
			z := make([]byte, 1<<20)
			for off := int64(0); off < span; off += int64(len(z)) {
				if _, err := unix.Pwrite(fd, z, off); err != nil {
					b.Fatal(err)
				}
			}
		}},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			f, err := os.Create(filepath.Join(b.TempDir(), "prealloc"))
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			fd := int(f.Fd())
			tc.setup(b, fd)
			if err := unix.Fsync(fd); err != nil {
				b.Fatal(err)
			}
			buf := make([]byte, block)
			b.SetBytes(block)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				off := int64(i%(span/block)) * block
				if _, err := unix.Pwrite(fd, buf, off); err != nil {
					b.Fatal(err)
				}
				if err := unix.Fdatasync(fd); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkAppendInterleaved (prewrite=-1: off; 1048576: 1 MiB of zeros ahead, the default) runs the log's group commit and its physical baseline (pwrite +
// fdatasync of the same bytes in the same group size, plain syscalls) alternately, one group
// each per iteration, so both see the same disk and the same neighbours; it reports each side's
// time per group, records/s and MB/s of payload, and the ratio. Allocations per appended record
// come from the runtime's malloc count over the log's groups only.
func BenchmarkAppendInterleaved(b *testing.B) {
	for _, g := range benchGroups() {
		for _, pw := range []int{-1, 1 << 20} {
			b.Run(fmt.Sprintf("group=%d/prewrite=%d", g, pw), func(b *testing.B) {
				benchAppendInterleaved(b, g, pw)
			})
		}
	}
}

func benchAppendInterleaved(b *testing.B, g, prewrite int) {
	benchBackends(b, func(b *testing.B, backend ring.Backend) {
		e := benchEnv(b, backend)
		e.cfg.PrewriteBytes = prewrite
		c := openDiscarding(b, e)
		defer c.CloseSync()
		f, err := os.Create(filepath.Join(b.TempDir(), "baseline"))
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		fd := int(f.Fd())
		base := make([]byte, g*(BatchHeaderSize+1024))
		var baseOff int64
		payload := make([]byte, 1024)
		h := BatchHeader{RecordCount: 1, Epoch: 1}
		var segNs, baseNs int64
		var mallocs uint64
		var ms runtime.MemStats
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			runtime.ReadMemStats(&ms)
			before := ms.Mallocs
			t0 := time.Now()
			for j := 0; j < g; j++ {
				if _, err := c.Append(1, &h, payload); err != nil {
					b.Fatal(err)
				}
			}
			c.Flush()
			for c.Records().DurableTail() != c.Records().NextOffset() {
				if err := e.r.Wait(1); err != nil {
					b.Fatal(err)
				}
				e.r.Dispatch()
			}
			t1 := time.Now()
			runtime.ReadMemStats(&ms)
			mallocs += ms.Mallocs - before
			if _, err := unix.Pwrite(fd, base, baseOff); err != nil {
				b.Fatal(err)
			}
			if err := unix.Fdatasync(fd); err != nil {
				b.Fatal(err)
			}
			baseOff += int64(len(base))
			t2 := time.Now()
			segNs += t1.Sub(t0).Nanoseconds()
			baseNs += t2.Sub(t1).Nanoseconds()
		}
		b.StopTimer()
		n := float64(b.N)
		b.ReportMetric(float64(segNs)/n, "log-ns/group")
		b.ReportMetric(float64(baseNs)/n, "base-ns/group")
		b.ReportMetric(n*float64(g)/(float64(segNs)/1e9), "log-records/s")
		b.ReportMetric(n*float64(g)/(float64(baseNs)/1e9), "base-records/s")
		b.ReportMetric(n*float64(g*1024)/(float64(segNs)/1e3), "log-MB/s")
		b.ReportMetric(n*float64(g*1024)/(float64(baseNs)/1e3), "base-MB/s")
		b.ReportMetric(float64(segNs)/float64(baseNs), "log/base")
		b.ReportMetric(float64(mallocs)/(n*float64(g)), "allocs/record")
	})
}

// BenchmarkAppendAfterPark: the cost a parked copy's first append pays. Each op appends one 1 KiB
// record and waits until it is durable, alternately on the open copy and on the copy just parked
// (Copy.Park, its closes completed outside the timing), so both arms share the disk's moment.
// Reports each arm's median: the parked arm adds the reopen (two OPENATs through the ring, one
// turn) before the commit.
func BenchmarkAppendAfterPark(b *testing.B) {
	benchBackends(b, func(b *testing.B, backend ring.Backend) {
		e := benchEnv(b, backend)
		c := openDiscarding(b, e)
		defer c.CloseSync()
		payload := make([]byte, 1024)
		h := BatchHeader{RecordCount: 1, Epoch: 1}
		drive := func(done func() bool) {
			for !done() {
				c.Flush()
				if e.r.InFlight() == 0 {
					continue
				}
				if err := e.r.Wait(1); err != nil {
					b.Fatal(err)
				}
				e.r.Dispatch()
			}
		}
		quiet := func() bool { return !c.Records().Busy() && !c.Cursors().Busy() }
		var open, parked []time.Duration
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if i%2 == 1 {
				b.StopTimer()
				drive(quiet)
				if !c.Park() {
					b.Fatal("a quiet copy did not park")
				}
				drive(quiet)
				b.StartTimer()
			}
			start := time.Now()
			if _, err := c.Append(1, &h, payload); err != nil {
				b.Fatal(err)
			}
			drive(func() bool { return c.Records().DurableTail() == c.Records().NextOffset() })
			if i%2 == 1 {
				parked = append(parked, time.Since(start))
			} else {
				open = append(open, time.Since(start))
			}
		}
		b.StopTimer()
		median := func(d []time.Duration) float64 {
			if len(d) == 0 {
				return 0
			}
			slices.Sort(d)
			return float64(d[len(d)/2].Microseconds())
		}
		b.ReportMetric(median(open), "open-p50-us")
		b.ReportMetric(median(parked), "parked-p50-us")
	})
}
