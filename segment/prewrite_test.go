package segment

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// With prewriting on, the active segment's file runs ahead of its data with zeros, closed
// segments are cut back to their data before their sidecar is written (so they open settled),
// and everything reads back after reopen.
func TestPrewrite_ZerosRunAheadAndClosedSegmentsAreExact(t *testing.T) {
	backends(t, func(t *testing.T, e *env) {
		e.cfg.SegmentBytes = 64 << 10
		e.cfg.PrewriteBytes = 16 << 10
		c := e.open()
		ahead := false
		for i := 0; i < 20; i++ {
			e.appendBatches(c, 10, 1, 1000, 1)
			segs := c.Records().segs
			act := segs[len(segs)-1]
			e.until(c, func() bool { return !c.Records().pw.inFlight })
			if fileSize(t, c.Records().path(act.base)) > act.size {
				ahead = true
			}
		}
		if !ahead {
			t.Fatalf("the active segment's file never ran ahead of its data")
		}
		if err := c.DrainSync(); err != nil {
			t.Fatal(err)
		}
		for _, s := range c.Records().segs[:c.Records().Segments()-1] {
			if got := fileSize(t, c.Records().path(s.base)); got != s.size || !s.sidecarSaved {
				t.Fatalf("closed segment %d: file %d bytes, data %d, sidecar %v", s.base, got, s.size, s.sidecarSaved)
			}
		}
		e.close(c)
		c, rep := e.openReport()
		defer e.close(c)
		if rep.Records.CutBytes != 0 || rep.Records.IndexRebuilds != 0 || rep.Records.Scanned != 1 {
			t.Fatalf("reopen report %+v, want only the active segment scanned and nothing cut", rep.Records)
		}
		if got := e.readAll(c, 1000); got != 200 {
			t.Fatalf("read %d of 200", got)
		}
	})
}

// A crash after a roll but before the closed segment was cut back leaves zeros past its data and
// no sidecar, while the next segment holds acknowledged records: open drops the zeros and keeps
// every later segment.
func TestRecovery_ZeroTailInClosedSegmentKeepsLaterData(t *testing.T) {
	backends(t, func(t *testing.T, e *env) {
		e.cfg.SegmentBytes = 8 << 10
		c := e.open()
		e.appendBatches(c, 30, 1, 1000, 1)
		e.close(c)
		files := segFiles(t, filepath.Join(e.dir, "records"))
		prev := files[len(files)-2]
		if err := os.Remove(strings.TrimSuffix(prev, ".log") + ".index"); err != nil {
			t.Fatal(err)
		}
		f, err := os.OpenFile(prev, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(make([]byte, 3000)); err != nil {
			t.Fatal(err)
		}
		f.Close()
		c, rep := e.openReport()
		defer e.close(c)
		if rep.Records.CutBytes != 0 || rep.Records.ZeroTailBytes != 3000 || c.Records().DurableTail() != 30 {
			t.Fatalf("report %+v tail %d, want 3000 zero bytes dropped and tail 30", rep.Records, c.Records().DurableTail())
		}
		if got := e.readAll(c, 1000); got != 30 {
			t.Fatalf("read %d of 30", got)
		}
	})
}

// Cut, append and reopen with prewriting on: the zeros past a cut never read as records.
func TestPrewrite_CutThenAppendThenReopen(t *testing.T) {
	backends(t, func(t *testing.T, e *env) {
		e.cfg.SegmentBytes = 64 << 10
		e.cfg.PrewriteBytes = 16 << 10
		c := e.open()
		e.appendBatches(c, 100, 1, 1000, 1)
		if err := c.CutSync(90, 0); err != nil {
			t.Fatal(err)
		}
		if err := c.CutSync(30, 0); err != nil {
			t.Fatal(err)
		}
		e.appendBatches(c, 50, 1, 1000, 1)
		if err := c.DrainSync(); err != nil {
			t.Fatal(err)
		}
		if got := e.readAll(c, 1000); got != 80 {
			t.Fatalf("read %d of 80", got)
		}
		e.close(c)
		c, rep := e.openReport()
		defer e.close(c)
		if rep.Records.CutBytes != 0 || c.Records().DurableTail() != 80 {
			t.Fatalf("reopen %+v tail %d", rep.Records, c.Records().DurableTail())
		}
		if got := e.readAll(c, 1000); got != 80 {
			t.Fatalf("read %d of 80 after reopen", got)
		}
	})
}

// An idle copy writes no zeros: prewriting starts with the first append since open, so a node
// booting 10,000 idle copies does not write 1 MiB into each one's active segment (recovery cut
// the zero tail of the last run, which the idle copy would otherwise write again).
func TestPrewrite_IdleCopyWritesNoZeros(t *testing.T) {
	backends(t, func(t *testing.T, e *env) {
		e.cfg.SegmentBytes = 64 << 10
		e.cfg.PrewriteBytes = 16 << 10
		c := e.open()
		active := func() int64 {
			segs := c.Records().segs
			return fileSize(t, c.Records().path(segs[len(segs)-1].base))
		}
		for range 10 {
			c.Flush()
		}
		if n := e.r.InFlight(); n != 0 || active() != 0 {
			t.Fatalf("idle copy: %d operations in flight, active segment file %d bytes; want none and 0", n, active())
		}
		e.appendBatches(c, 1, 1, 1000, 1)
		e.until(c, func() bool { return !c.Records().Busy() })
		if got, data := active(), c.Records().SizeBytes(); got <= data {
			t.Fatalf("after an append the active segment file is %d bytes for %d of data: no zeros ahead", got, data)
		}
		e.close(c)
		c = e.open()
		defer e.close(c)
		for range 10 {
			c.Flush()
		}
		if got, data := active(), c.Records().SizeBytes(); got != data || e.r.InFlight() != 0 {
			t.Fatalf("reopened idle copy: active segment file %d bytes for %d of data, %d in flight", got, data, e.r.InFlight())
		}
	})
}
