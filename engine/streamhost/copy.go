package streamhost

import (
	"errors"
	"fmt"
	"math"

	"golang.org/x/sys/unix"

	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/engine/stream"
	"github.com/ringstream/ringstream/segment"
	"github.com/ringstream/ringstream/shard"
	"github.com/ringstream/ringstream/shard/heartbeat"
	"github.com/ringstream/ringstream/wire"
)

type copyState uint8

const (
	stateOpening  copyState = iota // segment's open job runs
	stateScanning                  // reading the retained batch headers for the copy
	stateServing
	stateApplying // a new assignment: the protocol copy stopped, the cut and the reopen follow
	stateClosing  // closing or deleting: its storage is going away
	stateFailed   // its storage failed and is closed: it is reopened later (heal.go)
	stateClosed   // closed or deleted: it serves nothing
)

// Tags of the copy's own rare operations and reads. Reads the copy asks for carry its own tags,
// which are below tagScan.
const (
	tagOpen     = 1
	tagClose    = 2
	tagDelete   = 3
	tagRetain   = 4
	tagSeal     = 5
	tagSealCut  = 6
	tagApplyCut = 7
	tagEpoch    = 1 << 40 // + epoch
	tagScan     = 1 << 62
	tagBoundary = tagScan - 1 // the read of the batch a cut fell inside
)

// copyGroup is one stream copy on its shard: a shard.Group (the owner is a primary on the heartbeat
// schedule, a follower a backup), segment's Events for its storage, and the carrier of the copy's
// effects.
type copyGroup struct {
	// What an idle copy's tick reads, grouped at the front.
	h        *shardHost
	c        *stream.Copy
	seg      *segment.Copy
	state    copyState
	dirty    bool
	ticking  bool  // the copy times something (stream.Copy.Ticking, read after each Ready): it gets Tick
	retain   bool  // a retention job runs
	parkNow  bool  // park at the next chance: the copy just opened
	parked   bool  // parked at the last check, with no activity seen since (park.go)
	delWait  bool  // a delete waits for the rare operation running
	stagger  uint8 // the stream id modulo parkCheckTicks: copies compare their activity on different ticks
	sleeping bool  // SleepUntil let the shard put the copy to sleep: wake tells the shard of any input
	// Its entry in the shard's published tails (tails.go): tailSlot is 1 + its index (0: none),
	// tailMarked while on the shard's list to rebuild, pubParked as last published.
	tailSlot   int
	tailMarked bool
	pubParked  bool
	activity   uint64
	activeAt   uint64 // parking (park.go): the storage's activity count when it last changed, and that tick
	seal       sealWork
	apply      applyWork
	fail       healWork // its storage failed: closed, then reopened (heal.go)
	// The log epoch the copy asked for, while storage refuses it as busy (another rare operation
	// runs): tried again at each operation's end and at each tick.
	epochWait  bool
	epochEntry segment.EpochEntry
	// healedAt and lastBackoff: the tick of its last heal and the wait before it (a copy that fails
	// again soon after waits longer).
	healedAt, lastBackoff uint64

	spec    Spec
	cfg     stream.Config
	dir     string
	members []shard.Member
	self    uint8
	token   uint64

	// The copy's heartbeat state, read after every Ready.
	role    stream.Role
	commit  uint64
	holders heartbeat.Members

	held    []*buffer // owner: encoded appends not yet reported durable, in order
	fresh   []*buffer // reads completed since the last Ready (their data may be in it)
	reading []*buffer // reads in flight, by position: readTags[i] is reading[i]'s tag
	readTag []uint64
	// readWait: reads the copy asked for that the log refused as busy (its read slots all in use),
	// in order; started as slots free (ReadDone) and at each tick.
	readWait []readReq
	spanOf   []int // by append of the Ready being carried out: its span in the owner's buffer, or -1

	scanFrom uint64 // opening: the next retained batch to feed the copy
	head     uint64 // the record log head the copy was told
	retainAt uint64 // tick of the next retention
	opening  bool   // Opened not yet told
	deleted  func(error)
	// dead is the storage of a failed copy whose open failed (closed, kept only so that a delete can
	// remove its files: segment deletes a closed copy too).
	dead *segment.Copy

	// Failover (seal.go, assign.go; seal and apply are above).
	starts []meta.HistoryStart // the stream's history starts with the assignment applied
	cut    cutWork
	// cutSinceScan: a cut ran since the protocol copy was fed the log, so the next assignment
	// makes a new copy and feeds it again instead of moving this one in place.
	cutSinceScan bool
	silent       bool // a follower whose owner was silent for the shard's timeout (published in heartbeats)
	// keptProbe: the first record prepare of the newest epoch that arrived while the copy was not
	// serving, handed to the copy as a probe once it serves (group.go).
	keptProbe stream.OwedProbe
}

// Attach starts the copy's open on the shard's ring: Done(OpOpen) goes on with the scan.
func (cg *copyGroup) Attach(s shard.Sender) {
	sh := cg.h
	if sh.send == nil {
		sh.send = s
	}
	sh.copies[cg.spec.Stream] = cg
	sh.addTail(cg)
	seg, err := segment.Open(sh.jobs, s.Ring(), cg.dir, sh.h.cfg.Segment, cg, tagOpen)
	if err != nil {
		cg.closeFailed(err)
		return
	}
	cg.seg = seg
}

// Done receives the end of a rare operation (from Jobs.Poll).
func (cg *copyGroup) Done(r segment.Result) {
	cg.wake()
	cg.done(r)
	if cg.fail.closeWait {
		cg.closeForHeal() // it waited for this operation to end
		return
	}
	cg.tryEpoch() // a log epoch refused while the operation ran
}

func (cg *copyGroup) done(r segment.Result) {
	switch r.Op {
	case segment.OpOpen:
		if r.Err != nil {
			cg.dead, cg.seg = cg.seg, nil
			if cg.fail.active {
				cg.healAttemptFailed(r.Err)
				return
			}
			cg.closeFailed(r.Err)
			return
		}
		cg.parkAfterOp()
		if cg.apply.phase == applyWaiting {
			cg.state = stateApplying // a copy made by an assignment: cut onto its history first
			cg.stepApply()
			return
		}
		cg.startScan()
	case segment.OpCut:
		cg.cutDone(r)
	case segment.OpAppendEpoch:
		cg.epochDone(uint32(r.Tag-tagEpoch), r.Err)
	case segment.OpRetain:
		cg.syncHead()
		cg.retain = false
		if r.Err != nil && !errors.Is(r.Err, segment.ErrBusy) {
			cg.storageFailed(fmt.Errorf("streamhost: retention: %w", r.Err))
		}
	case segment.OpClose:
		if cg.fail.active && !cg.h.stopping {
			cg.state = stateFailed
			cg.armRetry()
			return
		}
		cg.state = stateClosed
	case segment.OpDelete:
		cg.state = stateClosed
		cg.fail = healWork{}
		cg.h.h.clearFailure(cg.spec.Stream, cg.spec.Incarnation)
		cg.remove()
		if cg.deleted != nil {
			cg.deleted(r.Err)
		}
	}
}

// tryEpoch asks storage for the log epoch the copy waits for. Busy is not broken: a refusal because
// another rare operation runs (ErrBusy) keeps it queued; a seal that fenced the copy past the epoch
// (ErrFenced) leaves it sealed, and the next assignment reopens it; anything else fails the copy.
func (cg *copyGroup) tryEpoch() {
	if !cg.epochWait || cg.c == nil || cg.state != stateServing {
		return
	}
	e := cg.epochEntry
	err := cg.seg.AppendEpoch(tagEpoch+e.Epoch, e)
	switch {
	case errors.Is(err, segment.ErrBusy):
		cg.h.stats.EpochsQueued++
		return
	case err == nil, errors.Is(err, segment.ErrFenced), errors.Is(err, segment.ErrClosed):
	default:
		cg.c.EpochDone(uint32(e.Epoch), err)
		cg.storageFailed(fmt.Errorf("streamhost: log epoch %d: %w", e.Epoch, err))
	}
	cg.epochWait = false
}

// epochDone: storage wrote the log epoch (or failed to). One fenced by a seal that came first is the
// seal's business (the copy is sealed); a failed write fails the copy.
func (cg *copyGroup) epochDone(epoch uint32, err error) {
	if cg.c == nil || cg.state != stateServing {
		return
	}
	switch {
	case err == nil:
		cg.c.EpochDone(epoch, nil)
		cg.h.markDirty(cg)
		cg.reportOpened(nil)
	case errors.Is(err, segment.ErrFenced):
	default:
		cg.c.EpochDone(epoch, err)
		cg.reportOpened(err)
		cg.storageFailed(fmt.Errorf("streamhost: log epoch %d: %w", epoch, err))
	}
}

// syncHead tells the copy where its record log's head is. Retention moves the head when its job
// starts, inside Jobs.Poll, and the copy must not ask for reads below it from then on: every input
// that can make a read syncs the head first. Only retention moves the head of a serving copy, so
// without a retention job running there is nothing to read (syncHead runs on every tick of every
// copy, and the head is two pointers away).
func (cg *copyGroup) syncHead() {
	if cg.c == nil || cg.state != stateServing || !cg.retain {
		return
	}
	if h := cg.seg.Records().Head(); h > cg.head {
		cg.head = h
		cg.c.HeadMoved(h)
	}
}

// closeFailed reports a copy whose storage did not open and leaves it closed, to be reopened after a
// backoff (heal.go; corrupt data waits for an operator); the others serve.
func (cg *copyGroup) closeFailed(err error) {
	cg.c = nil
	cg.failed(ErrDamaged, err)
	cg.state = stateFailed
	cg.armRetry()
	if f := cg.h.h.cfg.Opened; f != nil {
		f(cg.spec.Stream, err)
	}
}

// remove takes the copy off its shard (the group goes at the shard's next turn).
func (cg *copyGroup) remove() {
	if cg.h.copies[cg.spec.Stream] == cg {
		delete(cg.h.copies, cg.spec.Stream)
		cg.h.removeTail(cg)
	}
	_ = cg.h.h.node.RemoveGroup(cg.spec.Stream)
}

// delete closes and removes the copy's files (segment.Copy.Delete runs on the ring).
func (cg *copyGroup) delete(done func(error)) {
	if cg.state == stateFailed && cg.seg == nil && cg.dead != nil {
		cg.seg = cg.dead // a failed open's closed storage: Delete removes its files
	}
	switch {
	case cg.state == stateFailed && cg.seg == nil:
		cg.dropFailed(done) // no storage was ever opened: nothing of it to delete
		return
	case cg.seg == nil || cg.state == stateClosing || cg.state == stateClosed ||
		(cg.fail.active && cg.state != stateFailed):
		// Closing (for a heal, or a delete already under way), or a failed copy's reopen in flight
		// (a delete that waited on it would wait for good if the reopen failed): the caller tries
		// again later, and finds the copy failed between two reopens or serving again.
		done(fmt.Errorf("%w: %d is not open", ErrUnknownStream, cg.spec.Stream))
		return
	}
	cg.deleted = done
	cg.fail.retryAt = 0 // a failed copy being deleted is not reopened
	cg.fail.auto = false
	cg.tryDelete()
}

// dropFailed takes a failed copy whose storage never opened (segment.Open refused it at once) off
// its shard and out of Status: no reopen is tried again. Its directory, if any, was never opened by
// segment and is left, named in a warning.
func (cg *copyGroup) dropFailed(done func(error)) {
	cg.fail = healWork{}
	cg.state = stateClosed
	cg.h.h.clearFailure(cg.spec.Stream, cg.spec.Incarnation)
	cg.remove()
	cg.h.h.log.Warn("streamhost: failed copy dropped without opening its storage; its directory, if any, is left",
		"stream", cg.spec.Stream, "incarnation", cg.spec.Incarnation, "dir", cg.dir)
	done(nil)
}

// tryDelete starts the delete, or waits for the next tick while another rare operation runs.
func (cg *copyGroup) tryDelete() {
	err := cg.seg.Delete(tagDelete)
	cg.delWait = errors.Is(err, segment.ErrBusy)
	switch {
	case cg.delWait:
	case err != nil:
		done := cg.deleted
		cg.deleted = nil
		done(err)
	default:
		cg.state = stateClosing
	}
}

// OnStop closes the copy's storage; the shard host's OnStop polls the jobs that do it.
func (cg *copyGroup) OnStop() {
	if cg.fail.closeWait {
		cg.closeForHeal()
		return
	}
	if cg.seg != nil && cg.state != stateClosing && cg.state != stateClosed && cg.state != stateFailed {
		if cg.seg.Close(tagClose) == nil {
			cg.state = stateClosing
		}
	}
}

// AppendDone: a log's durable tail moved (from segment's completions).
func (cg *copyGroup) AppendDone(log segment.LogKind, _ uint64, end uint64, err error) {
	cg.wake()
	if log == segment.RecordLog && err == nil {
		n := 0
		for n < len(cg.held) && cg.held[n].end <= end {
			cg.h.pool.unref(cg.held[n])
			n++
		}
		// Shift rather than reslice from the front, which would shrink the capacity and make the
		// owner's next held buffer allocate a new array (0.004 allocations per record).
		k := copy(cg.held, cg.held[n:])
		clear(cg.held[k:])
		cg.held = cg.held[:k]
	}
	if cg.state == stateApplying {
		switch {
		case err != nil && cg.apply.phase == applyWaiting:
			cg.applyFailed(err) // the old copy's appends failed: its logs match no role
		case err == nil:
			if cg.c != nil {
				cg.c.AppendDone(kindOf(log), end) // it may move on in place: it knows its tails
			}
			cg.stepApply() // it waited for the old copy's appends to be durable
		}
		return
	}
	if cg.c == nil || cg.state != stateServing {
		return
	}
	if err != nil {
		cg.storageFailed(err)
		return
	}
	if log == segment.RecordLog && cg.h.tr.On() {
		tr := cg.h.tr
		tr.Durable(cg.spec.Stream, end, tr.Nanos(cg.seg.Records().CommitWritesAt()), tr.Now())
	}
	cg.syncHead()
	cg.c.AppendDone(kindOf(log), end)
	cg.h.markDirty(cg)
}

// ReadDone: a read finished; its buffer stays alive until the next Ready's sends took what they
// alias.
func (cg *copyGroup) ReadDone(_ segment.LogKind, tag uint64, data []byte, err error) {
	cg.wake()
	b := cg.takeRead(tag)
	switch {
	case (tag >= tagScan && cg.state != stateScanning) || (tag == tagBoundary && cg.state >= stateClosing):
		cg.h.pool.unref(b) // the scan or cut it served ended with a failure; the reopen starts over
		return
	case tag == tagBoundary:
		cg.boundaryDone(b, data, err)
		return
	case tag >= tagScan:
		cg.scanDone(b, data, err)
		return
	}
	if cg.c == nil || cg.state != stateServing {
		cg.h.pool.unref(b)
		if cg.state == stateApplying {
			cg.stepApply() // waited for the old copy's reads to end
		}
		return
	}
	cg.fresh = append(cg.fresh, b)
	cg.syncHead()
	if err == nil {
		err = checkRead(data)
	}
	cg.c.ReadDone(tag, data, err)
	cg.h.markDirty(cg)
	cg.startWaitingReads() // a slot is free
	switch {
	case errors.Is(err, unix.EIO):
		cg.storageFailed(err) // the disk failed a read: reopen through recovery, which checks the tail
	case CauseOf(err) == CauseCorrupt:
		cg.storageFailed(err) // durable bytes changed under the log: reported, waits for the operator (RetryCopy)
	}
}

// checkRead checks every whole batch a read returned, payload checksums included: this is the one
// hash of those bytes on their way from the disk (the protocol copy then reads their headers only,
// stream.Config.DecodeHeader). A partial batch at the end is a read that stopped inside it, not an
// error. A batch that fails is corrupt data below the durable tail: the bytes the log made durable
// are not there any more (a bad disk, something else writing the file).
func checkRead(data []byte) error {
	for off := 0; off < len(data); {
		_, _, n, err := segment.DecodeBatch(data[off:])
		switch {
		case errors.Is(err, segment.ErrShortBatch):
			return nil
		case err != nil:
			return fmt.Errorf("streamhost: read back a batch at byte %d of %d: %w", off, len(data), err)
		}
		off += n
	}
	return nil
}

// read starts a read of log from offset into a pooled buffer of bytesMax plus the sparse index's
// reach.
func (cg *copyGroup) read(log *segment.Log, tag uint64, from uint64, bytesMax int) error {
	b := cg.h.pool.get(bytesMax + int(cg.h.h.segIndexBytes()) + segment.BatchHeaderSize)
	if err := log.Read(tag, from, b.b[:cap(b.b)]); err != nil {
		cg.h.pool.unref(b)
		return err
	}
	cg.reading = append(cg.reading, b)
	cg.readTag = append(cg.readTag, tag)
	return nil
}

func (cg *copyGroup) takeRead(tag uint64) *buffer {
	for i, t := range cg.readTag {
		if t == tag {
			b := cg.reading[i]
			cg.reading = append(cg.reading[:i], cg.reading[i+1:]...)
			cg.readTag = append(cg.readTag[:i], cg.readTag[i+1:]...)
			return b
		}
	}
	panic(fmt.Sprintf("streamhost: read %d completed without being started", tag))
}

// startScan feeds the copy every retained batch header, read through the ring, then OpenDone.
func (cg *copyGroup) startScan() {
	c, err := stream.New(cg.cfg, cg.spec.Assignment, cg.starts)
	if err != nil {
		cg.closeFailed(err)
		return
	}
	cg.c = c
	cg.cutSinceScan = false
	cg.state = stateScanning
	cg.scanFrom = cg.seg.Records().Head()
	cg.scanNext()
}

func (cg *copyGroup) scanNext() {
	rec, _ := cg.seg.Tails()
	if cg.scanFrom >= rec {
		cg.openDone()
		return
	}
	if err := cg.read(cg.seg.Records(), tagScan, cg.scanFrom, scanBytes); err != nil {
		cg.failScan(err)
	}
}

// scanBytes is the size of one read of the open scan.
const scanBytes = 1 << 20

func (cg *copyGroup) scanDone(b *buffer, data []byte, err error) {
	defer cg.h.pool.unref(b)
	if err != nil {
		cg.failScan(err)
		return
	}
	it := segment.NewBatchIter(data, cg.scanFrom)
	for h, _, ok := it.Next(); ok; h, _, ok = it.Next() {
		if err := cg.c.ObserveBatch(headerOf(&h)); err != nil {
			cg.failScan(err)
			return
		}
		cg.scanFrom = h.NextOffset()
	}
	if err := it.Err(); err != nil {
		cg.failScan(err)
		return
	}
	cg.scanNext()
}

// failScan reports a copy whose scan, or whose cut onto a new assignment, failed: its storage is
// closed and reopened later (heal.go).
func (cg *copyGroup) failScan(err error) {
	cg.c = nil
	if cg.fail.active {
		cg.fail.closeWait = false
		cg.healAttemptFailed(err)
		cg.closeForHeal()
		return
	}
	cg.failed(ErrDamaged, err)
	cg.closeForHeal()
	if f := cg.h.h.cfg.Opened; f != nil {
		f(cg.spec.Stream, err)
	}
}

// openDone starts the copy's role on its storage's state.
func (cg *copyGroup) openDone() {
	if err := epochsFitAStream(cg.seg); err != nil {
		cg.failScan(err)
		return
	}
	rec, cur := cg.seg.Tails()
	var epochs []wire.LogEpoch
	for _, e := range cg.seg.Epochs() {
		epochs = append(epochs, wire.LogEpoch{Epoch: uint32(e.Epoch), RecordStart: e.RecordStart, CursorStart: e.CursorStart})
	}
	cg.seg.EachCursor(func(name string, off uint64) { cg.c.ObserveCursor([]byte(name), off) })
	cg.head = cg.seg.Records().Head()
	cg.c.OpenDone(stream.OpenState{RecordHead: cg.head, RecordTail: rec, CursorTail: cur,
		Fence: uint32(cg.seg.FenceEpoch()), LogEpochs: epochs})
	cg.state = stateServing
	cg.retainAt = cg.h.tick + cg.h.h.cfg.RetainEveryTicks
	cg.opening = true
	if last, ok := cg.seg.LastEpoch(); ok && last.Epoch >= uint64(cg.spec.Assignment.Epoch) {
		cg.reportOpened(nil) // no log epoch to append first
	}
	cg.stepKeptProbe()
	cg.h.markDirty(cg)
	cg.silent = false
	cg.healed()
	if cg.seal.phase == sealQueued {
		cg.startSeal()
	}
	cg.stepApply()
}

// reportOpened tells Config.Opened that the copy serves: its storage opened and its log epoch is
// durable.
func (cg *copyGroup) reportOpened(err error) {
	if !cg.opening {
		return
	}
	cg.opening = false
	if f := cg.h.h.cfg.Opened; f != nil {
		f(cg.spec.Stream, err)
	}
}

func kindOf(l segment.LogKind) wire.LogKind {
	if l == segment.CursorLog {
		return wire.LogCursors
	}
	return wire.LogRecords
}

// epochsFitAStream refuses a copy whose log epochs or fence (u64 on disk) do not fit a stream epoch
// (u32 everywhere above segment). Only a damaged or foreign file holds such a value, with checksums
// that pass; cut to 32 bits it would break the order the copy and wire assert. The copy fails as
// corrupt and waits for the operator (ErrCorrupt is not retried).
func epochsFitAStream(seg *segment.Copy) error {
	if f := seg.FenceEpoch(); f > math.MaxUint32 {
		return fmt.Errorf("%w: fence epoch %d is above the largest stream epoch", segment.ErrCorrupt, f)
	}
	for _, e := range seg.Epochs() {
		if e.Epoch > math.MaxUint32 {
			return fmt.Errorf("%w: log epoch %d is above the largest stream epoch", segment.ErrCorrupt, e.Epoch)
		}
	}
	return nil
}
