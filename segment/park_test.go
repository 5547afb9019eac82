package segment

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ringstream/ringstream/ring"
	"github.com/ringstream/ringstream/ring/ringtest"
)

// park parks c and waits until its closes completed; it fails the test if the copy does not park.
func (e *env) park(c *Copy) {
	e.t.Helper()
	e.until(c, func() bool { return !c.Records().Busy() && !c.Cursors().Busy() })
	if !c.Park() {
		e.t.Fatal("a quiet copy did not park")
	}
	e.until(c, func() bool { return !c.Records().Busy() && !c.Cursors().Busy() })
	if !c.Parked() {
		e.t.Fatal("Park returned true but the copy is not parked")
	}
	if n := openUnder(e.t, e.dir); n != 0 {
		e.t.Fatalf("%d descriptors open under a parked copy, want 0", n)
	}
}

// descriptorsNow waits for the copy to go quiet and returns the descriptors open under it.
func (e *env) descriptorsNow(c *Copy) int {
	e.t.Helper()
	e.until(c, func() bool { return !c.Records().Busy() && !c.Cursors().Busy() })
	return openUnder(e.t, e.dir)
}

// TestCopy_ParkedCopyHoldsNoDescriptorsAndServesEverything: issue 11 (e) for 10,000 idle copies. A
// parked copy holds no descriptor; reads of its closed and active segments work and leave it
// parked; an append reopens the record log only (through the ring) and is durable; a roll queued
// while parked, a seal, cursor commits, a cut, retention, a cursor snapshot, verify and a clean
// close all work from the parked state, and a reopen finds every record.
func TestCopy_ParkedCopyHoldsNoDescriptorsAndServesEverything(t *testing.T) {
	backends(t, func(t *testing.T, e *env) {
		e.cfg.SegmentBytes = 8 << 10
		e.cfg.PrewriteBytes = 4 << 10
		c := e.open()
		e.appendBatches(c, 20, 1, 1000, 1)
		if c.Records().Segments() < 2 {
			t.Fatal("want closed segments")
		}
		if _, err := c.CommitCursor(1, 1, "reader", 3); err != nil {
			t.Fatal(err)
		}
		// Cursor events waiting for a commit keep the copy from parking; Park asks for the commit.
		if c.Park() {
			t.Fatal("parked with a cursor event queued")
		}
		e.park(c)
		if off, ok := c.Cursor("reader"); !ok || off != 3 {
			t.Fatalf("cursor %d %v after the park committed it", off, ok)
		}
		if _, cur := c.Tails(); cur != 1 {
			t.Fatalf("cursor tail %d, want 1: Park must have committed the queued event", cur)
		}

		act := c.Activity()
		if got := e.readAll(c, 1000); got != 20 {
			t.Fatalf("read %d records from a parked copy, want 20", got)
		}
		if !c.Parked() || e.descriptorsNow(c) != 0 {
			t.Fatal("reads unparked the copy or left descriptors open")
		}
		if c.Activity() == act {
			t.Fatal("reads did not count as activity")
		}

		// An append reopens the record log (directory and active segment), not the cursor log.
		e.appendBatches(c, 1, 1, 1000, 1)
		if c.Parked() {
			t.Fatal("still parked after an append")
		}
		if n := e.descriptorsNow(c); n != 2 {
			t.Fatalf("%d descriptors after an append to a parked copy, want 2 (record log directory and active segment)", n)
		}

		// A batch that rolls, queued while parked: the old active segment and the new one.
		e.park(c)
		segs := c.Records().Segments()
		for c.Records().Segments() == segs {
			e.appendBatches(c, 1, 1, 1000, 1)
			if c.Records().Segments() == segs {
				e.park(c)
			}
		}
		if n := e.descriptorsNow(c); n != 2 {
			t.Fatalf("%d descriptors after a roll from the parked state, want 2", n)
		}
		tail := c.Records().DurableTail()

		// A seal from the parked state covers the same bytes as one from the open state.
		open := e.seal(c, 2)
		e.park(c)
		parked := e.seal(c, 2)
		if parked.Digest != open.Digest || parked.RecordTail != tail {
			t.Fatalf("seal of the parked copy %+v, of the open copy %+v", parked, open)
		}
		if err := c.AppendEpochSync(EpochEntry{Epoch: 2, RecordStart: tail}); err != nil {
			t.Fatal(err)
		}

		e.park(c)
		if _, err := c.CommitCursor(2, 2, "reader", 9); err != nil {
			t.Fatal(err)
		}
		c.SyncCursors()
		e.until(c, func() bool { _, cur := c.Tails(); return cur == 2 })

		e.park(c)
		if err := c.WriteCursorSnapshotSync(); err != nil {
			t.Fatal(err)
		}
		e.park(c)
		if _, _, err := c.VerifySync(); err != nil {
			t.Fatal(err)
		}
		e.park(c)
		if err := c.CutSync(tail-1, 2); err != nil {
			t.Fatal(err)
		}
		if got, _ := c.Tails(); got != tail-1 {
			t.Fatalf("record tail %d after a cut from the parked state, want %d", got, tail-1)
		}
		e.park(c)
		rep, err := c.RetainSync(0, 10<<10, 0)
		if err != nil {
			t.Fatal(err)
		}
		if rep.RecordSegments == 0 {
			t.Fatal("retention from the parked state removed nothing")
		}
		head := c.Records().Head()
		e.appendBatches(c, 1, 1, 1000, 2)
		e.park(c)
		active := c.Records().segs[len(c.Records().segs)-1]
		if active.filled <= active.size {
			t.Fatal("want prewritten space past the data to trim at close")
		}
		e.close(c)
		if n := openUnder(t, e.dir); n != 0 {
			t.Fatalf("%d descriptors open after closing a parked copy", n)
		}
		files := segFiles(t, filepath.Join(e.dir, "records"))
		if got := fileSize(t, files[len(files)-1]); got != active.size {
			t.Fatalf("active segment %d bytes after a clean close of a parked copy, want its data %d", got, active.size)
		}

		c, orep := e.openReport()
		defer e.close(c)
		if orep.Records.CutBytes != 0 || orep.Records.ZeroTailBytes != 0 {
			t.Fatalf("reopen had to repair the log: %+v", orep.Records)
		}
		if got := c.Records().DurableTail(); got != tail {
			t.Fatalf("reopened with record tail %d, want %d", got, tail)
		}
		if c.Records().Head() != head {
			t.Fatalf("reopened with head %d, want %d", c.Records().Head(), head)
		}
		if off, _ := c.Cursor("reader"); off != 9 {
			t.Fatalf("reopened with cursor %d, want 9", off)
		}
	})
}

// TestCopy_ParkRefusedWhileBusy: a copy with appends queued, a read or a seal in flight, or a rare
// operation running does not park, and stays usable.
func TestCopy_ParkRefusedWhileBusy(t *testing.T) {
	backends(t, func(t *testing.T, e *env) {
		lp := newLoop(t, e.r)
		c, err := Open(lp.js, lp.g, e.dir, e.cfg, e.ev, 1)
		if err != nil {
			t.Fatal(err)
		}
		if c.Park() {
			t.Fatal("parked while opening")
		}
		e.waitDone(lp, OpOpen, 1)
		if _, err := c.Append(0, &BatchHeader{RecordCount: 1, Epoch: 1}, []byte("x")); err != nil {
			t.Fatal(err)
		}
		if c.Park() {
			t.Fatal("parked with an append queued")
		}
		lp.until("the append", func() bool { return c.Records().DurableTail() == 1 })
		if err := c.Records().Read(1, 0, make([]byte, 4<<10)); err != nil {
			t.Fatal(err)
		}
		if c.Park() {
			t.Fatal("parked with a read in flight")
		}
		lp.until("the read", func() bool { return len(e.ev.reads) == 1 })
		if err := c.Seal(1, 1); err != nil {
			t.Fatal(err)
		}
		if c.Park() {
			t.Fatal("parked with a seal running")
		}
		lp.until("the seal", func() bool { return len(e.ev.seals) == 1 })
		if err := c.WriteCursorSnapshot(2); err != nil {
			t.Fatal(err)
		}
		if c.Park() {
			t.Fatal("parked with a rare operation running")
		}
		e.waitDone(lp, OpCursorSnapshot, 2)
		lp.until("quiet", func() bool { return !c.Records().Busy() && !c.Cursors().Busy() })
		if !c.Park() {
			t.Fatal("a quiet copy did not park")
		}
		// Appends queued in the same turns as the reopen: every one acknowledged, in order.
		for i := 0; i < 5; i++ {
			if _, err := c.Append(uint64(10+i), &BatchHeader{RecordCount: 1, Epoch: 1}, []byte("y")); err != nil {
				t.Fatal(err)
			}
			lp.turn()
		}
		lp.until("the appends after the park", func() bool { return c.Records().DurableTail() == 6 })
		for i, a := range e.ev.appends[1:] {
			if a.err != nil || a.token != uint64(10+i) {
				t.Fatalf("append %d after the park: token %d, err %v", i, a.token, a.err)
			}
		}
		if err := c.Close(3); err != nil {
			t.Fatal(err)
		}
		e.waitDone(lp, OpClose, 3)
	})
}

// TestCopy_ReopenFailureFailsTheLog: the active segment of a parked copy vanished (an operator's
// mistake, a broken disk): the append that needs it fails with ErrFailed naming the reopen, and the
// copy does not hang.
func TestCopy_ReopenFailureFailsTheLog(t *testing.T) {
	backends(t, func(t *testing.T, e *env) {
		c := e.open()
		defer func() { _ = c.CloseSync() }()
		e.appendBatches(c, 3, 1, 100, 1)
		e.park(c)
		files := segFiles(t, filepath.Join(e.dir, "records"))
		if err := os.Remove(files[len(files)-1]); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Append(7, &BatchHeader{RecordCount: 1, Epoch: 1}, []byte("z")); err != nil {
			t.Fatal(err)
		}
		e.until(c, func() bool { return len(e.ev.appends) == 4 })
		a := e.ev.appends[3]
		if a.token != 7 || !errors.Is(a.err, ErrFailed) {
			t.Fatalf("append after a failed reopen: token %d, err %v; want ErrFailed", a.token, a.err)
		}
		if msg := a.err.Error(); !strings.Contains(msg, "reopen") || !strings.Contains(msg, unix.ENOENT.Error()) {
			t.Fatalf("error %q does not name the reopen and its cause", a.err)
		}
	})
}

// TestJobs_RunningOperationsAreCapped: 2.5 x JobsRunningMax copies opened at once on one shard run
// at most JobsRunningMax opens at a time, all open, and the descriptors held at the peak stay
// within a few per running open, not a few per copy.
func TestJobs_RunningOperationsAreCapped(t *testing.T) {
	ringtest.ForEachBackend(t, func(t *testing.T, b ring.Backend) {
		lockThread(t)
		e := newEnv(t, ring.Config{Backend: b, Entries: 256})
		lp := newLoop(t, e.r)
		n := JobsRunningMax * 5 / 2
		root := e.dir + "s"
		if err := os.MkdirAll(root, 0o755); err != nil {
			t.Fatal(err)
		}
		parker := &parkOnOpen{recorder: e.ev}
		for i := 0; i < n; i++ {
			c, err := Open(lp.js, lp.g, filepath.Join(root, fmt.Sprint(i)), e.cfg, parker, uint64(i))
			if err != nil {
				t.Fatal(err)
			}
			parker.copies = append(parker.copies, c)
		}
		if lp.js.Live() != n {
			t.Fatalf("%d operations live, want %d", lp.js.Live(), n)
		}
		peakRunning, peakFds := 0, 0
		lp.until("opens", func() bool {
			peakRunning = max(peakRunning, lp.js.running)
			peakFds = max(peakFds, openUnder(t, root))
			parker.retry()
			return lp.js.Live() == 0 && len(parker.later) == 0
		})
		for _, d := range e.ev.done {
			if d.Err != nil {
				t.Fatalf("open %d: %v", d.Tag, d.Err)
			}
		}
		if len(e.ev.done) != n {
			t.Fatalf("%d opens reported, want %d", len(e.ev.done), n)
		}
		if peakRunning != JobsRunningMax {
			t.Fatalf("at most %d opens ran at once, want exactly JobsRunningMax = %d", peakRunning, JobsRunningMax)
		}
		if limit := 6 * JobsRunningMax; peakFds > limit {
			t.Fatalf("%d descriptors open at the peak, want at most %d", peakFds, limit)
		}
		lp.until("closes of the parked copies", func() bool { return lp.g.InFlight() == 0 })
		if got := openUnder(t, root); got != 0 {
			t.Fatalf("%d descriptors open under %d parked copies", got, n)
		}
		t.Logf("%d copies: at most %d opens at once, %d descriptors at the peak", n, peakRunning, peakFds)
	})
}

// parkOnOpen parks each copy as soon as its open is reported, as a host booting idle copies does.
type parkOnOpen struct {
	*recorder
	copies []*Copy
	later  []*Copy
}

func (p *parkOnOpen) Done(res Result) {
	p.recorder.Done(res)
	if res.Op == OpOpen && res.Err == nil && !p.copies[res.Tag].Park() {
		p.later = append(p.later, p.copies[res.Tag]) // a ring without room for the closes
	}
}

// retry parks the copies that found the ring full, as a host does at its next tick.
func (p *parkOnOpen) retry() {
	kept := p.later[:0]
	for _, c := range p.later {
		if !c.Park() {
			kept = append(kept, c)
		}
	}
	p.later = kept
}
