package segment

import (
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/ringstream/ringstream/internal/assert"
	"github.com/ringstream/ringstream/ring"
)

// The rare operations of a copy. Each has an asynchronous form, run as a job of the shard's Jobs
// and reported by Events.Done, and a ...Sync form that drives the ring itself, for tools and
// tests only. A copy runs one rare operation at a time (ErrBusy otherwise). Open, Cut, Close and
// Delete hold the copy while they run: appends, reads and seals get ErrBusy. Retain,
// AppendEpoch and WriteCursorSnapshot let appends and reads go on.

// Open opens (creating if needed) the copy stored in dir on the shard whose ring is r and whose
// jobs runner is js, and recovers it as OpenSync does. It returns the copy at once; the copy is
// usable once Events.Done reports OpOpen with tag (its methods return ErrBusy before, and
// Records and Cursors are nil). If the open fails, Done carries the error and the copy is closed.
// dir's parent directory must exist.
func Open(js *Jobs, r ring.Ring, dir string, cfg Config, ev Events, tag uint64) (*Copy, error) {
	assert.True(js != nil, "segment: open without jobs")
	c, err := newCopy(r, dir, cfg, ev)
	if err != nil {
		return nil, err
	}
	c.js = js
	js.addCopy(c)
	c.startJob(OpOpen, tag, true, func(j *job) error { return c.openBody(&j.res.Open) })
	return c, nil
}

// OpenSync is Open driving the ring itself: each log's tail is checked batch by batch and a
// torn tail cut (logged with counts), missing sidecars are rebuilt, the cursor snapshot is loaded
// and the events past its boundary replayed, and every cursor is clamped to the record log end.
// The copy it returns has no Jobs: only the ...Sync rare operations work on it, and its caller
// calls Flush every loop turn. For tools and tests; it must run on r's thread.
func OpenSync(r ring.Ring, dir string, cfg Config, ev Events) (*Copy, OpenReport, error) {
	var rep OpenReport
	c, err := newCopy(r, dir, cfg, ev)
	if err != nil {
		return nil, rep, err
	}
	if err := c.openBody(&rep); err != nil {
		return nil, rep, err
	}
	c.ready = true
	return c, rep, nil
}

func newCopy(r ring.Ring, dir string, cfg Config, ev Events) (*Copy, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	assert.True(ev != nil, "segment: open without events")
	return &Copy{cfg: cfg, r: r, sr: &syncRing{r: r}, ev: ev, dir: filepath.Clean(dir)}, nil
}

// startJob starts rare operation op on the copy's Jobs; hold says it holds the copy.
func (c *Copy) startJob(op Op, tag uint64, hold bool, body func(j *job) error) error {
	assert.True(c.js != nil, "segment: asynchronous operation on a copy opened with OpenSync")
	switch {
	case c.job != nil:
		return ErrBusy
	case c.closed && op != OpDelete:
		return ErrClosed
	}
	if c.closed {
		c.js.addCopy(c) // a closed copy being deleted: Abandon must find its job
	}
	c.job = c.js.start(c, op, tag, body)
	c.sr.job = c.job
	c.hold(hold)
	return nil
}

func (c *Copy) hold(on bool) {
	c.held = on
	for _, l := range []*Log{c.records, c.cursors} {
		if l != nil {
			l.held = on
		}
	}
}

// jobEnded is called by Poll when the copy's job has returned.
func (c *Copy) jobEnded(j *job) {
	assert.True(c.job == j, "segment: job ended on another copy")
	c.job, c.sr.job = nil, nil
	switch j.res.Op {
	case OpOpen:
		if j.res.Err != nil {
			c.closed = true
		} else {
			c.ready = true
		}
	case OpClose, OpDelete:
		c.closed = true
	}
	c.hold(false)
	if c.closed {
		c.js.removeCopy(c)
	} else {
		c.wake() // what queued up while the operation held the copy
	}
	c.ev.Done(j.res)
}

// syncable refuses a ...Sync call while an asynchronous operation runs.
func (c *Copy) syncable() error {
	switch {
	case c.closed:
		return ErrClosed
	case c.job != nil:
		return ErrBusy
	}
	return nil
}

// openBody creates what is missing and recovers the copy; on failure it closes what it opened.
func (c *Copy) openBody(rep *OpenReport) error {
	err := c.open(rep)
	if err != nil {
		c.closeFiles()
	}
	return err
}

func (c *Copy) open(rep *OpenReport) error {
	created, err := c.sr.makeDir(unix.AT_FDCWD, c.dir)
	if err != nil {
		return err
	}
	// What open creates in the copy directory is made durable with one fsync of it, and the copy
	// directory itself with one of its parent, before the copy is used.
	dirty := false
	if c.records, rep.Records, err = openLog(RecordLog, c.r, c.sr, c.dir, "records", c.cfg, c.ev, &dirty); err != nil {
		return err
	}
	if c.cursors, rep.Cursors, err = openLog(CursorLog, c.r, c.sr, c.dir, "cursors", c.cfg, c.ev, &dirty); err != nil {
		return err
	}
	c.records.commit.auto = true
	c.cursors.cfg.PrewriteBytes = -1
	c.records.quiet, c.cursors.quiet = c, c
	c.records.activity, c.cursors.activity = &c.activity, &c.activity
	c.hold(c.held)
	if c.epochs, err = openEpochs(c.sr, c.dir, c.cfg.Logger, &dirty); err != nil {
		return err
	}
	if c.fence, err = openFence(c.sr, c.dir, &dirty); err != nil {
		return err
	}
	if dirty {
		if err := c.sr.fsyncDir(c.dir); err != nil {
			return err
		}
	}
	if created {
		if err := c.sr.fsyncDirOf(c.dir); err != nil {
			return err
		}
	}
	rep.Fence = c.fence.epoch
	c.setFenceFloor()
	if c.snapBoundary, c.cursorMap, err = loadCursorSnapshot(c.sr, c.dir); err != nil {
		return err
	}
	if c.snapBoundary > c.cursors.durable {
		// The cursor log was cut below the snapshot (crash between the cut and the snapshot
		// rewrite): lower the boundary, keeping the state, as the cut would have.
		c.snapBoundary = c.cursors.durable
		if err := c.sr.writeFileAtomic(c.dir, cursorSnapName, encodeCursorSnapshot(c.snapBoundary, c.cursorMap)); err != nil {
			return err
		}
	}
	if rep.CursorsReplayed, err = c.cursors.replayCursors(c.snapBoundary, c.cursorMap); err != nil {
		return err
	}
	rep.CursorsClamped = c.clampCursors()
	if rep.CursorsClamped > 0 {
		c.cfg.Logger.Warn("segment: cursors clamped to the record log end", "dir", c.dir,
			"cursors", rep.CursorsClamped, "record_tail", c.records.durable)
	}
	return nil
}

// clampCursors lowers every cursor above the record log's durable tail to it.
func (c *Copy) clampCursors() int {
	n := 0
	for _, off := range c.cursorMap {
		if *off > c.records.durable {
			*off = c.records.durable
			n++
		}
	}
	return n
}

// AppendEpoch records a role change, written and fdatasynced through the ring; Done reports
// OpAppendEpoch with tag. The epoch must not be below the fence (ErrFenced) and must follow the
// last entry (ErrEpochOrder); both are checked now and again when the write starts.
func (c *Copy) AppendEpoch(tag uint64, e EpochEntry) error {
	if err := c.epochAllowed(e); err != nil {
		return err
	}
	return c.startJob(OpAppendEpoch, tag, false, func(*job) error { return c.appendEpoch(e) })
}

// AppendEpochSync is AppendEpoch driving the ring itself (tools and tests).
func (c *Copy) AppendEpochSync(e EpochEntry) error {
	if err := c.syncable(); err != nil {
		return err
	}
	return c.appendEpoch(e)
}

func (c *Copy) epochAllowed(e EpochEntry) error {
	if err := c.usable(); err != nil {
		return err
	}
	if e.Epoch < c.fence.epoch {
		return fmt.Errorf("%w: epoch %d, fence %d", ErrFenced, e.Epoch, c.fence.epoch)
	}
	return c.epochs.follows(e)
}

func (c *Copy) appendEpoch(e EpochEntry) error {
	if e.Epoch < c.fence.epoch {
		return fmt.Errorf("%w: epoch %d, fence %d", ErrFenced, e.Epoch, c.fence.epoch)
	}
	err := c.epochs.append(e)
	c.setFenceFloor()
	return err
}

// setFenceFloor sets the lowest batch epoch the logs take: the fence's, until a role change at or
// past the fence is recorded in the log epochs. From then on the copy follows that epoch's owner,
// which sends records of older epochs too (a follower catching up after a seal); the copy's role,
// not the fence, keeps an old owner from appending.
func (c *Copy) setFenceFloor() {
	floor := c.fence.epoch
	if last, ok := c.epochs.last(); ok && last.Epoch >= floor {
		floor = 0
	}
	c.records.minEpoch, c.cursors.minEpoch = floor, floor
}

// Cut brings both logs down to recordOff and cursorOff (the failover spec's cut of a longer
// tail): whole segments past them are removed, the segments holding them shortened, the log
// epochs past them dropped, a cursor snapshot covering cursor events past the cut gets its
// boundary lowered so they replay, and cursors above the new record tail are clamped. Offsets at
// or past a tail leave that log alone, so repeating a cut is a no-op. Below the retained head is
// ErrBelowHead, now or in Done. The cut first commits what is queued and waits for the copy's
// reads, digests and seal to end; Done reports OpCut with tag.
func (c *Copy) Cut(tag uint64, recordOff, cursorOff uint64) error {
	if err := c.cutAllowed(recordOff, cursorOff); err != nil {
		return err
	}
	return c.startJob(OpCut, tag, true, func(*job) error { return c.cut(recordOff, cursorOff) })
}

// CutSync is Cut driving the ring itself (tools and tests).
func (c *Copy) CutSync(recordOff, cursorOff uint64) error {
	if err := c.syncable(); err != nil {
		return err
	}
	return c.cut(recordOff, cursorOff)
}

func (c *Copy) cutAllowed(recordOff, cursorOff uint64) error {
	if err := c.usable(); err != nil {
		return err
	}
	return c.cutChecks(recordOff, cursorOff)
}

func (c *Copy) cutChecks(recordOff, cursorOff uint64) error {
	switch {
	case c.seal.active:
		return ErrBusy
	case recordOff < c.records.Head():
		return fmt.Errorf("%w: record cut at %d, head %d", ErrBelowHead, recordOff, c.records.Head())
	case cursorOff < c.cursors.Head():
		return fmt.Errorf("%w: cursor cut at %d, head %d", ErrBelowHead, cursorOff, c.cursors.Head())
	}
	return nil
}

func (c *Copy) cut(recordOff, cursorOff uint64) error {
	if err := c.cutChecks(recordOff, cursorOff); err != nil {
		return err
	}
	if err := c.drainAll(); err != nil {
		return err
	}
	if err := c.records.cut(recordOff); err != nil {
		return fmt.Errorf("segment: cut record log: %w", err)
	}
	cursorsCut := cursorOff < c.cursors.durable
	if err := c.cursors.cut(cursorOff); err != nil {
		return fmt.Errorf("segment: cut cursor log: %w", err)
	}
	if err := c.epochs.cut(c.records.durable, c.cursors.durable); err != nil {
		return err
	}
	c.setFenceFloor()
	if c.snapBoundary > c.cursors.durable {
		c.snapBoundary = c.cursors.durable
		if err := c.sr.writeFileAtomic(c.dir, cursorSnapName, encodeCursorSnapshot(c.snapBoundary, c.cursorMap)); err != nil {
			return err
		}
	}
	if cursorsCut {
		// The cursor map is what an open would find: the snapshot, then the events left past its
		// boundary. The events cut are forgotten (a snapshot that covered them keeps its state).
		var err error
		if c.snapBoundary, c.cursorMap, err = loadCursorSnapshot(c.sr, c.dir); err != nil {
			return err
		}
		if _, err := c.cursors.replayCursors(c.snapBoundary, c.cursorMap); err != nil {
			return err
		}
	}
	c.clampCursors()
	return nil
}

// WriteCursorSnapshot commits the queued cursor events, then writes {boundary, map} atomically
// (write, fsync, rename, fsync dir) with the boundary at the cursor log's durable tail. Done
// reports OpCursorSnapshot with tag.
func (c *Copy) WriteCursorSnapshot(tag uint64) error {
	if err := c.usable(); err != nil {
		return err
	}
	return c.startJob(OpCursorSnapshot, tag, false, func(*job) error { return c.writeCursorSnapshot() })
}

// WriteCursorSnapshotSync is WriteCursorSnapshot driving the ring itself (tools and tests).
func (c *Copy) WriteCursorSnapshotSync() error {
	if err := c.syncable(); err != nil {
		return err
	}
	return c.writeCursorSnapshot()
}

func (c *Copy) writeCursorSnapshot() error {
	if err := c.drain(c.cursors); err != nil {
		return err
	}
	// No suspension between the drain and the encoding: the map holds exactly the events up to
	// the durable tail, the boundary.
	boundary := c.cursors.durable
	b := encodeCursorSnapshot(boundary, c.cursorMap)
	if err := c.sr.writeFileAtomic(c.dir, cursorSnapName, b); err != nil {
		return err
	}
	c.snapBoundary = max(c.snapBoundary, boundary)
	return nil
}

// RetainReport says what retention removed.
type RetainReport struct {
	RecordSegments int
	CursorSegments int
	RecordHead     uint64
}

// Retain removes closed record segments from the front while the record log is over maxBytes or
// their newest batch is older than maxAgeMs before nowMs (unix ms, from the caller; 0 disables a
// limit), moving the retained head; and cursor segments wholly below the cursor snapshot boundary.
// Only durable segments that no read, digest or seal is using are removed. The head moves when
// the job starts; each file removal is made durable (directory fsync) before the next. Done
// reports OpRetain with tag and the RetainReport.
func (c *Copy) Retain(tag uint64, nowMs, maxBytes, maxAgeMs int64) error {
	return c.RetainBelow(tag, nowMs, maxBytes, maxAgeMs, noKeep)
}

// RetainBelow is Retain that removes no record segment ending past keepFrom (a stream copy's
// RetainLimit: records a later seal may still need).
func (c *Copy) RetainBelow(tag uint64, nowMs, maxBytes, maxAgeMs int64, keepFrom uint64) error {
	if err := c.usable(); err != nil {
		return err
	}
	if maxBytes < 0 || maxAgeMs < 0 {
		return fmt.Errorf("%w: negative retention limit", ErrConfig)
	}
	return c.startJob(OpRetain, tag, false, func(j *job) error {
		var err error
		j.res.Retain, err = c.retain(nowMs, maxBytes, maxAgeMs, keepFrom)
		return err
	})
}

// RetainSync is Retain driving the ring itself, after committing what is queued (tools, tests).
func (c *Copy) RetainSync(nowMs, maxBytes, maxAgeMs int64) (RetainReport, error) {
	if err := c.syncable(); err != nil {
		return RetainReport{}, err
	}
	if maxBytes < 0 || maxAgeMs < 0 {
		return RetainReport{}, fmt.Errorf("%w: negative retention limit", ErrConfig)
	}
	if err := c.drainAll(); err != nil {
		return RetainReport{}, err
	}
	return c.retain(nowMs, maxBytes, maxAgeMs, noKeep)
}

func (c *Copy) retain(nowMs, maxBytes, maxAgeMs int64, keepFrom uint64) (RetainReport, error) {
	var rep RetainReport
	if c.seal.active {
		return rep, ErrBusy // the seal digest walks the segment list
	}
	recs := c.records.retainPick(nowMs, maxBytes, maxAgeMs, keepFrom)
	curs := c.cursors.retainPick(nowMs, -1, 0, c.snapBoundary)
	rep.RecordHead = c.records.Head()
	var err error
	if rep.RecordSegments, err = c.records.removeDetached(recs); err != nil {
		return rep, err
	}
	rep.CursorSegments, err = c.cursors.removeDetached(curs)
	return rep, err
}

// VerifySync runs verify mode on both logs (see Log.VerifySync), driving the ring itself.
func (c *Copy) VerifySync() (records, cursors VerifyReport, err error) {
	if err = c.DrainSync(); err != nil {
		return records, cursors, err
	}
	if records, err = c.records.VerifySync(); err != nil {
		return records, cursors, err
	}
	cursors, err = c.cursors.VerifySync()
	return records, cursors, err
}

// DrainSync commits everything queued in both logs and drives the ring until no group commit,
// digest, read or seal of the copy is in flight (tools and tests).
func (c *Copy) DrainSync() error {
	if err := c.syncable(); err != nil {
		return err
	}
	return c.drainAll()
}

// drainAll commits everything queued in both logs and waits until no group commit, digest, read
// or seal of the copy is in flight.
func (c *Copy) drainAll() error {
	for {
		if err := c.drain(c.records); err != nil {
			return err
		}
		if err := c.drain(c.cursors); err != nil {
			return err
		}
		if !c.seal.active && !c.records.Busy() && !c.cursors.Busy() {
			return nil
		}
		if err := c.sr.turn(); err != nil {
			return fmt.Errorf("segment: copy busy: %w", err)
		}
	}
}

// drain commits what l has queued and waits for its group commit.
func (c *Copy) drain(l *Log) error {
	l.Sync()
	for {
		l.Flush()
		if l.failed != nil {
			return l.failed
		}
		if !l.commit.busy() && len(l.commit.pend.acks) == 0 {
			return nil
		}
		if err := c.sr.turn(); err != nil {
			return fmt.Errorf("segment: %s log cannot finish its commit: %w", l.kind, err)
		}
	}
}

// Close commits what is queued, waits for every operation of the copy, and closes its files
// through the ring. Done reports OpClose with tag; the copy is closed from then on, even if the
// commit failed (the error says so).
func (c *Copy) Close(tag uint64) error {
	if err := c.usable(); err != nil {
		return err
	}
	return c.startJob(OpClose, tag, true, func(*job) error { return c.close() })
}

// CloseSync is Close driving the ring itself (tools and tests). Closing a closed copy is a no-op.
func (c *Copy) CloseSync() error {
	if c.closed {
		return nil
	}
	if err := c.syncable(); err != nil {
		return err
	}
	err := c.close()
	c.closed = true
	if c.js != nil {
		c.js.removeCopy(c)
	}
	return err
}

func (c *Copy) close() error {
	err := c.drainAll()
	if err == nil {
		err = c.records.trimPrewritten()
	}
	// A failed log ends drainAll at once, with reads, digests or zero writes still in flight on
	// descriptors closeFiles closes: no operation may outlive its descriptor (a reused number would
	// send it to another file).
	if qerr := c.quiesce(); err == nil {
		err = qerr
	}
	c.closeFiles()
	return err
}

// quiesce waits until no ring operation of the copy is in flight: reads (those parked on a full ring
// are queued first), digest steps, zero writes, closes, reopens and the seal's fence steps.
func (c *Copy) quiesce() error {
	for {
		idle := c.seal.fenceOps == 0
		for _, l := range []*Log{c.records, c.cursors} {
			if l == nil {
				continue
			}
			l.readKick()
			l.digestKick()
			if l.opsInFlight() {
				idle = false
			}
		}
		if idle {
			return nil
		}
		if err := c.sr.turn(); err != nil {
			return fmt.Errorf("segment: close waits for its operations: %w", err)
		}
	}
}

func (c *Copy) closeFiles() {
	for _, l := range []*Log{c.records, c.cursors} {
		if l != nil {
			l.closeFiles()
			l.shut = true
		}
	}
	if c.seal.active && c.seal.fenceFd >= 0 {
		_ = c.sr.close(c.seal.fenceFd)
		c.seal.fenceFd = -1
	}
}
