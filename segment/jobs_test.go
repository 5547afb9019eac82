package segment

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/ringstream/ringstream/internal/allocs"
	"github.com/ringstream/ringstream/ring"
	"github.com/ringstream/ringstream/ring/ringtest"
)

// guardRing is a ring that fails the test when it is driven (Wait, Dispatch) from inside
// Dispatch or from inside Jobs.Poll: the asynchronous paths must only queue.
type guardRing struct {
	ring.Ring
	t          testing.TB
	inDispatch bool
	inPoll     bool
}

func (g *guardRing) Wait(n int) error {
	if g.inDispatch || g.inPoll {
		g.t.Fatalf("ring Wait called from inside Dispatch (%v) or Poll (%v)", g.inDispatch, g.inPoll)
	}
	return g.Ring.Wait(n)
}

func (g *guardRing) Dispatch() int {
	if g.inDispatch || g.inPoll {
		g.t.Fatalf("ring Dispatch called from inside Dispatch (%v) or Poll (%v)", g.inDispatch, g.inPoll)
	}
	g.inDispatch = true
	defer func() { g.inDispatch = false }()
	return g.Ring.Dispatch()
}

// loop is a shard loop in miniature: Poll (the per-turn hook), then Wait and Dispatch.
type loop struct {
	t  testing.TB
	g  *guardRing
	js *Jobs
}

func newLoop(t testing.TB, r ring.Ring) *loop {
	return &loop{t: t, g: &guardRing{Ring: r, t: t}, js: NewJobs()}
}

// turn runs one loop turn.
func (lp *loop) turn() {
	lp.g.inPoll = true
	lp.js.Poll()
	lp.g.inPoll = false
	if lp.g.InFlight() == 0 {
		return
	}
	if err := lp.g.Wait(1); err != nil {
		lp.t.Fatalf("Wait: %v", err)
	}
	lp.g.Dispatch()
}

// until turns the loop until done holds, failing after turnsMax turns.
func (lp *loop) until(what string, done func() bool) {
	lp.t.Helper()
	for i := 0; !done(); i++ {
		if i > 1_000_000 {
			lp.t.Fatalf("%s: not done after %d turns", what, i)
		}
		lp.turn()
	}
}

// doneOf returns the Result of op with tag once it has been reported.
func (r *recorder) doneOf(op Op, tag uint64) (Result, bool) {
	for _, d := range r.done {
		if d.Op == op && d.Tag == tag {
			return d, true
		}
	}
	return Result{}, false
}

func (e *env) waitDone(lp *loop, op Op, tag uint64) Result {
	e.t.Helper()
	var res Result
	lp.until(fmt.Sprintf("%s %d", op, tag), func() bool {
		var ok bool
		res, ok = e.ev.doneOf(op, tag)
		return ok
	})
	return res
}

// TestJobs_RareOperationsRunThroughPollOnly drives a copy's whole life asynchronously (open,
// appends, log epoch, cursor snapshot, seal, retention, cut, close, reopen, delete) on a ring that
// fails the test if anything drives it from inside Dispatch or Poll.
func TestJobs_RareOperationsRunThroughPollOnly(t *testing.T) {
	backends(t, func(t *testing.T, e *env) {
		lp := newLoop(t, e.r)
		c, err := Open(lp.js, lp.g, e.dir, e.cfg, e.ev, 1)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Append(1, &BatchHeader{RecordCount: 1}, []byte("x")); !errors.Is(err, ErrBusy) {
			t.Fatalf("Append before open is done: %v, want ErrBusy", err)
		}
		if res := e.waitDone(lp, OpOpen, 1); res.Err != nil {
			t.Fatalf("open: %v", res.Err)
		}
		appendN(t, lp, c, 400, 1)
		if err := c.AppendEpoch(2, EpochEntry{Epoch: 1, RecordStart: 0}); err != nil {
			t.Fatal(err)
		}
		if err := c.AppendEpoch(3, EpochEntry{Epoch: 2}); !errors.Is(err, ErrBusy) {
			t.Fatalf("second rare operation at once: %v, want ErrBusy", err)
		}
		if res := e.waitDone(lp, OpAppendEpoch, 2); res.Err != nil {
			t.Fatalf("append epoch: %v", res.Err)
		}
		if _, err := c.CommitCursor(9, 1, "reader", 100); err != nil {
			t.Fatal(err)
		}
		if err := c.WriteCursorSnapshot(4); err != nil {
			t.Fatal(err)
		}
		if res := e.waitDone(lp, OpCursorSnapshot, 4); res.Err != nil {
			t.Fatalf("snapshot: %v", res.Err)
		}
		if err := c.Seal(5, 3); err != nil {
			t.Fatal(err)
		}
		lp.until("seal", func() bool { return len(e.ev.seals) == 1 })
		if e.ev.seals[0].err != nil || e.ev.seals[0].seal.RecordTail != 400 {
			t.Fatalf("seal: %+v", e.ev.seals[0])
		}
		segsBefore := c.Records().Segments()
		if err := c.Retain(6, 0, 1, 0); err != nil {
			t.Fatal(err)
		}
		res := e.waitDone(lp, OpRetain, 6)
		if res.Err != nil || res.Retain.RecordSegments != segsBefore-1 || c.Records().Segments() != 1 {
			t.Fatalf("retain: %+v, segments %d of %d", res, c.Records().Segments(), segsBefore)
		}
		head := c.Records().Head()
		if err := c.Cut(7, 390, 0); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Append(1, &BatchHeader{RecordCount: 1, Epoch: 3}, []byte("x")); !errors.Is(err, ErrBusy) {
			t.Fatalf("Append during a cut: %v, want ErrBusy", err)
		}
		if res := e.waitDone(lp, OpCut, 7); res.Err != nil {
			t.Fatalf("cut: %v", res.Err)
		}
		if tail, _ := c.Tails(); tail != 390 {
			t.Fatalf("record tail after cut %d, want 390", tail)
		}
		if err := c.Close(8); err != nil {
			t.Fatal(err)
		}
		if res := e.waitDone(lp, OpClose, 8); res.Err != nil {
			t.Fatalf("close: %v", res.Err)
		}
		c2, err := Open(lp.js, lp.g, e.dir, e.cfg, e.ev, 10)
		if err != nil {
			t.Fatal(err)
		}
		if res := e.waitDone(lp, OpOpen, 10); res.Err != nil {
			t.Fatalf("reopen: %v", res.Err)
		}
		if tail, _ := c2.Tails(); tail != 390 || c2.Records().Head() != head || c2.FenceEpoch() != 3 {
			t.Fatalf("reopened: tail %d head %d fence %d", tail, c2.Records().Head(), c2.FenceEpoch())
		}
		if off, ok := c2.Cursor("reader"); !ok || off != 100 {
			t.Fatalf("cursor after reopen: %d %v", off, ok)
		}
		if err := c2.Delete(11); err != nil {
			t.Fatal(err)
		}
		if res := e.waitDone(lp, OpDelete, 11); res.Err != nil {
			t.Fatalf("delete: %v", res.Err)
		}
		for _, p := range []string{e.dir, e.dir + tombSuffix} {
			if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("%s after delete: %v", p, err)
			}
		}
		if lp.js.Live() != 0 || len(lp.js.copies) != 0 {
			t.Fatalf("jobs left: %d live, %d copies", lp.js.Live(), len(lp.js.copies))
		}
	})
}

// appendN appends n one-record batches of epoch and turns the loop until they are durable.
func appendN(t testing.TB, lp *loop, c *Copy, n int, epoch uint64) {
	payload := make([]byte, 512)
	for i := 0; i < n; i++ {
		h := BatchHeader{RecordCount: 1, Epoch: epoch}
		for {
			_, err := c.Append(uint64(i), &h, payload)
			if err == nil {
				break
			}
			if !errors.Is(err, ErrBackpressure) {
				t.Fatalf("Append: %v", err)
			}
			lp.turn()
		}
	}
	lp.until("appends durable", func() bool { return c.Records().DurableTail() == c.Records().NextOffset() })
}

// cutOnAck is a host that starts rare operations from inside completion handlers, as a seal or
// promotion handler does: each AppendDone of its trigger token starts a cut and a log epoch.
type cutOnAck struct {
	*recorder
	c       *Copy
	trigger uint64
	cutAt   uint64
	started []error
}

func (h *cutOnAck) AppendDone(log LogKind, token, end uint64, err error) {
	h.recorder.AppendDone(log, token, end, err)
	if token == h.trigger && err == nil {
		h.cutAt = end
		h.started = append(h.started, h.c.AppendEpoch(100, EpochEntry{Epoch: 5, RecordStart: end}))
	}
}

func (h *cutOnAck) Done(r Result) {
	h.recorder.Done(r)
	if r.Op == OpAppendEpoch && r.Err == nil {
		h.started = append(h.started, h.c.Cut(101, h.cutAt, 0))
	}
}

// TestJobs_StartedFromHandlersNeverReenterTheRing: rare operations started from inside
// Dispatch (AppendDone) and from Done complete, and nothing drives the ring from inside either.
func TestJobs_StartedFromHandlersNeverReenterTheRing(t *testing.T) {
	backends(t, func(t *testing.T, e *env) {
		lp := newLoop(t, e.r)
		h := &cutOnAck{recorder: e.ev, trigger: 50}
		c, err := Open(lp.js, lp.g, e.dir, e.cfg, h, 1)
		if err != nil {
			t.Fatal(err)
		}
		h.c = c
		e.waitDone(lp, OpOpen, 1)
		appendN(t, lp, c, 120, 5)
		res := e.waitDone(lp, OpCut, 101)
		if res.Err != nil {
			t.Fatalf("cut: %v", res.Err)
		}
		for _, err := range h.started {
			if err != nil {
				t.Fatalf("start from handler: %v", err)
			}
		}
		if tail, _ := c.Tails(); tail != 51 {
			t.Fatalf("tail %d after the cut, want 51", tail)
		}
		if last, _ := c.LastEpoch(); last.Epoch != 5 || last.RecordStart != 51 {
			t.Fatalf("last epoch %+v", last)
		}
	})
}

// TestJobs_HundredCopiesOnASmallRing opens, seals, cuts and closes 100 copies at once on one ring
// of 16 entries, so jobs meet a full ring and wait their turn.
func TestJobs_HundredCopiesOnASmallRing(t *testing.T) {
	ringtest.ForEachBackend(t, func(t *testing.T, b ring.Backend) {
		lockThread(t)
		e := newEnv(t, ring.Config{Backend: b, Entries: 16})
		lp := newLoop(t, e.r)
		const n = 100
		copies := manyCopies(t, lp, e, n)
		for i, c := range copies {
			// A seal that finds the ring full is back-pressure: turn the loop and retry.
			for err := c.Seal(uint64(i), 2); err != nil; err = c.Seal(uint64(i), 2) {
				if !errors.Is(err, ErrBackpressure) {
					t.Fatalf("seal %d: %v", i, err)
				}
				lp.turn()
			}
		}
		lp.until("seals", func() bool { return len(e.ev.seals) == n })
		for i, c := range copies {
			if err := c.Cut(uint64(i), 5, 0); err != nil {
				t.Fatalf("cut %d: %v", i, err)
			}
		}
		waitAll(t, lp, e, OpCut, n)
		for i, c := range copies {
			if tail, _ := c.Tails(); tail != 5 {
				t.Fatalf("copy %d: tail %d", i, tail)
			}
			if err := c.Close(uint64(i)); err != nil {
				t.Fatal(err)
			}
		}
		waitAll(t, lp, e, OpClose, n)
	})
}

// manyCopies opens n copies under e.dir at once and gives each 10 durable records.
func manyCopies(t testing.TB, lp *loop, e *env, n int) []*Copy {
	if err := os.MkdirAll(e.dir+"s", 0o755); err != nil {
		t.Fatal(err)
	}
	copies := make([]*Copy, n)
	for i := range copies {
		c, err := Open(lp.js, lp.g, filepath.Join(e.dir+"s", fmt.Sprint(i)), e.cfg, e.ev, uint64(i))
		if err != nil {
			t.Fatal(err)
		}
		copies[i] = c
	}
	waitAll(t, lp, e, OpOpen, n)
	for _, c := range copies {
		for j := 0; j < 10; j++ {
			if _, err := c.Append(0, &BatchHeader{RecordCount: 1, Epoch: 1}, []byte("record")); err != nil {
				t.Fatal(err)
			}
		}
	}
	lp.until("appends", func() bool {
		for _, c := range copies {
			if c.Records().DurableTail() != 10 {
				return false
			}
		}
		return true
	})
	return copies
}

// waitAll waits for n reports of op and fails on any error.
func waitAll(t testing.TB, lp *loop, e *env, op Op, n int) {
	count := func() int {
		k := 0
		for _, d := range e.ev.done {
			if d.Op == op {
				if d.Err != nil {
					t.Fatalf("%s %d: %v", op, d.Tag, d.Err)
				}
				k++
			}
		}
		return k
	}
	lp.until(op.String(), func() bool { return count() == n })
	e.ev.done = e.ev.done[:0]
}

// TestJobs_AbandonEndsEveryJob: Abandon ends suspended jobs with ErrClosed and reports them.
func TestJobs_AbandonEndsEveryJob(t *testing.T) {
	backends(t, func(t *testing.T, e *env) {
		lp := newLoop(t, e.r)
		if err := os.MkdirAll(e.dir+"s", 0o755); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 3; i++ {
			if _, err := Open(lp.js, lp.g, filepath.Join(e.dir+"s", fmt.Sprint(i)), e.cfg, e.ev, uint64(i)); err != nil {
				t.Fatal(err)
			}
		}
		lp.turn() // each open has queued its first operation
		lp.js.Abandon()
		if len(e.ev.done) != 3 || lp.js.Live() != 0 {
			t.Fatalf("after Abandon: %d reported, %d live", len(e.ev.done), lp.js.Live())
		}
		for _, d := range e.ev.done {
			if d.Err == nil {
				t.Fatalf("open %d reported success after Abandon", d.Tag)
			}
		}
		for lp.g.InFlight() > 0 { // late completions are ignored
			lp.turn()
		}
	})
}

// The per-turn hook costs no allocation in steady state: appends flushed by Poll alone.
func TestJobs_PollAllocatesNothing(t *testing.T) {
	backends(t, func(t *testing.T, e *env) {
		e.cfg.SegmentBytes = 4 << 20 // no roll inside the measured loop
		lp := newLoop(t, e.r)
		c, err := Open(lp.js, lp.g, e.dir, e.cfg, e.ev, 1)
		if err != nil {
			t.Fatal(err)
		}
		e.waitDone(lp, OpOpen, 1)
		ev := &countEvents{}
		c.ev, c.records.events, c.cursors.events = ev, ev, ev
		payload := make([]byte, 1024)
		h := BatchHeader{RecordCount: 1, Epoch: 1}
		group := func() {
			for i := 0; i < 4; i++ {
				if _, err := c.Append(1, &h, payload); err != nil {
					t.Fatal(err)
				}
			}
			for c.Records().DurableTail() != c.Records().NextOffset() {
				lp.turn()
			}
		}
		for i := 0; i < 20; i++ {
			group()
		}
		if got := allocs.In(t, 100, group); got != 0 {
			t.Fatalf("%d allocations in 100 groups flushed by Poll, want 0", got)
		}
	})
}
