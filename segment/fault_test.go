package segment

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ringstream/ringstream/ring"
	"github.com/ringstream/ringstream/ring/powerloss"
)

// TestGroupCommit_FailedIsNeverDurable: a group commit whose writev fails (ENOSPC), writes short, or
// whose fdatasync fails (EIO) acknowledges none of its appends as durable: each gets an error
// wrapping ErrFailed, the durable tail stays where it was, and the log refuses everything after. The
// mutation audit of issue 22 found that ignoring the failure (append.go's finishCommit) left every
// test green.
func TestGroupCommit_FailedIsNeverDurable(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault powerloss.Fault
		errno unix.Errno // 0: a short write, which has none and wraps ErrShortWrite
	}{
		{"writev ENOSPC", powerloss.Fault{Op: ring.OpWrite, Path: "copy/records", Errno: unix.ENOSPC}, unix.ENOSPC},
		{"short writev", powerloss.Fault{Op: ring.OpWrite, Path: "copy/records", Short: true}, 0},
		{"fdatasync EIO", powerloss.Fault{Op: ring.OpFsync, Path: "copy/records", Errno: unix.EIO}, unix.EIO},
	} {
		t.Run(tc.name, func(t *testing.T) {
			backends(t, func(t *testing.T, e *env) {
				disk := powerloss.NewDisk(filepath.Dir(e.dir), 1)
				e.r = disk.Wrap(e.r)
				e.cfg.PrewriteBytes = -1 // the fault hits the group commit's own write
				c := e.open()
				e.appendBatches(c, 4, 2, 100, 1)
				durable := c.Records().DurableTail()
				disk.Inject(tc.fault)
				e.ev.appends = e.ev.appends[:0]
				var buf []byte
				for i := range 3 {
					base := c.Records().NextOffset()
					h := BatchHeader{RecordCount: 2, Epoch: 1}
					if _, err := c.Append(uint64(100+i), &h, recordPayload(buf, base, 2, 100)); err != nil {
						t.Fatal(err)
					}
				}
				e.until(c, func() bool { return len(e.ev.appends) == 3 })
				for _, a := range e.ev.appends {
					if a.err == nil || !errors.Is(a.err, ErrFailed) || (tc.errno != 0 && !errors.Is(a.err, tc.errno)) ||
						(tc.errno == 0 && !errors.Is(a.err, ErrShortWrite)) {
						t.Fatalf("append %d of the failed group reported %v, want ErrFailed wrapping %v", a.token, a.err, tc.errno)
					}
				}
				if got := c.Records().DurableTail(); got != durable {
					t.Fatalf("durable tail %d after the failed commit, want %d", got, durable)
				}
				h := BatchHeader{RecordCount: 1, Epoch: 1}
				if _, err := c.Append(200, &h, []byte("after")); !errors.Is(err, ErrFailed) {
					t.Fatalf("append after the failure: %v, want ErrFailed", err)
				}
				if err := c.CloseSync(); !errors.Is(err, ErrFailed) {
					t.Fatalf("close of the failed log: %v, want ErrFailed", err)
				}
				disk.Clear()
				again := e.open() // recovery: whatever the failed group left is cut or made durable
				defer e.close(again)
				if got := again.Records().DurableTail(); got < durable || got > durable+6 {
					t.Fatalf("reopened at %d, want between %d and %d", got, durable, durable+6)
				}
				if n := e.readAll(again, 100); n != again.Records().DurableTail() {
					t.Fatalf("read back %d records of %d", n, again.Records().DurableTail())
				}
			})
		})
	}
}

// warnings records the messages of a logger's Warn and Error lines.
type warnings struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnings) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (w *warnings) Handle(_ context.Context, r slog.Record) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	msg := r.Message
	r.Attrs(func(a slog.Attr) bool { msg += " " + a.String(); return true })
	w.msgs = append(w.msgs, msg)
	return nil
}
func (w *warnings) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w *warnings) WithGroup(string) slog.Handler      { return w }

func (w *warnings) all() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.msgs, "\n")
}

// TestDigest_ReadEndingBeforeTheRollIsDurable: issue 22's "digest of closed segment failed ... ring:
// ftruncate: bad file descriptor". A read of the active segment is in flight when an append rolls to
// a new segment (the group holding it has no part in the old one), and the read ends before that
// group is durable. The read's end must not close the old segment's descriptor: the closing digest,
// queued once the group is durable, cuts the segment's prewritten zeros and hashes it through it.
func TestDigest_ReadEndingBeforeTheRollIsDurable(t *testing.T) {
	backends(t, func(t *testing.T, e *env) {
		w := &warnings{}
		e.cfg.Logger = slog.New(w)
		e.cfg.SegmentBytes = 8 << 10
		e.cfg.PrewriteBytes = 4 << 10
		c := e.open()
		defer e.close(c)
		e.appendBatches(c, 6, 1, 1000, 1) // about 6 KiB in the first segment, zeros written past them
		e.until(c, func() bool { return !c.Records().Busy() })
		if c.Records().Segments() != 1 {
			t.Fatalf("%d segments, want the first one still active", c.Records().Segments())
		}
		buf := make([]byte, 16<<10)
		if err := c.Records().Read(9, 0, buf); err != nil {
			t.Fatal(err)
		}
		base := c.Records().NextOffset()
		h := BatchHeader{RecordCount: 3, Epoch: 1}
		if _, err := c.Append(50, &h, recordPayload(nil, base, 3, 1000)); err != nil {
			t.Fatal(err)
		}
		if c.Records().Segments() != 2 {
			t.Fatalf("%d segments after an append that does not fit, want a roll", c.Records().Segments())
		}
		for len(e.ev.reads) == 0 { // the read ends before any Flush starts the new group
			if err := e.r.Wait(1); err != nil {
				t.Fatal(err)
			}
			e.r.Dispatch()
		}
		if err := e.ev.reads[0].err; err != nil {
			t.Fatal(err)
		}
		e.syncRecords(c)
		e.until(c, func() bool { return !c.Records().Busy() })
		if msgs := w.all(); msgs != "" {
			t.Fatalf("warnings: %s", msgs)
		}
		if _, err := os.Stat(filepath.Join(e.dir, "records", sidecarName(0))); err != nil {
			t.Fatalf("the closed segment's sidecar: %v (its closing digest failed)", err)
		}
		if got := fileSize(t, filepath.Join(e.dir, "records", segmentName(0))); got != c.Records().segs[0].size {
			t.Fatalf("closed segment is %d bytes, its data %d: prewritten zeros not cut", got, c.Records().segs[0].size)
		}
	})
}

// TestClose_FailedLogWaitsForItsReads: a copy whose log failed closes with reads still in flight (one
// shares the active segment's descriptor, one opened a closed segment for itself): Close waits for
// them (and every other operation of the copy) before it closes the files, so none outlives its
// descriptor and none reports after the close.
func TestClose_FailedLogWaitsForItsReads(t *testing.T) {
	backends(t, func(t *testing.T, e *env) {
		disk := powerloss.NewDisk(filepath.Dir(e.dir), 1)
		e.r = disk.Wrap(e.r)
		e.cfg.SegmentBytes = 8 << 10
		c := e.open()
		e.appendBatches(c, 20, 1, 1000, 1)
		e.until(c, func() bool { return !c.Records().Busy() })
		if c.Records().Segments() < 3 {
			t.Fatalf("%d segments, want closed ones", c.Records().Segments())
		}
		disk.Inject(powerloss.Fault{Op: ring.OpFsync, Path: "copy/records", Errno: unix.EIO, Until: true})
		h := BatchHeader{RecordCount: 1, Epoch: 1}
		if _, err := c.Append(99, &h, recordPayload(nil, c.Records().NextOffset(), 1, 1000)); err != nil {
			t.Fatal(err)
		}
		e.until(c, func() bool { return len(e.ev.appends) > 0 && e.ev.appends[len(e.ev.appends)-1].token == 99 })
		if c.Records().failed == nil {
			t.Fatal("the log did not fail")
		}
		e.ev.reads = e.ev.reads[:0]
		for i, off := range []uint64{0, c.Records().DurableTail() - 1} {
			if err := c.Records().Read(uint64(i), off, make([]byte, 16<<10)); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.CloseSync(); !errors.Is(err, ErrFailed) {
			t.Fatalf("close: %v, want ErrFailed", err)
		}
		if len(e.ev.reads) != 2 || e.r.InFlight() != 0 {
			t.Fatalf("after close: %d reads reported, %d operations in flight; want 2 and 0", len(e.ev.reads), e.r.InFlight())
		}
		for _, rd := range e.ev.reads {
			if rd.err != nil {
				t.Fatalf("read %d: %v", rd.tag, rd.err)
			}
		}
		if n := openUnder(t, e.dir); n != 0 {
			t.Fatalf("%d descriptors open after close", n)
		}
	})
}

// TestClose_FailedLogWaitsForItsDigest: a log fails while the closing digest of a segment is still
// reading it, chunk after chunk; Close must let that digest end before it closes the segment's
// descriptor (issue 22, item 5: no operation outlives its descriptor), so no digest step runs on a
// closed (or reused) descriptor and nothing is in flight once the close returned.
func TestClose_FailedLogWaitsForItsDigest(t *testing.T) {
	backends(t, func(t *testing.T, e *env) {
		w := &warnings{}
		disk := powerloss.NewDisk(filepath.Dir(e.dir), 1)
		e.r = disk.Wrap(e.r)
		e.cfg.Logger = slog.New(w)
		e.cfg.SegmentBytes, e.cfg.DigestChunkBytes, e.cfg.PrewriteBytes = 1<<20, 4<<10, -1
		// The first segment is opened with bytes in it: its closing digest reads it back (a segment
		// the log created is hashed as its bytes are queued, and its digest has nothing to read).
		c := e.open()
		e.appendBatches(c, 10, 1, 1000, 1)
		if err := c.CloseSync(); err != nil {
			t.Fatal(err)
		}
		c = e.open()
		e.appendBatches(c, 1100, 1, 1000, 1) // rolls once: the first segment's digest starts
		if !c.Records().dig.running {
			t.Fatal("no closing digest running")
		}
		disk.Inject(powerloss.Fault{Op: ring.OpFsync, Path: "copy/records", Errno: unix.EIO, Until: true})
		h := BatchHeader{RecordCount: 1, Epoch: 1}
		if _, err := c.Append(99, &h, recordPayload(nil, c.Records().NextOffset(), 1, 1000)); err != nil {
			t.Fatal(err)
		}
		e.until(c, func() bool { return c.Records().failed != nil })
		if !c.Records().dig.running {
			t.Fatal("the digest ended before the log failed: the test needs it running")
		}
		if err := c.CloseSync(); !errors.Is(err, ErrFailed) {
			t.Fatalf("close: %v, want ErrFailed", err)
		}
		if n := e.r.InFlight(); n != 0 {
			t.Fatalf("%d operations in flight after close", n)
		}
		if msgs := w.all(); strings.Contains(msgs, "digest") || strings.Contains(msgs, "bad file descriptor") {
			t.Fatalf("warnings: %s", msgs)
		}
		if n := openUnder(t, e.dir); n != 0 {
			t.Fatalf("%d descriptors open after close", n)
		}
	})
}
