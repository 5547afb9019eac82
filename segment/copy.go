package segment

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/ringstream/ringstream/internal/assert"
	"github.com/ringstream/ringstream/ring"
)

// Events receives a copy's asynchronous results. All calls come from the shard goroutine, inside
// ring.Dispatch. An implementation may call the copy's methods (Append, Flush, Read, ...) from
// them, but not the synchronous ones (Open, Cut, Retain, Verify, snapshots, epochs, Close).
type Events interface {
	// AppendDone: the append with token is durable (err nil) or lost (err wraps ErrFailed).
	// end is the offset after its last record. Calls come in append order per log.
	AppendDone(log LogKind, token uint64, end uint64, err error)
	// ReadDone: the read with tag finished; data aliases the caller's buffer.
	ReadDone(log LogKind, tag uint64, data []byte, err error)
	// SealDone: the seal with tag is fenced and durable, and s holds its digest and tails.
	SealDone(tag uint64, s Seal, err error)
}

// quietListener is what a Log tells its Copy.
type quietListener interface {
	logQuiet(l *Log)
	sealDigestDone(l *Log, d SealDigest, err error)
}

// Seal is a sealed copy's report: the fence epoch it holds and the facts the controller compares.
type Seal struct {
	Epoch      uint64 // fence epoch, durable
	RecordTail uint64 // durable record tail the digest covers
	CursorTail uint64 // durable cursor event tail
	Digest     uint64 // seal digest of the retained record log
	Segments   int    // segments the digest covers
	BytesRead  int64  // bytes read to compute it
}

// OpenReport says what Open found.
type OpenReport struct {
	Records         RecoveryReport
	Cursors         RecoveryReport
	CursorsReplayed int    // cursor events replayed past the snapshot boundary
	CursorsClamped  int    // cursors lowered to the record log end
	Fence           uint64 // fence epoch read back
}

// Copy is one stream copy's storage: its record log, cursor event log, log epochs, fence epoch
// and cursor state, in one directory. Its methods run on the shard goroutine that owns r.
type Copy struct {
	cfg     Config
	r       ring.Ring
	sr      *syncRing
	ev      Events
	dir     string
	dirfd   int
	records *Log
	cursors *Log
	epochs  *epochLog
	fence   *fenceFile

	cursorMap    cursorMap
	snapBoundary uint64
	eventBuf     []byte
	seal         sealState
	closed       bool
}

// sealState is the seal in progress.
type sealState struct {
	active     bool
	tag        uint64
	epoch      uint64
	fenceOps   int
	fenceDone  bool
	digestDone bool
	digest     SealDigest
	err        error
}

// Tags of the copy's own ring operations.
const (
	tagFenceWrite uint64 = 1
	tagFenceSync  uint64 = 2
)

// Open opens (creating if needed) the copy stored in dir and recovers it: each log's tail is
// checked batch by batch and a torn tail cut (logged with counts), missing sidecars are rebuilt,
// the cursor snapshot is loaded and the events past its boundary replayed, and every cursor is
// clamped to the record log end. It drives r synchronously and must run on r's thread.
func Open(r ring.Ring, dir string, cfg Config, ev Events) (*Copy, OpenReport, error) {
	var rep OpenReport
	if err := cfg.Validate(); err != nil {
		return nil, rep, err
	}
	cfg = cfg.withDefaults()
	assert.True(ev != nil, "segment: open without events")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, rep, fmt.Errorf("segment: create %s: %w", dir, err)
	}
	sr := &syncRing{r: r}
	c := &Copy{cfg: cfg, r: r, sr: sr, ev: ev, dir: dir, dirfd: -1}
	err := c.open(&rep)
	if err != nil {
		c.closeFiles()
		return nil, rep, err
	}
	return c, rep, nil
}

func (c *Copy) open(rep *OpenReport) error {
	var err error
	if c.dirfd, err = c.sr.openat(unix.AT_FDCWD, c.dir, unix.O_RDONLY|unix.O_DIRECTORY, 0); err != nil {
		return fmt.Errorf("segment: open dir %s: %w", c.dir, err)
	}
	if c.records, rep.Records, err = openLog(RecordLog, c.r, c.sr, filepath.Join(c.dir, "records"), c.cfg, c.ev); err != nil {
		return err
	}
	if c.cursors, rep.Cursors, err = openLog(CursorLog, c.r, c.sr, filepath.Join(c.dir, "cursors"), c.cfg, c.ev); err != nil {
		return err
	}
	c.records.commit.auto = true
	c.cursors.cfg.PrewriteBytes = -1
	c.records.quiet, c.cursors.quiet = c, c
	if c.epochs, err = openEpochs(c.sr, c.dirfd, c.cfg.Logger); err != nil {
		return err
	}
	if c.fence, err = openFence(c.sr, c.dirfd); err != nil {
		return err
	}
	rep.Fence = c.fence.epoch
	c.records.minEpoch, c.cursors.minEpoch = c.fence.epoch, c.fence.epoch
	if c.snapBoundary, c.cursorMap, err = loadCursorSnapshot(c.sr, c.dirfd); err != nil {
		return err
	}
	if c.snapBoundary > c.cursors.durable {
		// The cursor log was cut below the snapshot (crash between the cut and the snapshot
		// rewrite): lower the boundary, keeping the state, as the cut would have.
		c.snapBoundary = c.cursors.durable
		if err := c.sr.writeFileAtomic(c.dirfd, cursorSnapName, encodeCursorSnapshot(c.snapBoundary, c.cursorMap)); err != nil {
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

// Records gives the record log: reads, tails, head, verify.
func (c *Copy) Records() *Log { return c.records }

// Cursors gives the cursor event log for reads (followers catching up), tails and head. Append
// cursor events through CommitCursor or AppendCursorEncoded, which keep the cursor map in step.
func (c *Copy) Cursors() *Log { return c.cursors }

// Tails are the durable record tail and cursor event tail.
func (c *Copy) Tails() (record, cursor uint64) { return c.records.durable, c.cursors.durable }

// FenceEpoch is the persisted fence epoch (0 if never sealed).
func (c *Copy) FenceEpoch() uint64 { return c.fence.epoch }

// Append queues a record batch (see Log.Append). A batch from an epoch below the fence is refused
// with ErrFenced.
func (c *Copy) Append(token uint64, h *BatchHeader, payload []byte) (uint64, error) {
	return c.records.Append(token, h, payload)
}

// AppendEncoded queues an already encoded record batch (see Log.AppendEncoded).
func (c *Copy) AppendEncoded(token uint64, batch []byte) (uint64, error) {
	return c.records.AppendEncoded(token, batch)
}

// Flush starts the group commits that are due (see Log.Flush). Call it once per shard loop turn.
func (c *Copy) Flush() {
	c.records.Flush()
	c.cursors.Flush()
}

// CommitCursor appends a cursor event for consumer name at record offset off, in epoch. It gets no
// fsync of its own: it becomes durable with the next cursor log commit (SyncCursors, or once
// CursorSyncBytes are queued); AppendDone(CursorLog, token, ...) says when.
func (c *Copy) CommitCursor(token uint64, epoch uint64, name string, off uint64) (uint64, error) {
	if len(name) == 0 || len(name) > CursorNameMax {
		return 0, fmt.Errorf("%w: cursor name of %d bytes", ErrInvalidBatch, len(name))
	}
	c.eventBuf = appendCursorEvent(c.eventBuf[:0], name, off)
	h := BatchHeader{RecordCount: 1, Epoch: epoch}
	at, err := c.cursors.Append(token, &h, c.eventBuf)
	if err != nil {
		return 0, err
	}
	c.cursorMap.set(name, off)
	return at, nil
}

// AppendCursorEncoded queues a cursor event batch as it came from the owner.
func (c *Copy) AppendCursorEncoded(token uint64, batch []byte) (uint64, error) {
	h, payload, _, err := DecodeBatch(batch)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrInvalidBatch, err)
	}
	name, off, err := decodeCursorEvent(payload)
	if err != nil || h.RecordCount != 1 {
		return 0, fmt.Errorf("%w: cursor event", ErrInvalidBatch)
	}
	at, err := c.cursors.AppendEncoded(token, batch)
	if err != nil {
		return 0, err
	}
	c.cursorMap.setBytes(name, off)
	return at, nil
}

// SyncCursors asks for a commit of the queued cursor events at the next Flush.
func (c *Copy) SyncCursors() { c.cursors.Sync() }

// Cursor returns consumer name's offset.
func (c *Copy) Cursor(name string) (uint64, bool) {
	off, ok := c.cursorMap[name]
	if !ok {
		return 0, false
	}
	return *off, true
}

// CursorCount is the number of consumers with a cursor.
func (c *Copy) CursorCount() int { return len(c.cursorMap) }

// CursorBoundary is the cursor snapshot's boundary.
func (c *Copy) CursorBoundary() uint64 { return c.snapBoundary }

// LastEpoch is the last epoch this copy followed (its newest log epochs entry).
func (c *Copy) LastEpoch() (EpochEntry, bool) { return c.epochs.last() }

// EpochAt is the log epochs entry of the epoch record offset off was written in.
func (c *Copy) EpochAt(off uint64) (EpochEntry, bool) { return c.epochs.at(off) }

// Epochs returns a copy of the log epochs.
func (c *Copy) Epochs() []EpochEntry { return append([]EpochEntry(nil), c.epochs.entries...) }

// AppendEpoch records a role change (synchronous, fdatasynced). The epoch must not be below the
// fence (ErrFenced) and must follow the last entry (ErrEpochOrder).
func (c *Copy) AppendEpoch(e EpochEntry) error {
	if e.Epoch < c.fence.epoch {
		return fmt.Errorf("%w: epoch %d, fence %d", ErrFenced, e.Epoch, c.fence.epoch)
	}
	return c.epochs.append(e)
}

// Seal fences the copy at epoch and reports its tails and digest: the fence is written to the
// fence file and fdatasynced through the ring (appends from lower epochs are refused from this
// call on), the appends already queued are committed, and the record log's seal digest is
// computed (reading at most the active segment). Events.SealDone receives tag. An epoch equal to
// the fence takes the seal over again; a lower one is ErrFenced.
func (c *Copy) Seal(tag uint64, epoch uint64) error {
	switch {
	case c.closed:
		return ErrClosed
	case c.seal.active:
		return ErrBusy
	case epoch < c.fence.epoch:
		return fmt.Errorf("%w: seal at %d, fence %d", ErrFenced, epoch, c.fence.epoch)
	case c.r.InFlight()+2 > c.records.opsMax:
		return ErrBackpressure
	}
	pos := c.fence.prepare(epoch)
	c.records.minEpoch, c.cursors.minEpoch = epoch, epoch
	c.seal = sealState{active: true, tag: tag, epoch: epoch}
	if err := c.r.Write(c, tagFenceWrite, c.fence.fd, c.fence.slot[:], pos, ring.Link); err != nil {
		c.seal = sealState{}
		return fmt.Errorf("segment: queue fence write: %w", err)
	}
	c.seal.fenceOps = 2
	if err := c.r.Fsync(c, tagFenceSync, c.fence.fd, true, 0); err != nil {
		// The write is queued and will complete; the seal goes on and reports this error.
		c.seal.fenceOps = 1
		c.seal.err = fmt.Errorf("segment: queue fence fsync: %w", err)
	}
	c.records.Sync()
	c.cursors.Sync()
	c.Flush()
	c.records.requestSealDigest()
	return nil
}

// Complete handles the fence write of a seal. It implements ring.Handler.
func (c *Copy) Complete(comp ring.Completion) {
	assert.True(c.seal.fenceOps > 0, "segment: fence completion without seal")
	c.seal.fenceOps--
	err := comp.Err()
	if err == nil && comp.Tag == tagFenceWrite && int(comp.Res) != fenceSlotSize {
		err = fmt.Errorf("segment: short fence write of %d bytes", comp.Res)
	}
	if err != nil && c.seal.err == nil {
		c.seal.err = fmt.Errorf("segment: seal fence: %w", err)
	}
	if c.seal.fenceOps == 0 {
		c.seal.fenceDone = true
		c.maybeSealDone()
	}
}

func (c *Copy) logQuiet(*Log) { c.maybeSealDone() }

func (c *Copy) sealDigestDone(_ *Log, d SealDigest, err error) {
	if !c.seal.active {
		return
	}
	c.seal.digestDone = true
	c.seal.digest = d
	if err != nil && c.seal.err == nil {
		c.seal.err = err
	}
	c.maybeSealDone()
}

// maybeSealDone reports the seal once the fence is durable, the digest is computed and the cursor
// log's queued events are committed.
func (c *Copy) maybeSealDone() {
	s := &c.seal
	if !s.active || !s.fenceDone || !s.digestDone {
		return
	}
	if c.cursors.failed == nil && (c.cursors.commit.busy() || c.cursors.commit.wantSync) {
		return
	}
	res := Seal{Epoch: s.epoch, RecordTail: s.digest.Tail, CursorTail: c.cursors.durable, Digest: s.digest.Digest,
		Segments: s.digest.Segments, BytesRead: s.digest.BytesRead}
	err := s.err
	if err == nil {
		err = c.cursors.failed
	}
	tag := s.tag
	*s = sealState{}
	c.ev.SealDone(tag, res, err)
}

// Cut brings both logs down to recordOff and cursorOff (the failover spec's cut of a longer
// tail): whole segments past them are removed, the segments holding them shortened, the log
// epochs past them dropped, a cursor snapshot covering cursor events past the cut gets its
// boundary lowered so they replay, and cursors above the new record tail are clamped. Offsets at
// or past a tail leave that log alone, so repeating a cut is a no-op. Below the retained head is
// ErrBelowHead. Synchronous, needs quiet logs (ErrBusy).
func (c *Copy) Cut(recordOff, cursorOff uint64) error {
	switch {
	case c.closed:
		return ErrClosed
	case c.seal.active:
		return ErrBusy
	case recordOff < c.records.Head():
		return fmt.Errorf("%w: record cut at %d, head %d", ErrBelowHead, recordOff, c.records.Head())
	case cursorOff < c.cursors.Head():
		return fmt.Errorf("%w: cursor cut at %d, head %d", ErrBelowHead, cursorOff, c.cursors.Head())
	}
	if err := c.Drain(); err != nil {
		return err
	}
	if err := c.records.cut(recordOff); err != nil {
		return fmt.Errorf("segment: cut record log: %w", err)
	}
	if err := c.cursors.cut(cursorOff); err != nil {
		return fmt.Errorf("segment: cut cursor log: %w", err)
	}
	if err := c.epochs.cut(c.records.durable, c.cursors.durable); err != nil {
		return err
	}
	if c.snapBoundary > c.cursors.durable {
		c.snapBoundary = c.cursors.durable
		if err := c.sr.writeFileAtomic(c.dirfd, cursorSnapName, encodeCursorSnapshot(c.snapBoundary, c.cursorMap)); err != nil {
			return err
		}
	}
	c.clampCursors()
	return nil
}

// WriteCursorSnapshot commits the queued cursor events, then writes {boundary, map} atomically
// (write, fsync, rename, fsync dir) with the boundary at the cursor log's durable tail.
// Synchronous.
func (c *Copy) WriteCursorSnapshot() error {
	if c.closed {
		return ErrClosed
	}
	if err := c.drain(c.cursors); err != nil {
		return err
	}
	b := encodeCursorSnapshot(c.cursors.durable, c.cursorMap)
	if err := c.sr.writeFileAtomic(c.dirfd, cursorSnapName, b); err != nil {
		return err
	}
	c.snapBoundary = c.cursors.durable
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
// Synchronous; ErrBusy while reads or digests are in flight.
func (c *Copy) Retain(nowMs, maxBytes, maxAgeMs int64) (RetainReport, error) {
	var rep RetainReport
	if c.closed {
		return rep, ErrClosed
	}
	if maxBytes < 0 || maxAgeMs < 0 {
		return rep, fmt.Errorf("%w: negative retention limit", ErrConfig)
	}
	if err := c.Drain(); err != nil {
		return rep, err
	}
	var err error
	if rep.RecordSegments, err = c.records.retain(nowMs, maxBytes, maxAgeMs, noKeep); err != nil {
		return rep, err
	}
	rep.RecordHead = c.records.Head()
	if rep.CursorSegments, err = c.cursors.retain(nowMs, -1, 0, c.snapBoundary); err != nil {
		return rep, err
	}
	return rep, nil
}

// Verify runs verify mode on both logs (see Log.Verify).
func (c *Copy) Verify() (records, cursors VerifyReport, err error) {
	if err = c.Drain(); err != nil {
		return records, cursors, err
	}
	if records, err = c.records.Verify(); err != nil {
		return records, cursors, err
	}
	cursors, err = c.cursors.Verify()
	return records, cursors, err
}

// Drain commits everything queued in both logs and drives the ring until no group commit, digest,
// read or seal of the copy is in flight. Synchronous. Cut, Retain, Verify and Close drain first.
func (c *Copy) Drain() error {
	if c.closed {
		return ErrClosed
	}
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
		if c.r.InFlight() == 0 {
			return fmt.Errorf("segment: copy busy with nothing in flight: %w", ErrBusy)
		}
		if err := c.r.Wait(1); err != nil {
			return err
		}
		c.r.Dispatch()
	}
}

// drain commits what l has queued and waits for its group commit, driving the ring.
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
		if c.r.InFlight() == 0 {
			return fmt.Errorf("segment: %s log cannot start its commit: %w", l.kind, ErrBusy)
		}
		if err := c.r.Wait(1); err != nil {
			return err
		}
		c.r.Dispatch()
	}
}

// Close commits what is queued, waits for every operation of the copy, and closes its files.
// Synchronous.
func (c *Copy) Close() error {
	if c.closed {
		return nil
	}
	err := c.Drain()
	if err == nil {
		err = c.records.trimPrewritten()
	}
	c.closeFiles()
	c.closed = true
	return err
}

func (c *Copy) closeFiles() {
	for _, l := range []*Log{c.records, c.cursors} {
		if l != nil {
			l.closeFiles()
			l.shut = true
		}
	}
	if c.epochs != nil {
		_ = c.sr.close(c.epochs.fd)
	}
	if c.fence != nil {
		_ = c.sr.close(c.fence.fd)
	}
	if c.dirfd >= 0 {
		_ = c.sr.close(c.dirfd)
		c.dirfd = -1
	}
}
