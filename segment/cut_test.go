package segment

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Item 5: cut at a segment boundary, inside a segment, at the retained head, below it (error), and
// twice (no-op); the result survives reopen and takes appends again.
func TestCut_Cases(t *testing.T) {
	const rec = 1000 // one record per batch; 8 batches per 8 KiB... segment
	backends(t, func(t *testing.T, e *env) {
		e.cfg.SegmentBytes = 8 << 10
		c := e.open()
		e.appendBatches(c, 40, 1, rec, 1)
		e.until(c, func() bool { return !c.Records().Busy() })
		segs := c.Records().segs
		boundary := segs[2].base // first offset of the third segment
		inside := segs[1].base + 2

		// Inside a segment.
		if err := c.CutSync(35, 0); err != nil {
			t.Fatal(err)
		}
		if c.Records().DurableTail() != 35 {
			t.Fatalf("tail %d after cut at 35", c.Records().DurableTail())
		}
		// Twice: a no-op.
		if err := c.CutSync(35, 0); err != nil {
			t.Fatal(err)
		}
		// Past the tail: a no-op too.
		if err := c.CutSync(39, 0); err != nil || c.Records().DurableTail() != 35 {
			t.Fatalf("cut past the tail: %v, tail %d", err, c.Records().DurableTail())
		}
		// At a segment boundary: the later segments disappear whole.
		if err := c.CutSync(boundary, 0); err != nil {
			t.Fatal(err)
		}
		if got, want := len(segFiles(t, filepath.Join(e.dir, "records"))), 2; got != want {
			t.Fatalf("%d segment files after a boundary cut, want %d", got, want)
		}
		if c.Records().DurableTail() != boundary {
			t.Fatalf("tail %d, want %d", c.Records().DurableTail(), boundary)
		}
		if got := e.readAll(c, rec); got != boundary {
			t.Fatalf("read %d", got)
		}
		// Inside an earlier segment, then reopen.
		if err := c.CutSync(inside, 0); err != nil {
			t.Fatal(err)
		}
		e.close(c)
		c, rep := e.openReport()
		if rep.Records.CutBytes != 0 {
			t.Fatalf("reopen after cut found a torn tail: %+v", rep.Records)
		}
		if c.Records().DurableTail() != inside {
			t.Fatalf("tail %d after reopen, want %d", c.Records().DurableTail(), inside)
		}
		e.appendBatches(c, 3, 1, rec, 1)
		if got := e.readAll(c, rec); got != inside+3 {
			t.Fatalf("read %d, want %d", got, inside+3)
		}
		// At the retained head: the log becomes empty but keeps its head.
		if err := c.CutSync(0, 0); err != nil {
			t.Fatal(err)
		}
		if c.Records().DurableTail() != 0 || c.Records().Head() != 0 {
			t.Fatalf("tail %d head %d after a cut at the head", c.Records().DurableTail(), c.Records().Head())
		}
		e.close(c)
		c = e.open()
		defer e.close(c)
		if c.Records().DurableTail() != 0 {
			t.Fatalf("tail %d after reopen", c.Records().DurableTail())
		}
	})
}

func TestCut_BelowHeadIsAnError(t *testing.T) {
	backends(t, func(t *testing.T, e *env) {
		e.cfg.SegmentBytes = 8 << 10
		c := e.open()
		defer e.close(c)
		e.appendBatches(c, 40, 1, 1000, 1)
		e.until(c, func() bool { return !c.Records().Busy() })
		rep, err := c.RetainSync(0, 20<<10, 0)
		if err != nil || rep.RecordSegments == 0 {
			t.Fatalf("Retain: %+v %v", rep, err)
		}
		head := c.Records().Head()
		if err := c.CutSync(head-1, 0); !errors.Is(err, ErrBelowHead) {
			t.Fatalf("cut below the head: %v, want ErrBelowHead", err)
		}
		if err := c.CutSync(head, 0); err != nil {
			t.Fatalf("cut at the head: %v", err)
		}
		if c.Records().DurableTail() != head || c.Records().Head() != head {
			t.Fatalf("tail %d head %d, want both %d", c.Records().DurableTail(), c.Records().Head(), head)
		}
	})
}

func TestCut_InsideBatchIsRefused(t *testing.T) {
	backends(t, func(t *testing.T, e *env) {
		c := e.open()
		defer e.close(c)
		e.appendBatches(c, 5, 4, 100, 1)
		if err := c.CutSync(6, 0); !errors.Is(err, ErrNotBoundary) {
			t.Fatalf("cut inside a batch: %v, want ErrNotBoundary", err)
		}
		if err := c.CutSync(8, 0); err != nil || c.Records().DurableTail() != 8 {
			t.Fatalf("cut at 8: %v, tail %d", err, c.Records().DurableTail())
		}
	})
}

// Item 4 with item 5: log epochs past a cut are dropped; the lookups answer from what is left.
func TestCut_DropsLogEpochsPastIt(t *testing.T) {
	backends(t, func(t *testing.T, e *env) {
		c := e.open()
		for _, ep := range []EpochEntry{{1, 0, 0}, {3, 10, 0}, {4, 20, 0}} {
			if err := c.AppendEpochSync(ep); err != nil {
				t.Fatal(err)
			}
			e.appendBatches(c, 10, 1, 50, ep.Epoch)
		}
		if last, _ := c.LastEpoch(); last.Epoch != 4 {
			t.Fatalf("last epoch %d", last.Epoch)
		}
		if at, _ := c.EpochAt(15); at.Epoch != 3 {
			t.Fatalf("epoch at 15: %d", at.Epoch)
		}
		if err := c.CutSync(15, 0); err != nil {
			t.Fatal(err)
		}
		e.close(c)
		c = e.open()
		defer e.close(c)
		if last, _ := c.LastEpoch(); last.Epoch != 3 {
			t.Fatalf("last epoch after cut %d, want 3", last.Epoch)
		}
		if err := c.AppendEpochSync(EpochEntry{Epoch: 2, RecordStart: 15}); !errors.Is(err, ErrEpochOrder) {
			t.Fatalf("lower epoch: %v, want ErrEpochOrder", err)
		}
		if err := c.AppendEpochSync(EpochEntry{Epoch: 5, RecordStart: 15}); err != nil {
			t.Fatal(err)
		}
		if got := c.Epochs(); len(got) != 3 || got[2].Epoch != 5 {
			t.Fatalf("epochs %+v", got)
		}
	})
}

// Item 5: a crash in the middle of a cut leaves a log that opens cleanly at or above the cut. The
// cut removes later segments last first, each removal made durable, then shortens the segment
// holding the cut; this test builds each state a crash can leave on disk and opens it.
func TestCut_CrashMidwayOpensAtOrAboveCut(t *testing.T) {
	type state struct {
		name    string
		removed int  // later segments already removed, last first
		trunc   bool // the segment holding the cut already shortened
	}
	states := []state{{"nothing done", 0, false}, {"one later segment removed", 1, false},
		{"all later segments removed", -1, false}, {"shortened", -1, true}}
	for _, st := range states {
		t.Run(st.name, func(t *testing.T) {
			backends(t, func(t *testing.T, e *env) {
				e.cfg.SegmentBytes = 8 << 10
				c := e.open()
				e.appendBatches(c, 40, 1, 1000, 1)
				if err := c.DrainSync(); err != nil {
					t.Fatal(err)
				}
				segs := c.Records().segs
				const cut = 12
				i := c.Records().findSegment(cut)
				pos, err := c.Records().batchPos(segs[i], cut)
				if err != nil {
					t.Fatal(err)
				}
				e.close(c)
				dir := filepath.Join(e.dir, "records")
				files := segFiles(t, dir)
				later := files[i+1:]
				n := st.removed
				if n < 0 {
					n = len(later)
				}
				for k := 0; k < n; k++ {
					f := later[len(later)-1-k]
					if err := os.Remove(f); err != nil {
						t.Fatal(err)
					}
					_ = os.Remove(strings.TrimSuffix(f, ".log") + ".index")
				}
				if st.trunc {
					_ = os.Remove(strings.TrimSuffix(files[i], ".log") + ".index")
					if err := os.Truncate(files[i], pos); err != nil {
						t.Fatal(err)
					}
				}
				c = e.open()
				defer e.close(c)
				tail := c.Records().DurableTail()
				if tail < cut {
					t.Fatalf("tail %d after a crash mid-cut, below the cut %d", tail, cut)
				}
				if got := e.readAll(c, 1000); got != tail {
					t.Fatalf("read %d of %d", got, tail)
				}
				// Repeating the cut after the crash finishes it.
				if err := c.CutSync(cut, 0); err != nil || c.Records().DurableTail() != cut {
					t.Fatalf("repeated cut: %v, tail %d", err, c.Records().DurableTail())
				}
			})
		})
	}
}

// A cut of the cursor log forgets the cursor events it removed at once, as an open would: the cursor
// map is the snapshot's plus the events left.
func TestCut_CursorEventsCutAreForgotten(t *testing.T) {
	backends(t, func(t *testing.T, e *env) {
		c := e.open()
		e.appendBatches(c, 4, 1, 100, 1)
		for i, ev := range []struct {
			name string
			off  uint64
		}{{"a", 1}, {"a", 3}, {"b", 2}} {
			if _, err := c.CommitCursor(uint64(i), 1, ev.name, ev.off); err != nil {
				t.Fatal(err)
			}
		}
		e.syncCursors(c)
		if err := c.CutSync(4, 1); err != nil {
			t.Fatal(err)
		}
		check := func(when string) {
			if off, ok := c.Cursor("a"); !ok || off != 1 {
				t.Fatalf("%s: cursor a at %d (%v), want 1", when, off, ok)
			}
			if off, ok := c.Cursor("b"); ok {
				t.Fatalf("%s: cursor b at %d, want it gone with its event", when, off)
			}
		}
		check("after the cut")
		e.close(c)
		c = e.open()
		check("after reopen")
		e.close(c)
	})
}
