package segment

import (
	"fmt"
	"testing"

	"github.com/ringstream/ringstream/internal/fds"
)

// openUnder counts this process's descriptors open on dir or a file under it.
func openUnder(t *testing.T, dir string) int {
	t.Helper()
	n, err := fds.Under(dir)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// activeDescriptors is what a copy keeps open between operations: its two log directories (the
// roll's file creation and directory fsync) and the two active segments.
const activeDescriptors = 4

// TestCopy_KeepsOnlyActiveSegmentsAndLogDirsOpen: issue 11 (e), at most 4 descriptors per copy.
// Between operations a copy holds its two log directories and its two active segments open, never
// its directory, epochs or fence file, nor a closed segment: those are opened for the operation
// that needs them (a seal, a log epoch, a read of a closed segment, recovery) and closed after.
func TestCopy_KeepsOnlyActiveSegmentsAndLogDirsOpen(t *testing.T) {
	backends(t, func(t *testing.T, e *env) {
		e.cfg.SegmentBytes = 8 << 10
		c := e.open()
		check := func(when string) {
			t.Helper()
			e.until(c, func() bool { return !c.Records().Busy() && !c.Cursors().Busy() })
			if n := openUnder(t, e.dir); n != activeDescriptors {
				t.Fatalf("%s: %d descriptors open under the copy, want %d", when, n, activeDescriptors)
			}
		}
		check("after open")
		e.appendBatches(c, 40, 1, 1000, 1)
		if c.Records().Segments() < 4 {
			t.Fatalf("%d segments, want several closed ones", c.Records().Segments())
		}
		check("after rolls")
		if got := e.readAll(c, 1000); got != 40 {
			t.Fatalf("read %d records from closed and active segments, want 40", got)
		}
		check("after reads of closed segments")
		if err := c.AppendEpochSync(EpochEntry{Epoch: 2, RecordStart: 40}); err != nil {
			t.Fatal(err)
		}
		check("after a log epoch")
		if _, err := c.CommitCursor(1, 2, "reader", 7); err != nil {
			t.Fatal(err)
		}
		s := e.seal(c, 3)
		check("after a seal")
		if err := c.WriteCursorSnapshotSync(); err != nil {
			t.Fatal(err)
		}
		check("after a cursor snapshot")
		if _, _, err := c.VerifySync(); err != nil {
			t.Fatal(err)
		}
		check("after verify")
		e.close(c)
		if n := openUnder(t, e.dir); n != 0 {
			t.Fatalf("%d descriptors open after close", n)
		}
		c, rep := e.openReport()
		defer e.close(c)
		if rep.Fence != 3 || lastEpoch(c) != 2 {
			t.Fatalf("reopened with fence %d, last epoch %d: want 3 and 2", rep.Fence, lastEpoch(c))
		}
		check("after reopen")
		if again := e.seal(c, 3); again.Digest != s.Digest || again.RecordTail != 40 {
			t.Fatalf("seal after reopen %+v, before %+v", again, s)
		}
		if got := e.readAll(c, 1000); got != 40 {
			t.Fatalf("read %d records after reopen, want 40", got)
		}
		check("after reads and a seal on the reopened copy")
	})
}

func lastEpoch(c *Copy) uint64 {
	e, _ := c.LastEpoch()
	return e.Epoch
}

// TestJobs_PollFlushesOnlyCopiesWithWork: a turn costs an idle copy nothing. Once opened and
// quiet, a copy leaves the list of copies Jobs.Poll flushes; an append puts it back, its group
// commit completes through Poll alone, and it leaves again.
func TestJobs_PollFlushesOnlyCopiesWithWork(t *testing.T) {
	backends(t, func(t *testing.T, e *env) {
		lp := newLoop(t, e.r)
		const copies = 20
		cs := make([]*Copy, copies)
		for i := range cs {
			var err error
			if cs[i], err = Open(lp.js, lp.g, fmt.Sprintf("%s-%d", e.dir, i), e.cfg, e.ev, uint64(i)); err != nil {
				t.Fatal(err)
			}
		}
		lp.until("opens", func() bool { return len(e.ev.done) == copies && lp.g.InFlight() == 0 })
		lp.turn()
		if n := len(lp.js.awake); n != 0 {
			t.Fatalf("%d idle copies on the list Poll flushes, want 0", n)
		}
		if _, err := cs[7].Append(1, &BatchHeader{RecordCount: 1, Epoch: 1}, []byte("x")); err != nil {
			t.Fatal(err)
		}
		if n := len(lp.js.awake); n != 1 || lp.js.awake[0] != cs[7] {
			t.Fatalf("after an append %d copies on the list, want the one appended to", n)
		}
		lp.until("the append's commit", func() bool { return cs[7].Records().DurableTail() == 1 && lp.g.InFlight() == 0 })
		lp.turn()
		if n := len(lp.js.awake); n != 0 {
			t.Fatalf("%d copies on the list once the commit ended, want 0", n)
		}
	})
}

// TestRead_EndingDuringRollKeepsClosedSegmentForItsCommit: a read of the active segment is in
// flight when a group commit rolls (its first batch in that segment, the next in a new file whose
// open goes through the ring first). The read ends before the open: the segment it read is closed
// by then but the group's writev and fdatasync on it are not queued yet, so its descriptor must stay
// open until the group is durable. Releasing it with the read failed the group with EBADF.
func TestRead_EndingDuringRollKeepsClosedSegmentForItsCommit(t *testing.T) {
	backends(t, func(t *testing.T, e *env) {
		e.cfg.SegmentBytes = 8 << 10
		c := e.open()
		defer e.close(c)
		e.appendBatches(c, 6, 1, 1000, 1) // about 6 KiB of the first segment
		l := c.Records()
		segs := l.Segments()
		if err := l.Read(1, 0, make([]byte, 8<<10)); err != nil {
			t.Fatal(err)
		}
		var buf []byte
		for i := 0; i < 3; i++ { // the first fits the old segment, the next roll
			base := l.NextOffset()
			buf = recordPayload(buf, base, 1, 1000)
			h := BatchHeader{RecordCount: 1, Epoch: 1}
			if _, err := c.Append(base, &h, buf); err != nil {
				t.Fatal(err)
			}
		}
		e.syncRecords(c)
		if l.Segments() == segs {
			t.Fatal("the group did not roll")
		}
		for _, a := range e.ev.appends {
			if a.err != nil {
				t.Fatalf("append failed: %v", a.err)
			}
		}
		e.until(c, func() bool { return len(e.ev.reads) == 1 })
		if err := e.ev.reads[0].err; err != nil {
			t.Fatalf("read: %v", err)
		}
	})
}
