package segment

import (
	"encoding/binary"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/ringstream/ringstream/ring"
	"github.com/ringstream/ringstream/ring/ringtest"
)

// backends runs fn once per ring backend, each on its own locked OS thread with its own ring.
func backends(t *testing.T, fn func(t *testing.T, e *env)) {
	t.Helper()
	ringtest.ForEachBackend(t, func(t *testing.T, b ring.Backend) {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		e := newEnv(t, ring.Config{Backend: b, Entries: 256})
		fn(t, e)
	})
}

// lockThread locks the test goroutine to its OS thread until the test ends (a ring's rule).
func lockThread(t testing.TB) {
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
}

// env is one test's ring, directory, config and event recorder.
type env struct {
	t   *testing.T
	r   ring.Ring
	dir string
	cfg Config
	ev  *recorder
}

func newEnv(t *testing.T, rc ring.Config) *env {
	t.Helper()
	rc.Logger = quietLogger()
	r, err := ring.New(rc)
	if err != nil {
		t.Fatalf("ring.New(%s): %v", rc.Backend, err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return &env{
		t:   t,
		r:   r,
		dir: filepath.Join(t.TempDir(), "copy"),
		cfg: Config{SegmentBytes: 64 << 10, IndexIntervalBytes: 1 << 10, Logger: quietLogger()},
		ev:  &recorder{},
	}
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// recorder keeps every event a copy reports.
type recorder struct {
	appends []appendEvent
	reads   []readEvent
	seals   []sealEvent
	done    []Result
}

type appendEvent struct {
	log   LogKind
	token uint64
	end   uint64
	err   error
}

type readEvent struct {
	log  LogKind
	tag  uint64
	data []byte
	err  error
}

type sealEvent struct {
	tag  uint64
	seal Seal
	err  error
}

func (r *recorder) AppendDone(log LogKind, token, end uint64, err error) {
	r.appends = append(r.appends, appendEvent{log, token, end, err})
}

func (r *recorder) ReadDone(log LogKind, tag uint64, data []byte, err error) {
	r.reads = append(r.reads, readEvent{log, tag, data, err})
}

func (r *recorder) SealDone(tag uint64, s Seal, err error) {
	r.seals = append(r.seals, sealEvent{tag, s, err})
}

func (r *recorder) Done(res Result) { r.done = append(r.done, res) }

func (e *env) open() *Copy {
	e.t.Helper()
	c, _, err := OpenSync(e.r, e.dir, e.cfg, e.ev)
	if err != nil {
		e.t.Fatalf("Open: %v", err)
	}
	return c
}

func (e *env) openReport() (*Copy, OpenReport) {
	e.t.Helper()
	c, rep, err := OpenSync(e.r, e.dir, e.cfg, e.ev)
	if err != nil {
		e.t.Fatalf("Open: %v", err)
	}
	return c, rep
}

func (e *env) close(c *Copy) {
	e.t.Helper()
	if err := c.CloseSync(); err != nil {
		e.t.Fatalf("Close: %v", err)
	}
}

// until drives the ring (Flush, Wait, Dispatch) until done says so.
func (e *env) until(c *Copy, done func() bool) {
	e.t.Helper()
	for !done() {
		c.Flush()
		if e.r.InFlight() == 0 {
			c.Flush()
			if done() {
				return
			}
			if e.r.InFlight() == 0 {
				e.t.Fatalf("nothing in flight and the condition does not hold")
			}
		}
		if err := e.r.Wait(1); err != nil {
			e.t.Fatalf("Wait: %v", err)
		}
		e.r.Dispatch()
	}
}

// syncRecords waits until the record log's durable tail reaches its next offset.
func (e *env) syncRecords(c *Copy) {
	e.t.Helper()
	e.until(c, func() bool { return c.Records().DurableTail() == c.Records().NextOffset() })
}

// recordPayload is the payload of a batch of n records starting at base: 8 bytes per record
// holding its offset, padded with a pattern to recSize bytes per record.
func recordPayload(dst []byte, base uint64, n, recSize int) []byte {
	dst = dst[:0]
	for i := 0; i < n; i++ {
		off := base + uint64(i)
		dst = binary.LittleEndian.AppendUint64(dst, off)
		for j := 8; j < recSize; j++ {
			dst = append(dst, byte(off*31+uint64(j)))
		}
	}
	return dst
}

// appendBatches appends count batches of n records of recSize bytes in epoch and waits until
// they are durable.
func (e *env) appendBatches(c *Copy, count, n, recSize int, epoch uint64) {
	e.t.Helper()
	var buf []byte
	for i := 0; i < count; i++ {
		base := c.Records().NextOffset()
		buf = recordPayload(buf, base, n, recSize)
		h := BatchHeader{RecordCount: uint32(n), Epoch: epoch, FirstTimestamp: int64(base), MaxTimestamp: int64(base)}
		for {
			_, err := c.Append(base, &h, buf)
			if err == nil {
				break
			}
			if err != ErrBackpressure {
				e.t.Fatalf("Append: %v", err)
			}
			c.Flush()
			if err := e.r.Wait(1); err != nil {
				e.t.Fatal(err)
			}
			e.r.Dispatch()
		}
	}
	e.syncRecords(c)
}

// readAll reads the record log from its head to its durable tail through the ring and checks
// every record's payload; it returns the number of records seen.
func (e *env) readAll(c *Copy, recSize int) uint64 {
	e.t.Helper()
	l := c.Records()
	buf := make([]byte, 256<<10)
	next := l.Head()
	var want []byte
	for next < l.DurableTail() {
		e.ev.reads = e.ev.reads[:0]
		if err := l.Read(7, next, buf); err != nil {
			e.t.Fatalf("Read(%d): %v", next, err)
		}
		e.until(c, func() bool { return len(e.ev.reads) == 1 })
		rd := e.ev.reads[0]
		if rd.err != nil {
			e.t.Fatalf("ReadDone(%d): %v", next, rd.err)
		}
		it := NewBatchIter(rd.data, next)
		progressed := false
		for {
			h, payload, ok := it.Next()
			if !ok {
				break
			}
			if h.BaseOffset != next {
				e.t.Fatalf("batch base %d, want %d", h.BaseOffset, next)
			}
			want = recordPayload(want, h.BaseOffset, int(h.RecordCount), recSize)
			if string(payload) != string(want) {
				e.t.Fatalf("batch at %d: payload differs", h.BaseOffset)
			}
			next = h.NextOffset()
			progressed = true
		}
		if err := it.Err(); err != nil {
			e.t.Fatalf("read at %d: %v", next, err)
		}
		if !progressed {
			e.t.Fatalf("read at %d returned no whole batch", next)
		}
	}
	return next - l.Head()
}

// segFiles lists the .log files of one log directory, sorted.
func segFiles(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

func flipByte(t *testing.T, path string, at int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, at); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x40
	if _, err := f.WriteAt(b, at); err != nil {
		t.Fatal(err)
	}
}
