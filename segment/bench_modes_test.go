package segment

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ringstream/ringstream/ring"
)

// BenchmarkSegmentModes compares, at the file level, the three ways a log can lay out its active
// segment, for small commits (4 KiB: latency) and large ones (4 MiB: bandwidth), each commit one
// pwrite + fdatasync, segments of 16 MiB rolling as the log's do:
//
//   - none: the segment grows; a roll creates the next file and fsyncs the directory.
//   - prewrite: as none, plus zeros written 1 MiB ahead of the data (Config.PrewriteBytes), so
//     commits land on blocks already allocated and written; it doubles the bytes written.
//   - recycle: a roll renames a retired segment (fully written earlier) to the next name and
//     fsyncs the directory; commits overwrite its blocks in place.
//
// Each iteration also runs one baseline commit of the same size (pwrite + fdatasync at the end of
// a growing file that never rolls), so mode/base is a same-run ratio.
func BenchmarkSegmentModes(b *testing.B) {
	for _, size := range []int{4 << 10, 4 << 20} {
		for _, mode := range []string{"none", "prewrite", "recycle"} {
			b.Run(fmt.Sprintf("commit=%dKiB/%s", size>>10, mode), func(b *testing.B) {
				benchSegmentMode(b, mode, size)
			})
		}
	}
}

const (
	modeSegmentBytes  = 16 << 20
	modePrewriteBytes = 1 << 20
)

// modeLog is the file-level model of one log's active segment.
type modeLog struct {
	b       *testing.B
	dir     string
	dirfd   int
	mode    string
	fd      int
	seq     int
	pos     int64 // data end in the active segment
	filled  int64 // bytes known written (prewritten zeros, or a recycled file's old data)
	retired []string
	zeros   []byte
}

func (m *modeLog) must(err error) {
	if err != nil {
		m.b.Fatal(err)
	}
}

// roll makes the next segment active: a new file, or a retired one renamed.
func (m *modeLog) roll() {
	if m.fd >= 0 {
		m.must(unix.Close(m.fd))
		if m.mode == "recycle" {
			m.retired = append(m.retired, m.name(m.seq))
		} else {
			m.must(unix.Unlinkat(m.dirfd, m.name(m.seq), 0)) // retention keeps the disk bounded
		}
	}
	m.seq++
	var err error
	if m.mode == "recycle" && len(m.retired) > 0 {
		old := m.retired[0]
		m.retired = m.retired[1:]
		m.must(unix.Renameat(m.dirfd, old, m.dirfd, m.name(m.seq)))
		m.fd, err = unix.Openat(m.dirfd, m.name(m.seq), unix.O_RDWR|unix.O_CLOEXEC, 0)
		m.filled = modeSegmentBytes
	} else {
		m.fd, err = unix.Openat(m.dirfd, m.name(m.seq), unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o644)
		m.filled = 0
	}
	m.must(err)
	m.must(unix.Fsync(m.dirfd))
	m.pos = 0
}

func (m *modeLog) name(seq int) string { return fmt.Sprintf("%020d.log", seq) }

// commit writes buf at the end of the active segment and fdatasyncs it.
func (m *modeLog) commit(buf []byte) {
	if m.pos+int64(len(buf)) > modeSegmentBytes {
		m.roll()
	}
	if m.mode == "prewrite" {
		for m.filled-(m.pos+int64(len(buf))) < modePrewriteBytes/2 && m.filled < modeSegmentBytes {
			n := min(int64(modePrewriteBytes), modeSegmentBytes-m.filled)
			_, err := unix.Pwrite(m.fd, m.zeros[:n], m.filled)
			m.must(err)
			m.filled += n
		}
	}
	_, err := unix.Pwrite(m.fd, buf, m.pos)
	m.must(err)
	m.must(unix.Fdatasync(m.fd))
	m.pos += int64(len(buf))
}

func benchSegmentMode(b *testing.B, mode string, size int) {
	dir := b.TempDir()
	dirfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer unix.Close(dirfd)
	m := &modeLog{b: b, dir: dir, dirfd: dirfd, mode: mode, fd: -1, zeros: make([]byte, modePrewriteBytes)}
	if mode == "recycle" {
		// Two retired segments, written in full earlier, as retention leaves them.
		for i := 0; i < 2; i++ {
			name := fmt.Sprintf("retired-%d", i)
			f, err := os.Create(filepath.Join(dir, name))
			m.must(err)
			for off := 0; off < modeSegmentBytes; off += len(m.zeros) {
				_, err := f.Write(m.zeros)
				m.must(err)
			}
			m.must(f.Sync())
			m.must(f.Close())
			m.retired = append(m.retired, name)
		}
		m.must(unix.Fsync(dirfd))
	}
	m.roll()
	base, err := os.Create(filepath.Join(b.TempDir(), "baseline"))
	m.must(err)
	defer base.Close()
	var baseOff int64
	buf := make([]byte, size)
	for i := range buf {
		buf[i] = byte(i*7 + 1)
	}
	var modeNs, baseNs int64
	b.SetBytes(int64(size))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		m.commit(buf)
		t1 := time.Now()
		_, err := unix.Pwrite(int(base.Fd()), buf, baseOff)
		m.must(err)
		m.must(unix.Fdatasync(int(base.Fd())))
		baseOff += int64(size)
		if baseOff >= 256<<20 {
			baseOff = 0
			m.must(base.Truncate(0))
		}
		t2 := time.Now()
		modeNs += t1.Sub(t0).Nanoseconds()
		baseNs += t2.Sub(t1).Nanoseconds()
	}
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(float64(modeNs)/n/1e3, "mode-us/commit")
	b.ReportMetric(float64(baseNs)/n/1e3, "base-us/commit")
	b.ReportMetric(n*float64(size)/(float64(modeNs)/1e3), "mode-MB/s")
	b.ReportMetric(float64(modeNs)/float64(baseNs), "mode/base")
	if m.fd >= 0 {
		_ = unix.Close(m.fd)
	}
}

// BenchmarkLogModes runs the same comparison through the log itself, on the io_uring backend:
// one batch per group commit (4 KiB, or 4 MiB less a header), segments of 256 commits (at most
// 16 MiB), retention after each commit keeping two segments, and a warm-up of five segments, so
// recycling has spares and is recycling when the timer starts. Each iteration also
// runs one baseline commit (plain pwrite + fdatasync of the same bytes on a growing file).
func BenchmarkLogModes(b *testing.B) {
	modes := []struct {
		name              string
		prewrite, recycle int
	}{{"none", -1, -1}, {"prewrite", 1 << 20, -1}, {"recycle", -1, 2}, {"default", 0, 0}}
	for _, size := range []int{4 << 10, 4 << 20} {
		for _, m := range modes {
			b.Run(fmt.Sprintf("commit=%dKiB/%s", size>>10, m.name), func(b *testing.B) {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				skipUnavailable(b, ring.BackendIOUring)
				e := benchEnv(b, ring.BackendIOUring)
				e.cfg.SegmentBytes = min(256*int64(size), modeSegmentBytes)
				e.cfg.PrewriteBytes, e.cfg.RecycleSegments = m.prewrite, m.recycle
				benchLogMode(b, e, size)
			})
		}
	}
}

func benchLogMode(b *testing.B, e *env, size int) {
	c := openDiscarding(b, e)
	defer c.CloseSync()
	base, err := os.Create(filepath.Join(b.TempDir(), "baseline"))
	if err != nil {
		b.Fatal(err)
	}
	defer base.Close()
	payload := make([]byte, size-BatchHeaderSize)
	raw := make([]byte, size)
	var baseOff int64
	var logNs, baseNs int64
	commit := func() {
		h := BatchHeader{RecordCount: 1, Epoch: 1}
		if _, err := c.Append(1, &h, payload); err != nil {
			b.Fatal(err)
		}
		c.Flush()
		for c.Records().DurableTail() != c.Records().NextOffset() {
			if err := e.r.Wait(1); err != nil {
				b.Fatal(err)
			}
			e.r.Dispatch()
		}
		if c.Records().Segments() > 3 {
			if _, err := c.RetainSync(0, 2*e.cfg.SegmentBytes, 0); err != nil {
				b.Fatal(err)
			}
		}
	}
	for n := 0; n < 5*int(e.cfg.SegmentBytes)/size; n++ {
		commit()
	}
	b.SetBytes(int64(size))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		commit()
		t1 := time.Now()
		if _, err := unix.Pwrite(int(base.Fd()), raw, baseOff); err != nil {
			b.Fatal(err)
		}
		if err := unix.Fdatasync(int(base.Fd())); err != nil {
			b.Fatal(err)
		}
		baseOff += int64(size)
		if baseOff >= 256<<20 {
			baseOff = 0
			if err := base.Truncate(0); err != nil {
				b.Fatal(err)
			}
		}
		t2 := time.Now()
		logNs += t1.Sub(t0).Nanoseconds()
		baseNs += t2.Sub(t1).Nanoseconds()
	}
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(float64(logNs)/n/1e3, "log-us/commit")
	b.ReportMetric(float64(baseNs)/n/1e3, "base-us/commit")
	b.ReportMetric(n*float64(size)/(float64(logNs)/1e3), "log-MB/s")
	b.ReportMetric(float64(logNs)/float64(baseNs), "log/base")
}
