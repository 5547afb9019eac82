package segment

import (
	"fmt"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/ringstream/ringstream/internal/assert"
	"github.com/ringstream/ringstream/ring"
)

// Events receives a copy's asynchronous results, on the shard goroutine. AppendDone, ReadDone and
// SealDone come from inside ring.Dispatch (or from a Flush); Done comes from Jobs.Poll. An
// implementation may call any of the copy's methods from them, the asynchronous rare operations
// included, but never a ...Sync method, which drives the ring itself.
type Events interface {
	// AppendDone: the append with token is durable (err nil) or lost (err wraps ErrFailed).
	// end is the offset after its last record. Calls come in append order per log.
	AppendDone(log LogKind, token uint64, end uint64, err error)
	// ReadDone: the read with tag finished; data aliases the caller's buffer.
	ReadDone(log LogKind, tag uint64, data []byte, err error)
	// SealDone: the seal with tag is fenced and durable, and s holds its digest and tails.
	SealDone(tag uint64, s Seal, err error)
	// Done: the rare operation r.Op started with tag r.Tag ended (see Jobs). It is called from
	// Jobs.Poll, never from inside ring.Dispatch.
	Done(r Result)
}

// quietListener is what a Log tells its Copy.
type quietListener interface {
	wake() // the log has work a Flush starts or resumes
	logQuiet(l *Log)
	logParked(parked bool) // the log closed its descriptors (Park) or reopened them
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
	js      *Jobs // nil for a copy opened with OpenSync: only the ...Sync rare operations work
	job     *job  // the rare operation running, if any
	ev      Events
	dir     string
	records *Log
	cursors *Log
	epochs  *epochLog
	fence   *fenceFile

	cursorMap    cursorMap
	snapBoundary uint64
	eventBuf     []byte
	seal         sealState
	activity     uint64 // appends, reads and seals (Activity), counted by the logs too
	parkedLogs   int    // logs parked (Parked: both)
	awake        bool   // on its Jobs' list of copies Poll flushes
	ready        bool   // open finished
	held         bool   // an exclusive rare operation runs: appends, reads and seals get ErrBusy
	closed       bool
}

// sealState is the seal in progress.
type sealState struct {
	active      bool
	tag         uint64
	epoch       uint64
	fenceFd     int   // the fence file while the seal writes it, else -1
	fenceOps    int   // fence operations in flight
	fenceNext   uint8 // the fence step parked on a full ring (Flush retries it), or fenceStepNone
	fenceWrites int   // fence write and fdatasync completions seen
	fenceDone   bool
	digestDone  bool
	digest      SealDigest
	err         error
}

// fenceWritten says whether the fence write and its fdatasync both completed.
func (s *sealState) fenceWritten() bool { return s.fenceWrites == 2 }

// Tags of the copy's own ring operations: a seal's fence file is opened, written and
// fdatasynced (linked), and closed, one step after the other.
const (
	tagFenceOpen  uint64 = 1
	tagFenceWrite uint64 = 2
	tagFenceSync  uint64 = 3
	tagFenceClose uint64 = 4
)

// Steps of a seal's fence write.
const (
	fenceStepNone uint8 = iota
	fenceStepOpen
	fenceStepWrite
	fenceStepClose
)

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
	if err := c.usable(); err != nil {
		return 0, err
	}
	return c.records.Append(token, h, payload)
}

// AppendEncoded queues an already encoded record batch (see Log.AppendEncoded).
func (c *Copy) AppendEncoded(token uint64, batch []byte) (uint64, error) {
	if err := c.usable(); err != nil {
		return 0, err
	}
	return c.records.AppendEncoded(token, batch)
}

// usable refuses appends and seals on a copy that is not open, or held by a rare operation.
func (c *Copy) usable() error {
	switch {
	case c.closed:
		return ErrClosed
	case !c.ready || c.held:
		return ErrBusy
	}
	return nil
}

// Flush starts the group commits that are due (see Log.Flush). Jobs.Poll calls it every turn for
// the copies opened on it; a copy opened with OpenSync is flushed by its caller.
func (c *Copy) Flush() {
	if !c.ready || c.closed {
		return
	}
	if step := c.seal.fenceNext; step != fenceStepNone {
		c.seal.fenceNext = fenceStepNone
		c.fenceStep(step)
	}
	c.records.Flush()
	c.cursors.Flush()
}

// CommitCursor appends a cursor event for consumer name at record offset off, in epoch. It gets no
// fsync of its own: it becomes durable with the next cursor log commit (SyncCursors, or once
// CursorSyncBytes are queued); AppendDone(CursorLog, token, ...) says when.
func (c *Copy) CommitCursor(token uint64, epoch uint64, name string, off uint64) (uint64, error) {
	if err := c.usable(); err != nil {
		return 0, err
	}
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

// DeleteCursor appends a tombstone for consumer name, in epoch: from it on the consumer has no cursor
// (Cursor reports none, a snapshot leaves it out, a replay forgets it again) until a later commit
// makes a new one. Like a commit it waits for the next cursor log commit; AppendDone(CursorLog,
// token, ...) says when it is durable. Deleting a name without a cursor still appends the tombstone.
func (c *Copy) DeleteCursor(token uint64, epoch uint64, name string) (uint64, error) {
	if err := c.usable(); err != nil {
		return 0, err
	}
	if len(name) == 0 || len(name) > CursorNameMax {
		return 0, fmt.Errorf("%w: cursor name of %d bytes", ErrInvalidBatch, len(name))
	}
	c.eventBuf = appendCursorDelete(c.eventBuf[:0], name)
	h := BatchHeader{RecordCount: 1, Epoch: epoch}
	at, err := c.cursors.Append(token, &h, c.eventBuf)
	if err != nil {
		return 0, err
	}
	c.cursorMap.delete(name)
	return at, nil
}

// AppendCursorEncoded queues a cursor event batch (a commit or a tombstone) as it came from the owner.
func (c *Copy) AppendCursorEncoded(token uint64, batch []byte) (uint64, error) {
	if err := c.usable(); err != nil {
		return 0, err
	}
	h, payload, _, err := DecodeBatch(batch)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrInvalidBatch, err)
	}
	name, off, deleted, err := decodeCursorEvent(payload)
	if err != nil || h.RecordCount != 1 {
		return 0, fmt.Errorf("%w: cursor event", ErrInvalidBatch)
	}
	at, err := c.cursors.AppendEncoded(token, batch)
	if err != nil {
		return 0, err
	}
	c.cursorMap.apply(name, off, deleted)
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

// EachCursor calls f with every consumer's cursor, in name order (the host feeds them to its copy on
// open).
func (c *Copy) EachCursor(f func(name string, off uint64)) {
	names := make([]string, 0, len(c.cursorMap))
	for name := range c.cursorMap {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		f(name, *c.cursorMap[name])
	}
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

// Seal fences the copy at epoch and reports its tails and digest: the fence is written to the
// fence file and fdatasynced through the ring (appends from lower epochs are refused from this
// call on), the appends already queued are committed, and the record log's seal digest is
// computed (reading at most the active segment). Events.SealDone receives tag. An epoch equal to
// the fence takes the seal over again; a lower one is ErrFenced. The fence file is opened for the
// seal and closed after it (an idle copy keeps only its active segments and log directories open).
func (c *Copy) Seal(tag uint64, epoch uint64) error {
	if err := c.usable(); err != nil {
		return err
	}
	switch {
	case c.seal.active:
		return ErrBusy
	case epoch < c.fence.epoch:
		return fmt.Errorf("%w: seal at %d, fence %d", ErrFenced, epoch, c.fence.epoch)
	case !c.records.room(2):
		return ErrBackpressure
	}
	c.activity++
	c.fence.prepare(epoch)
	c.records.minEpoch, c.cursors.minEpoch = epoch, epoch
	c.seal = sealState{active: true, tag: tag, epoch: epoch, fenceFd: -1}
	c.wake()
	c.fenceStep(fenceStepOpen)
	c.records.Sync()
	c.cursors.Sync()
	c.Flush()
	c.records.requestSealDigest()
	return nil
}

// fenceStep queues the operations of one step of the seal's fence write, or parks the step for
// the next Flush when the ring has no room (never an I/O error).
func (c *Copy) fenceStep(step uint8) {
	s := &c.seal
	need := 1
	if step == fenceStepWrite {
		need = 2
	}
	if !c.records.room(need) {
		s.fenceNext = step
		return
	}
	var err error
	switch step {
	case fenceStepOpen:
		if err = c.r.Openat(c, tagFenceOpen, unix.AT_FDCWD, c.fence.path, unix.O_WRONLY, 0, 0); err == nil {
			s.fenceOps = 1
		}
	case fenceStepWrite:
		pos := c.fence.slotPos()
		if err = c.r.Write(c, tagFenceWrite, s.fenceFd, c.fence.slot[:], pos, ring.Link); err != nil {
			break
		}
		s.fenceOps = 2
		if err = c.r.Fsync(c, tagFenceSync, s.fenceFd, true, 0); err != nil {
			s.fenceOps = 1 // the write is queued and will complete; the seal reports this error
		}
	case fenceStepClose:
		if err = c.r.CloseFile(c, tagFenceClose, s.fenceFd, 0); err == nil {
			s.fenceOps = 1
		} else {
			_ = unix.Close(s.fenceFd) // closing is not optional: a plain syscall rather than a leak
			s.fenceFd = -1
		}
	}
	if err != nil {
		c.fenceFailed(fmt.Errorf("segment: queue fence step %d: %w", step, err))
	}
	if s.fenceOps == 0 {
		c.fenceEnded()
	}
}

func (c *Copy) fenceFailed(err error) {
	if c.seal.err == nil {
		c.seal.err = fmt.Errorf("segment: seal fence: %w", err)
	}
}

// fenceEnded follows a fence step whose operations all completed: after the write and fdatasync
// the file is closed; once it is closed (or was never opened) the fence is done.
func (c *Copy) fenceEnded() {
	s := &c.seal
	if s.fenceFd >= 0 {
		if s.err == nil && !s.fenceWritten() {
			c.fenceStep(fenceStepWrite)
			return
		}
		c.fenceStep(fenceStepClose)
		return
	}
	s.fenceDone = true
	c.maybeSealDone()
}

// Complete handles the fence operations of a seal. It implements ring.Handler.
func (c *Copy) Complete(comp ring.Completion) {
	s := &c.seal
	assert.True(s.fenceOps > 0, "segment: fence completion without seal")
	s.fenceOps--
	err := comp.Err()
	switch comp.Tag {
	case tagFenceOpen:
		if err == nil {
			s.fenceFd = int(comp.Res)
		}
	case tagFenceWrite:
		if err == nil && int(comp.Res) != fenceSlotSize {
			err = fmt.Errorf("segment: short fence write of %d bytes", comp.Res)
		}
		s.fenceWrites++
	case tagFenceSync:
		s.fenceWrites++
	case tagFenceClose:
		s.fenceFd = -1
	}
	if err != nil {
		c.fenceFailed(err)
	}
	if s.fenceOps == 0 {
		c.fenceEnded()
	}
}

func (c *Copy) logQuiet(*Log) { c.maybeSealDone() }

func (c *Copy) logParked(parked bool) {
	if parked {
		c.parkedLogs++
	} else {
		c.parkedLogs--
	}
}

// wake puts the copy on its Jobs' list of copies that Poll flushes (see Jobs.Poll).
func (c *Copy) wake() {
	if c.js != nil {
		c.js.wake(c)
	}
}

// needsFlush says whether a Flush may still have work to start or resume: anything queued or in
// flight in either log, or a seal in progress. An idle copy costs Poll nothing.
func (c *Copy) needsFlush() bool {
	if !c.ready || c.closed {
		return false
	}
	return c.seal.active || c.records.Busy() || c.cursors.Busy()
}

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
