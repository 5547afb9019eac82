package segment

import (
	"errors"
	"testing"
)

// TestAppendEpoch_BusyOnlyBehindARareOperation: issue 22, finding 3 (busy is not broken). A log
// epoch asked for while a group commit, a read, a group crossing a roll, or the closes of a park are
// in flight is taken at once and written; while a retention job runs it is refused with ErrBusy,
// which fails nothing (the logs take appends, the retention ends) and is taken once the job ended.
// The host queues on ErrBusy (streamhost's tryEpoch); every other outcome here is success.
func TestAppendEpoch_BusyOnlyBehindARareOperation(t *testing.T) {
	backends(t, func(t *testing.T, e *env) {
		e.cfg.SegmentBytes = 16 << 10
		lp := newLoop(t, e.r)
		c, err := Open(lp.js, lp.g, e.dir, e.cfg, e.ev, 1)
		if err != nil {
			t.Fatal(err)
		}
		if res := e.waitDone(lp, OpOpen, 1); res.Err != nil {
			t.Fatalf("open: %v", res.Err)
		}
		appendN(t, lp, c, 100, 1)
		epoch := uint64(1)
		epochNow := func(what string) {
			t.Helper()
			epoch++
			tag := 100 + epoch
			if err := c.AppendEpoch(tag, EpochEntry{Epoch: epoch, RecordStart: c.Records().NextOffset()}); err != nil {
				t.Fatalf("log epoch while %s: %v, want it taken", what, err)
			}
			if res := e.waitDone(lp, OpAppendEpoch, tag); res.Err != nil {
				t.Fatalf("log epoch while %s: %v", what, res.Err)
			}
			if last, _ := c.LastEpoch(); last.Epoch != epoch {
				t.Fatalf("last epoch %d after %s, want %d", last.Epoch, what, epoch)
			}
		}
		payload := make([]byte, 512)
		appendOne := func() {
			t.Helper()
			if _, err := c.Append(7, &BatchHeader{RecordCount: 1, Epoch: epoch}, payload); err != nil {
				t.Fatal(err)
			}
		}

		appendOne()
		lp.js.Poll() // flushes: the group commit is in flight
		if !c.Records().commit.busy() {
			t.Fatal("no group commit in flight")
		}
		epochNow("a group commit is in flight")

		buf := make([]byte, 8<<10)
		if err := c.Records().Read(9, 0, buf); err != nil {
			t.Fatal(err)
		}
		epochNow("a read is in flight")

		for !c.Records().rolls(BatchHeaderSize + len(payload)) {
			appendOne()
		}
		appendOne() // this one rolls: its group opens a new segment first
		segs := c.Records().Segments()
		lp.js.Poll()
		if c.Records().commit.stage != stageOpening {
			t.Fatalf("commit stage %d, want the roll's open in flight", c.Records().commit.stage)
		}
		epochNow("a group crossing a roll is in flight")
		if c.Records().Segments() != segs {
			t.Fatal("segments changed")
		}

		lp.until("quiet", func() bool { return !c.Records().Busy() && !c.Cursors().Busy() })
		if !c.Park() {
			t.Fatal("a quiet copy did not park")
		}
		epochNow("the closes of a park are in flight")

		lp.until("quiet", func() bool { return !c.Records().Busy() && !c.Cursors().Busy() })
		if err := c.Retain(50, 0, 1, 0); err != nil {
			t.Fatal(err)
		}
		err = c.AppendEpoch(200, EpochEntry{Epoch: epoch + 1, RecordStart: c.Records().NextOffset()})
		if !errors.Is(err, ErrBusy) {
			t.Fatalf("log epoch while a retention job runs: %v, want ErrBusy", err)
		}
		appendOne() // the logs still take appends
		if res := e.waitDone(lp, OpRetain, 50); res.Err != nil {
			t.Fatalf("retention: %v", res.Err)
		}
		lp.until("appends durable", func() bool { return c.Records().DurableTail() == c.Records().NextOffset() })
		if c.Records().failed != nil || c.Cursors().failed != nil {
			t.Fatalf("a refusal as busy failed a log: %v %v", c.Records().failed, c.Cursors().failed)
		}
		epochNow("the retention ended")
		if err := c.Close(2); err != nil {
			t.Fatal(err)
		}
		if res := e.waitDone(lp, OpClose, 2); res.Err != nil {
			t.Fatalf("close: %v", res.Err)
		}
	})
}
