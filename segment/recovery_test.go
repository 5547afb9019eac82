package segment

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const (
	recoveryRecSize   = 1000
	recoveryBatchSize = BatchHeaderSize + recoveryRecSize
)

// Item 7: a torn or corrupt last batch is cut on open, and the report says how much.
func TestRecovery_TornLastBatchIsCutWithCount(t *testing.T) {
	cases := []struct {
		name    string
		damage  func(t *testing.T, path string, size int64)
		cutWant int64 // bytes cut
	}{
		{"truncated mid-header", func(t *testing.T, p string, size int64) {
			if err := os.Truncate(p, size-recoveryBatchSize+40); err != nil {
				t.Fatal(err)
			}
		}, 40},
		{"truncated mid-payload", func(t *testing.T, p string, size int64) {
			if err := os.Truncate(p, size-300); err != nil {
				t.Fatal(err)
			}
		}, recoveryBatchSize - 300},
		{"flipped payload byte", func(t *testing.T, p string, size int64) { flipByte(t, p, size-17) }, recoveryBatchSize},
		{"flipped header byte", func(t *testing.T, p string, size int64) {
			flipByte(t, p, size-recoveryBatchSize+30)
		}, recoveryBatchSize},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			backends(t, func(t *testing.T, e *env) {
				c := e.open()
				e.appendBatches(c, 10, 1, recoveryRecSize, 1)
				e.close(c)
				files := segFiles(t, filepath.Join(e.dir, "records"))
				last := files[len(files)-1]
				tc.damage(t, last, fileSize(t, last))
				c, rep := e.openReport()
				defer e.close(c)
				if rep.Records.CutBytes != tc.cutWant {
					t.Fatalf("cut %d bytes, want %d", rep.Records.CutBytes, tc.cutWant)
				}
				if rep.Records.CutFile != last {
					t.Fatalf("cut in %s, want %s", rep.Records.CutFile, last)
				}
				if got := c.Records().DurableTail(); got != 9 {
					t.Fatalf("tail %d after cut, want 9", got)
				}
				if got := e.readAll(c, recoveryRecSize); got != 9 {
					t.Fatalf("read %d records", got)
				}
				// The log takes appends again from the cut.
				e.appendBatches(c, 2, 1, recoveryRecSize, 1)
				if got := e.readAll(c, recoveryRecSize); got != 11 {
					t.Fatalf("read %d records after new appends", got)
				}
			})
		})
	}
}

// A crash during a group commit that crossed a roll can tear the previous segment's tail while
// the new segment already holds bytes: both are unsettled (no sidecar) and are cut together.
func TestRecovery_TornTailAcrossRollCutsLaterSegment(t *testing.T) {
	backends(t, func(t *testing.T, e *env) {
		e.cfg.SegmentBytes = 8 << 10
		c := e.open()
		e.appendBatches(c, 30, 1, recoveryRecSize, 1)
		e.close(c)
		dir := filepath.Join(e.dir, "records")
		files := segFiles(t, dir)
		prev := files[len(files)-2]
		if err := os.Remove(strings.TrimSuffix(prev, ".log") + ".index"); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(prev, fileSize(t, prev)-100); err != nil {
			t.Fatal(err)
		}
		lastSize := fileSize(t, files[len(files)-1])
		c, rep := e.openReport()
		defer e.close(c)
		if rep.Records.CutSegments != 1 || rep.Records.CutBytes != recoveryBatchSize-100+lastSize {
			t.Fatalf("report %+v, want 1 segment and %d bytes cut", rep.Records, recoveryBatchSize-100+lastSize)
		}
		if got := len(segFiles(t, dir)); got != len(files)-1 {
			t.Fatalf("%d files after cut, want %d", got, len(files)-1)
		}
		n := e.readAll(c, recoveryRecSize)
		if n != c.Records().DurableTail() || n >= 30 {
			t.Fatalf("read %d records, tail %d", n, c.Records().DurableTail())
		}
	})
}

// Corruption before the tail is an error naming the file and position, never a silent cut.
func TestRecovery_CorruptEarlierSegmentIsAnError(t *testing.T) {
	backends(t, func(t *testing.T, e *env) {
		e.cfg.SegmentBytes = 8 << 10
		c := e.open()
		e.appendBatches(c, 30, 1, recoveryRecSize, 1)
		e.until(c, func() bool { return !c.Records().Busy() })
		e.close(c)
		dir := filepath.Join(e.dir, "records")
		files := segFiles(t, dir)
		first := files[0]
		flipByte(t, first, recoveryBatchSize+500) // inside the second batch's payload

		// With its sidecar the segment is settled and open trusts it; verify mode finds it.
		c = e.open()
		_, _, err := c.VerifySync()
		if !errors.Is(err, ErrDigestMismatch) || !strings.Contains(err.Error(), first) {
			t.Fatalf("Verify: %v, want ErrDigestMismatch naming %s", err, first)
		}
		e.close(c)

		// Without its sidecar open must scan it, and a bad batch before settled data is an error.
		if err := os.Remove(strings.TrimSuffix(first, ".log") + ".index"); err != nil {
			t.Fatal(err)
		}
		_, _, err = OpenSync(e.r, e.dir, e.cfg, e.ev)
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), first) ||
			!strings.Contains(err.Error(), "byte 1080") {
			t.Fatalf("Open: %v, want ErrCorrupt naming %s at byte 1080", err, first)
		}
		if fileSize(t, first) == 0 || len(segFiles(t, dir)) != len(files) {
			t.Fatalf("open cut data before the tail")
		}
	})
}

// A missing sidecar of a good closed segment is rebuilt on open.
func TestRecovery_RebuildsMissingIndex(t *testing.T) {
	backends(t, func(t *testing.T, e *env) {
		e.cfg.SegmentBytes = 8 << 10
		c := e.open()
		e.appendBatches(c, 30, 1, recoveryRecSize, 1)
		e.until(c, func() bool { return !c.Records().Busy() })
		e.close(c)
		dir := filepath.Join(e.dir, "records")
		idx, _ := filepath.Glob(filepath.Join(dir, "*.index"))
		for _, f := range idx {
			if err := os.Remove(f); err != nil {
				t.Fatal(err)
			}
		}
		c, rep := e.openReport()
		defer e.close(c)
		if rep.Records.IndexRebuilds != len(idx) || rep.Records.CutBytes != 0 {
			t.Fatalf("report %+v, want %d rebuilds and no cut", rep.Records, len(idx))
		}
		if got := e.readAll(c, recoveryRecSize); got != 30 {
			t.Fatalf("read %d", got)
		}
		again, _ := filepath.Glob(filepath.Join(dir, "*.index"))
		if len(again) != len(idx) {
			t.Fatalf("%d sidecars after rebuild, want %d", len(again), len(idx))
		}
	})
}

// A closed segment shorter than its sidecar says lost durable bytes: an error, never a cut.
func TestRecovery_ShortenedSettledSegmentIsAnError(t *testing.T) {
	backends(t, func(t *testing.T, e *env) {
		e.cfg.SegmentBytes = 8 << 10
		c := e.open()
		e.appendBatches(c, 30, 1, recoveryRecSize, 1)
		e.close(c)
		dir := filepath.Join(e.dir, "records")
		files := segFiles(t, dir)
		prev := files[len(files)-2]
		if err := os.Truncate(prev, recoveryBatchSize); err != nil {
			t.Fatal(err)
		}
		_, _, err := OpenSync(e.r, e.dir, e.cfg, e.ev)
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), prev) {
			t.Fatalf("Open: %v, want ErrCorrupt naming %s", err, prev)
		}
		if len(segFiles(t, dir)) != len(files) {
			t.Fatalf("open removed segments")
		}
	})
}
