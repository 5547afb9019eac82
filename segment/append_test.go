package segment

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/ringstream/ringstream/internal/allocs"
	"github.com/ringstream/ringstream/ring"
	"github.com/ringstream/ringstream/ring/ringtest"
)

// Item 2: appends queue, one group commit makes them durable together, the durable tail moves only
// on the fsync completion, and each append is acknowledged in order.
func TestAppend_GroupCommitAcksInOrderOnlyWhenDurable(t *testing.T) {
	backends(t, func(t *testing.T, e *env) {
		c := e.open()
		defer e.close(c)
		var buf []byte
		for i := 0; i < 10; i++ {
			buf = recordPayload(buf, uint64(i*3), 3, 100)
			h := BatchHeader{RecordCount: 3, Epoch: 1}
			base, err := c.Append(uint64(100+i), &h, buf)
			if err != nil {
				t.Fatal(err)
			}
			if base != uint64(i*3) {
				t.Fatalf("append %d got base %d", i, base)
			}
		}
		if got := c.Records().DurableTail(); got != 0 {
			t.Fatalf("durable tail %d before any commit", got)
		}
		c.Flush()
		if got := c.Records().DurableTail(); got != 0 {
			t.Fatalf("durable tail %d before the fsync completed", got)
		}
		if len(e.ev.appends) != 0 {
			t.Fatalf("acks before the fsync completed: %v", e.ev.appends)
		}
		e.syncRecords(c)
		if len(e.ev.appends) != 10 {
			t.Fatalf("%d acks, want 10", len(e.ev.appends))
		}
		for i, a := range e.ev.appends {
			if a.err != nil || a.token != uint64(100+i) || a.end != uint64(3*i+3) || a.log != RecordLog {
				t.Fatalf("ack %d: %+v", i, a)
			}
		}
		if got := c.Records().DurableTail(); got != 30 {
			t.Fatalf("durable tail %d, want 30", got)
		}
	})
}

// Items 1 and 3: 1M small records, each its own append (one record per batch), in group commits,
// reopened and read back whole.
func TestAppend_MillionRecordsReopenAndReadBack(t *testing.T) {
	backends(t, func(t *testing.T, e *env) {
		e.cfg.SegmentBytes = 16 << 20
		e.cfg.IndexIntervalBytes = 4 << 10
		e.cfg.PrewriteBytes = -1 // the rest of the suite runs with the default prewrite
		c := e.open()
		const batches, perBatch, recSize = 1_000_000, 1, 16
		e.appendBatches(c, batches, perBatch, recSize, 1)
		if got := c.Records().DurableTail(); got != batches*perBatch {
			t.Fatalf("tail %d", got)
		}
		e.close(c)
		c, rep := e.openReport()
		defer e.close(c)
		if rep.Records.CutBytes != 0 {
			t.Fatalf("clean reopen cut %d bytes", rep.Records.CutBytes)
		}
		if c.Records().Segments() < 2 {
			t.Fatalf("expected several segments, got %d", c.Records().Segments())
		}
		if got := e.readAll(c, recSize); got != batches*perBatch {
			t.Fatalf("read back %d records", got)
		}
	})
}

// A group that crosses a segment roll creates the new file and writes both; closed segments get a
// sidecar once their digest is computed.
func TestAppend_RollCreatesSegmentAndSidecar(t *testing.T) {
	backends(t, func(t *testing.T, e *env) {
		e.cfg.SegmentBytes = 8 << 10
		c := e.open()
		defer e.close(c)
		e.appendBatches(c, 40, 1, 1000, 1)
		e.until(c, func() bool { return !c.Records().Busy() })
		files := segFiles(t, filepath.Join(e.dir, "records"))
		if len(files) < 4 {
			t.Fatalf("%d segment files, want several", len(files))
		}
		for _, f := range files[:len(files)-1] {
			if _, err := os.Stat(f[:len(f)-4] + ".index"); err != nil {
				t.Fatalf("closed segment %s has no sidecar: %v", f, err)
			}
		}
		if got := e.readAll(c, 1000); got != 40 {
			t.Fatalf("read %d records", got)
		}
	})
}

func TestAppend_EncodedBatchMustBeNextOffset(t *testing.T) {
	backends(t, func(t *testing.T, e *env) {
		c := e.open()
		defer e.close(c)
		h := BatchHeader{BaseOffset: 5, RecordCount: 1, Epoch: 1}
		b := appendBatch(nil, &h, []byte("x"))
		if _, err := c.AppendEncoded(1, b); !errors.Is(err, ErrOffsetOrder) {
			t.Fatalf("got %v, want ErrOffsetOrder", err)
		}
		h.BaseOffset = 0
		b = appendBatch(nil, &h, []byte("x"))
		if _, err := c.AppendEncoded(1, b); err != nil {
			t.Fatal(err)
		}
		e.syncRecords(c)
		if c.Records().DurableTail() != 1 {
			t.Fatalf("tail %d", c.Records().DurableTail())
		}
	})
}

// Zero allocations per appended record in steady state: Append plus its group commit, for groups
// of one append and of sixteen.
func TestAppend_SteadyStateAllocatesNothing(t *testing.T) {
	backends(t, func(t *testing.T, e *env) {
		e.cfg.SegmentBytes = 64 << 20
		e.cfg.IndexIntervalBytes = 4 << 10
		ev := &countEvents{}
		c, _, err := OpenSync(e.r, e.dir, e.cfg, ev)
		if err != nil {
			t.Fatal(err)
		}
		defer e.close(c)
		payload := make([]byte, 1024)
		h := BatchHeader{RecordCount: 1, Epoch: 1}
		for _, g := range []int{1, 16} {
			appendGroup := func() {
				for i := 0; i < g; i++ {
					if _, err := c.Append(1, &h, payload); err != nil {
						t.Fatal(err)
					}
				}
				c.Flush()
				for c.Records().DurableTail() != c.Records().NextOffset() {
					if err := e.r.Wait(1); err != nil {
						t.Fatal(err)
					}
					e.r.Dispatch()
				}
			}
			for i := 0; i < 50; i++ {
				appendGroup() // warm up: buffers and slices reach their steady size
			}
			if got := allocs.In(t, 200, appendGroup); got != 0 {
				t.Fatalf("%d allocations in 200 groups of %d appends, want 0", got, g)
			}
		}
	})
}

// countEvents counts events without keeping them, for allocation tests.
type countEvents struct{ appends, reads int }

func (c *countEvents) AppendDone(LogKind, uint64, uint64, error) { c.appends++ }
func (c *countEvents) ReadDone(LogKind, uint64, []byte, error)   { c.reads++ }
func (c *countEvents) SealDone(uint64, Seal, error)              {}
func (c *countEvents) Done(Result)                               {}

// Reads for consumers and followers, and cursor commits of known consumers, allocate nothing.
func TestRead_AndCursorCommit_AllocateNothing(t *testing.T) {
	backends(t, func(t *testing.T, e *env) {
		e.cfg.SegmentBytes = 4 << 20 // no roll inside the measured loops: a roll allocates once
		e.appendBatchesTo(t)
		ev := &countEvents{}
		c, _, err := OpenSync(e.r, e.dir, e.cfg, ev)
		if err != nil {
			t.Fatal(err)
		}
		defer e.close(c)
		buf := make([]byte, 16<<10)
		read := func() {
			want := ev.reads + 1
			if err := c.Records().Read(1, 17, buf); err != nil {
				t.Fatal(err)
			}
			for ev.reads < want {
				if err := e.r.Wait(1); err != nil {
					t.Fatal(err)
				}
				e.r.Dispatch()
			}
		}
		read()
		if got := allocs.In(t, 100, read); got != 0 {
			t.Fatalf("%d allocations in 100 reads, want 0", got)
		}
		commit := func() {
			for i := 0; i < 8; i++ {
				if _, err := c.CommitCursor(1, 1, "consumer-a", uint64(i)); err != nil {
					t.Fatal(err)
				}
			}
			c.SyncCursors()
			c.Flush()
			for c.Cursors().DurableTail() != c.Cursors().NextOffset() {
				if err := e.r.Wait(1); err != nil {
					t.Fatal(err)
				}
				e.r.Dispatch()
			}
		}
		for i := 0; i < 20; i++ {
			commit()
		}
		if got := allocs.In(t, 50, commit); got != 0 {
			t.Fatalf("%d allocations in 50 x 8 cursor commits, want 0", got)
		}
		// A follower storing the owner's cursor events as they came.
		var batch, event []byte
		follow := func() {
			for i := 0; i < 8; i++ {
				event = appendCursorEvent(event[:0], "consumer-a", uint64(i))
				h := BatchHeader{BaseOffset: c.Cursors().NextOffset(), RecordCount: 1, Epoch: 1}
				batch = appendBatch(batch[:0], &h, event)
				if _, err := c.AppendCursorEncoded(1, batch); err != nil {
					t.Fatal(err)
				}
			}
			c.SyncCursors()
			c.Flush()
			for c.Cursors().DurableTail() != c.Cursors().NextOffset() {
				if err := e.r.Wait(1); err != nil {
					t.Fatal(err)
				}
				e.r.Dispatch()
			}
		}
		follow()
		if got := allocs.In(t, 50, follow); got != 0 {
			t.Fatalf("%d allocations in 50 x 8 follower cursor events, want 0", got)
		}
		if off, _ := c.Cursor("consumer-a"); off != 7 {
			t.Fatalf("cursor %d after follower events, want 7", off)
		}
	})
}

// appendBatchesTo fills e's copy with 40 batches and closes it.
func (e *env) appendBatchesTo(t *testing.T) {
	t.Helper()
	c := e.open()
	e.appendBatches(c, 40, 1, 1000, 1)
	e.close(c)
}

// A small ring: a group that would need more ring operations than the ring holds is refused with
// ErrBackpressure at Append, chains are never split, and everything lands once the caller drives
// the ring.
func TestAppend_SmallRingBackpressure(t *testing.T) {
	ringtest.ForEachBackend(t, func(t *testing.T, b ring.Backend) {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		e := newEnv(t, ring.Config{Backend: b, Entries: 8})
		e.cfg.SegmentBytes = 4 << 10
		c := e.open()
		defer e.close(c)
		var buf []byte
		refused := 0
		for i := 0; i < 60; {
			base := c.Records().NextOffset()
			buf = recordPayload(buf, base, 1, 1000)
			h := BatchHeader{RecordCount: 1, Epoch: 1}
			_, err := c.Append(base, &h, buf)
			if err == nil {
				i++
				continue
			}
			if !errors.Is(err, ErrBackpressure) {
				t.Fatal(err)
			}
			refused++
			c.Flush()
			if err := e.r.Wait(1); err != nil {
				t.Fatal(err)
			}
			e.r.Dispatch()
		}
		e.syncRecords(c)
		if refused == 0 {
			t.Fatalf("no append was refused with an 8-entry ring and 4 KiB segments")
		}
		if got := e.readAll(c, 1000); got != 60 {
			t.Fatalf("read %d of 60", got)
		}
	})
}

// A segment filled exactly by one group closes only when the next group's first batch rolls it;
// it still gets its digest and sidecar.
func TestAppend_SegmentFilledByEarlierGroupGetsSidecar(t *testing.T) {
	backends(t, func(t *testing.T, e *env) {
		e.cfg.SegmentBytes = 4096
		c := e.open()
		defer e.close(c)
		e.appendBatches(c, 4, 1, 1024-BatchHeaderSize, 1) // exactly 4096 bytes
		if c.Records().Segments() != 1 {
			t.Fatalf("%d segments before the roll", c.Records().Segments())
		}
		e.appendBatches(c, 1, 1, 1024-BatchHeaderSize, 1) // a group holding only the new segment
		if err := c.DrainSync(); err != nil {
			t.Fatal(err)
		}
		first := c.Records().segs[0]
		if c.Records().Segments() != 2 || !first.sidecarSaved || !first.digestKnown {
			t.Fatalf("segments %d, first sidecar %v digest %v", c.Records().Segments(), first.sidecarSaved, first.digestKnown)
		}
	})
}
