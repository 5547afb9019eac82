package segment

import (
	"os"

	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// A closed segment holding a recycled file's old bytes past its batches (its cut back before the
// sidecar was lost in a crash) keeps the later segments: the next segment starts exactly where
// its batches end, so the old bytes are truncated and counted, not cut as a torn tail.
func TestRecovery_StaleTailInClosedSegmentKeepsLaterData(t *testing.T) {
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
		// Old bytes: a copy of the segment's own first batches, as a retired file would hold.
		old, err := os.ReadFile(files[0])
		if err != nil {
			t.Fatal(err)
		}
		f, err := os.OpenFile(prev, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(old[:3000]); err != nil {
			t.Fatal(err)
		}
		f.Close()
		c, rep := e.openReport()
		defer e.close(c)
		if rep.Records.CutBytes != 0 || rep.Records.StaleTailBytes != 3000 || c.Records().DurableTail() != 30 {
			t.Fatalf("report %+v tail %d, want 3000 stale bytes dropped and tail 30", rep.Records, c.Records().DurableTail())
		}
		if got := e.readAll(c, 1000); got != 30 {
			t.Fatalf("read %d of 30", got)
		}
	})
}

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Sys().(*syscall.Stat_t).Ino
}

// Retention keeps up to RecycleSegments retired segments as spares, and a roll renames one to
// the new segment's name: the new segment is the retired file (same inode), its old bytes never
// read as records, and the log reads back whole after a reopen.
func TestRecycle_RetiredSegmentIsReusedOnRoll(t *testing.T) {
	backends(t, func(t *testing.T, e *env) {
		e.cfg.SegmentBytes = 8 << 10
		e.cfg.PrewriteBytes = -1
		e.cfg.RecycleSegments = 2
		c := e.open()
		e.appendBatches(c, 40, 1, 1000, 1)
		rep, err := c.RetainSync(0, 1, 0)
		if err != nil || rep.RecordSegments < 3 {
			t.Fatalf("retain: %+v %v", rep, err)
		}
		dir := filepath.Join(e.dir, "records")
		spares, _ := filepath.Glob(filepath.Join(dir, "*"+spareSuffix))
		if len(spares) != 2 {
			t.Fatalf("%d spares after retention, want 2", len(spares))
		}
		ino := inode(t, spares[0])
		before := segFiles(t, dir)
		e.appendBatches(c, 10, 1, 1000, 1) // rolls at least once
		after := segFiles(t, dir)
		newSeg := after[len(before)]
		if inode(t, newSeg) != ino {
			t.Fatalf("rolled segment %s is not the oldest spare", newSeg)
		}
		e.close(c)
		c = e.open()
		defer e.close(c)
		if _, _, err := c.VerifySync(); err != nil {
			t.Fatal(err)
		}
		if got := e.readAll(c, 1000); got != c.Records().DurableTail()-c.Records().Head() {
			t.Fatalf("read %d records", got)
		}
	})
}
