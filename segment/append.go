package segment

import (
	"fmt"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ringstream/ringstream/internal/assert"
	"github.com/ringstream/ringstream/ring"
)

// Tags of the log's own ring operations: the kind in the top byte, an index below it.
const (
	tagCommitOpen uint64 = iota + 1
	tagCommitWrite
	tagCommitFsync
	tagCommitDirFsync
	tagRead
	tagDigestRead
	tagSidecarOpen
	tagSidecarWrite
	tagSidecarClose
	tagPrewrite
	tagDigestTruncate
	tagCommitRename
	tagReadOpen
	tagSegClose
	tagDigestOpen
	tagUnpark
)

func makeTag(kind, index uint64) uint64 { return kind<<56 | index }
func tagKind(tag uint64) uint64         { return tag >> 56 }
func tagIndex(tag uint64) int           { return int(tag & (1<<56 - 1)) }

// part is the stretch of a group's buffer that goes to one segment file: one writev.
type part struct {
	seg  *segment
	from int    // start in group.buf
	to   int    // end in group.buf
	pos  int64  // file position of from
	end  uint64 // offset after the part's last batch
	iov  [1][]byte
}

// ack is one append waiting for its group to be durable.
type ack struct {
	token uint64
	end   uint64
}

// group is the bytes and appends of one group commit.
type group struct {
	buf   []byte
	parts []part
	acks  []ack
}

func (g *group) reset() {
	g.buf = g.buf[:0]
	clear(g.parts) // drop segment pointers
	g.parts = g.parts[:0]
	g.acks = g.acks[:0]
}

// Stages of the group commit in flight.
const (
	stageIdle uint8 = iota
	stageOpening
	stageWritesDeferred // opens done, waiting for ring room to queue the writes
	stageWriting
)

// commitState is the log's group commit: one group accumulating, one in flight.
type commitState struct {
	groups      [2]group
	pend        *group
	flight      *group
	stage       uint8
	outstanding int
	newSegs     int
	err         error
	auto        bool      // commit whenever something is pending (record log)
	wantSync    bool      // the caller asked for a commit (cursor log)
	writesAt    time.Time // when the group's writes were queued (only with Config.CommitObserver)
}

func (c *commitState) init(cfg Config) {
	c.pend, c.flight = &c.groups[0], &c.groups[1]
}

func (c *commitState) busy() bool { return c.stage != stageIdle }

// Append queues one batch for the next group commit and returns the base offset the log gave it
// (h.BaseOffset is overwritten). The batch is copied; payload is not retained. Events.AppendDone
// receives token once the group holding it is durable (or failed). Call Flush to start a commit.
func (l *Log) Append(token uint64, h *BatchHeader, payload []byte) (uint64, error) {
	if err := l.appendable(len(payload), h.Epoch); err != nil {
		return 0, err
	}
	if h.RecordCount == 0 {
		return 0, fmt.Errorf("%w: batch without records", ErrInvalidBatch)
	}
	size := BatchHeaderSize + len(payload)
	if !l.partRoom(size) {
		return 0, ErrBackpressure
	}
	h.BaseOffset = l.next
	h.PayloadLen = uint32(len(payload))
	seg := l.segmentFor(size)
	p := l.commit.pend
	start := len(p.buf)
	p.buf = appendBatch(p.buf, h, payload)
	l.queued(token, seg, h, start, size)
	return h.BaseOffset, nil
}

// AppendEncoded queues a batch that is already encoded (a follower storing the owner's batch as it
// came, an owner its own encoding). Its base offset must be the log's next offset. Its header is
// checked whole (DecodeBatchHeader); its payload is not hashed again: the caller's bytes came under a
// checksum that covered them (a prepare frame's body checksum) or from its own encoder. A payload
// that does not match its checksum anyway is caught by every read and by recovery (DecodeBatch).
func (l *Log) AppendEncoded(token uint64, batch []byte) (uint64, error) {
	h, _, n, err := DecodeBatchHeader(batch)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrInvalidBatch, err)
	}
	if n != len(batch) {
		return 0, fmt.Errorf("%w: %d trailing bytes", ErrInvalidBatch, len(batch)-n)
	}
	if err := l.appendable(int(h.PayloadLen), h.Epoch); err != nil {
		return 0, err
	}
	if h.BaseOffset != l.next {
		return 0, fmt.Errorf("%w: batch base %d, log next %d", ErrOffsetOrder, h.BaseOffset, l.next)
	}
	if !l.partRoom(n) {
		return 0, ErrBackpressure
	}
	seg := l.segmentFor(n)
	p := l.commit.pend
	start := len(p.buf)
	p.buf = append(p.buf, batch...)
	l.queued(token, seg, &h, start, n)
	return h.BaseOffset, nil
}

func (l *Log) appendable(payloadLen int, epoch uint64) error {
	switch {
	case l.shut:
		return ErrClosed
	case l.held:
		return ErrBusy
	case l.failed != nil:
		return l.failed
	case epoch < l.minEpoch:
		return fmt.Errorf("%w: batch epoch %d, fence %d", ErrFenced, epoch, l.minEpoch)
	case payloadLen > BatchPayloadMax:
		return fmt.Errorf("%w: payload of %d bytes", ErrInvalidBatch, payloadLen)
	case len(l.commit.pend.buf)+BatchHeaderSize+payloadLen > l.cfg.PendingBytesMax:
		return ErrBackpressure
	}
	return nil
}

// rolls says whether a batch of size bytes would roll the active segment.
func (l *Log) rolls(size int) bool {
	act := l.segs[len(l.segs)-1]
	return act.wSize > 0 && act.wSize+int64(size) > l.cfg.SegmentBytes
}

// partRoom says whether the pending group can take a batch of size bytes without needing more
// ring operations (a writev and an fdatasync per file, one directory fsync) than the ring holds.
func (l *Log) partRoom(size int) bool {
	parts := len(l.commit.pend.parts)
	if parts == 0 || l.rolls(size) {
		parts++
	}
	return 2*parts+1 <= l.opsMax
}

// segmentFor returns the segment the next batch of size bytes goes to, rolling when the active
// segment is full. A rolled segment exists only in memory until its group commit creates it.
func (l *Log) segmentFor(size int) *segment {
	if !l.rolls(size) {
		return l.segs[len(l.segs)-1]
	}
	// The segment it closes keeps its descriptor for its closing digest, which is queued once its
	// bytes are durable: a read that ends before then must not close it (releaseSeg).
	l.segs[len(l.segs)-1].digestPending = true
	l.runClose(l.segs[len(l.segs)-1])
	s := &segment{base: l.next, end: l.next, wEnd: l.next, fd: -1}
	l.reserveIndex(s)
	l.segs = append(l.segs, s)
	l.runStart(s)
	return s
}

// reserveIndex gives the active segment's index the capacity of a full segment, so appending
// index entries never allocates.
func (l *Log) reserveIndex(s *segment) {
	n := int(l.cfg.SegmentBytes/l.cfg.IndexIntervalBytes) + 2
	if cap(s.index) < n {
		s.index = append(make([]indexEntry, 0, n), s.index...)
	}
}

// queued records a batch just copied into the pending group at buf[start:start+size].
func (l *Log) queued(token uint64, seg *segment, h *BatchHeader, start, size int) {
	p := l.commit.pend
	if n := len(p.parts); n == 0 || p.parts[n-1].seg != seg {
		p.parts = append(p.parts, part{seg: seg, from: start, to: start, pos: seg.wSize})
	}
	pt := &p.parts[len(p.parts)-1]
	assert.True(pt.pos+int64(pt.to-pt.from) == seg.wSize, "segment: part not contiguous")
	pt.to = start + size
	pt.end = h.NextOffset()
	l.runAdd(seg, seg.wSize, p.buf[start:start+size])
	if n := len(seg.index); n == 0 || seg.wSize-seg.index[n-1].pos >= l.cfg.IndexIntervalBytes {
		seg.index = append(seg.index, indexEntry{offset: h.BaseOffset, pos: seg.wSize})
	}
	seg.wSize += int64(size)
	seg.wEnd = h.NextOffset()
	seg.maxTimestamp = max(seg.maxTimestamp, h.MaxTimestamp)
	l.next = h.NextOffset()
	l.pw.armed = true
	if l.activity != nil {
		*l.activity++
	}
	l.wake()
	p.acks = append(p.acks, ack{token: token, end: l.next})
}

// Flush starts a group commit of everything queued, unless one is in flight (the next starts when
// it completes). The cursor log commits only when asked (Sync) or when CursorSyncBytes are queued.
// The shard calls Flush once per loop turn, before it submits.
func (l *Log) Flush() {
	if l.failed != nil || l.shut {
		return
	}
	if l.pk.parked {
		l.readKick() // reads open their segment for themselves
		if l.commitDue() || len(l.dig.jobs) > 0 {
			l.unpark() // its completion flushes again
		}
		return
	}
	l.digestKick() // resumes a digest step parked on a full ring
	l.readKick()   // and reads parked between their open and their read
	l.prewriteKick()
	if l.commit.stage == stageWritesDeferred {
		l.queueWrites()
		return
	}
	if l.commit.busy() || !l.commitDue() {
		return
	}
	l.startCommit()
}

// commitDue says whether what is queued should be committed now: anything in the record log; in
// the cursor log, only when asked (Sync) or once CursorSyncBytes are queued.
func (l *Log) commitDue() bool {
	p := l.commit.pend
	return len(p.acks) > 0 && (l.commit.auto || l.commit.wantSync || len(p.buf) >= l.cfg.CursorSyncBytes)
}

// Sync asks for a commit of everything queued now at the next Flush (cursor events ride it).
// With nothing queued it does nothing.
func (l *Log) Sync() {
	if len(l.commit.pend.acks) > 0 {
		l.commit.wantSync = true
		l.wake()
	}
}

// wake tells the copy that a Flush has work here (Jobs.Poll flushes only such copies).
func (l *Log) wake() {
	if l.quiet != nil {
		l.quiet.wake()
	}
}

// Busy says whether a group commit, digest, read, prewrite, close or reopen is in flight, or
// appends are queued.
func (l *Log) Busy() bool {
	return l.commit.busy() || len(l.commit.pend.acks) > 0 || l.dig.running || len(l.dig.jobs) > 0 ||
		l.reads.used > 0 || l.pw.inFlight || l.closing > 0 || l.pk.opening > 0
}

// opsInFlight says whether any ring operation of the log is in flight or parked on a full ring: a
// group commit's, a digest's, a read's, a zero write, a close or a reopen.
func (l *Log) opsInFlight() bool {
	return l.commit.outstanding > 0 || l.dig.running || l.reads.used > 0 || l.pw.inFlight || l.closing > 0 ||
		l.pk.opening > 0
}

// room says whether n more operations fit the ring even if all in flight were still queued, so
// a linked chain can never be split by ErrQueueFull.
func (l *Log) room(n int) bool { return l.r.InFlight()+n <= l.opsMax }

func (l *Log) startCommit() {
	p := l.commit.pend
	opens, ops := 0, 0
	for i := range p.parts {
		if s := p.parts[i].seg; s.fd < 0 {
			opens++
			ops++
			if s.spareName != "" || (l.recycles() && len(l.spares) > 0) {
				ops++ // the rename linked before the open
			}
		}
	}
	if !l.room(max(ops, 2*len(p.parts)+1)) {
		return // retried at the next Flush
	}
	for i := range p.parts {
		pt := &p.parts[i]
		if l.prewriteBlocks(pt.seg, pt.pos, pt.pos+int64(pt.to-pt.from)) {
			return // the zero write's completion flushes again
		}
	}
	l.commit.pend, l.commit.flight = l.commit.flight, l.commit.pend
	l.commit.wantSync = false
	l.commit.err = nil
	l.commit.newSegs = opens
	if opens == 0 {
		l.queueWrites()
		return
	}
	l.commit.stage = stageOpening
	f := l.commit.flight
	for i := range f.parts {
		s := f.parts[i].seg
		if s.fd >= 0 {
			continue
		}
		if s.spareName != "" || l.takeSpare(s) {
			if err := l.queueRecycledOpen(i, s); err != nil {
				l.commitOpFailed(err)
			}
			continue
		}
		err := l.r.Openat(l, makeTag(tagCommitOpen, uint64(i)), l.dirfd, segmentName(s.base),
			unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o644, 0)
		if err != nil {
			l.commitOpFailed(fmt.Errorf("queue openat: %w", err))
			continue
		}
		l.commit.outstanding++
	}
	if l.commit.outstanding == 0 {
		l.finishCommit()
	}
}

// queueWrites queues, per part, one writev linked to one fdatasync, and a directory fsync when
// the group created segment files.
func (l *Log) queueWrites() {
	f := l.commit.flight
	if !l.room(2*len(f.parts) + 1) {
		l.commit.stage = stageWritesDeferred
		return
	}
	l.commit.stage = stageWriting
	if l.cfg.CommitObserver != nil {
		l.commit.writesAt = time.Now()
	}
	for i := range f.parts {
		pt := &f.parts[i]
		pt.iov[0] = f.buf[pt.from:pt.to]
		if err := l.r.Writev(l, makeTag(tagCommitWrite, uint64(i)), pt.seg.fd, pt.iov[:], pt.pos, ring.Link); err != nil {
			l.commitOpFailed(fmt.Errorf("queue writev: %w", err))
			break
		}
		l.commit.outstanding++
		if err := l.queueDataSync(i, pt.seg.fd); err != nil {
			l.commitOpFailed(fmt.Errorf("queue fdatasync: %w", err))
			break
		}
		l.commit.outstanding++
	}
	if l.commit.newSegs > 0 && l.commit.err == nil {
		if err := l.queueDirSync(); err != nil {
			l.commitOpFailed(fmt.Errorf("queue dir fsync: %w", err))
		} else {
			l.commit.outstanding++
		}
	}
	if l.commit.outstanding == 0 {
		l.finishCommit()
	}
}

// brokenRules are deliberate bugs that only tests switch on (export_test.go), to prove that the
// power-loss test catches them. They are all false outside those tests.
type brokenRules struct {
	noDataSync     bool // the group commit's fdatasync becomes a no-op
	noRollDirFsync bool // a group that created a segment file skips the directory fsync
}

func (l *Log) queueDataSync(i int, fd int) error {
	if l.broken.noDataSync {
		return l.r.Nop(l, makeTag(tagCommitFsync, uint64(i)), 0)
	}
	return l.r.Fsync(l, makeTag(tagCommitFsync, uint64(i)), fd, true, 0)
}

func (l *Log) queueDirSync() error {
	if l.broken.noRollDirFsync {
		return l.r.Nop(l, makeTag(tagCommitDirFsync, 0), 0)
	}
	return l.r.Fsync(l, makeTag(tagCommitDirFsync, 0), l.dirfd, false, 0)
}

func (l *Log) commitOpFailed(err error) {
	if l.commit.err == nil {
		l.commit.err = err
	}
}

// onCommitOp handles the completion of one of the group commit's operations.
func (l *Log) onCommitOp(c ring.Completion) {
	assert.True(l.commit.outstanding > 0, "segment: commit completion without operation")
	l.commit.outstanding--
	f := l.commit.flight
	i := tagIndex(c.Tag)
	if err := c.Err(); err != nil {
		l.commitOpFailed(fmt.Errorf("%s: %w", l.commitOpFile(c.Tag), err)) // the file and the errno
	} else {
		switch tagKind(c.Tag) {
		case tagCommitOpen:
			s := f.parts[i].seg
			s.fd = int(c.Res)
			if s.spareName != "" {
				// A recycled file: its old bytes count as written space, as prewritten zeros do.
				s.filled = max(s.filled, s.spareSize)
				s.spareName = ""
			}
		case tagCommitWrite:
			if int(c.Res) != f.parts[i].to-f.parts[i].from {
				l.commitOpFailed(fmt.Errorf("%s: %w: writev wrote %d of %d bytes", l.commitOpFile(c.Tag), ErrShortWrite,
					c.Res, f.parts[i].to-f.parts[i].from))
			}
		}
	}
	if l.commit.outstanding > 0 {
		return
	}
	if l.commit.stage == stageOpening && l.commit.err == nil {
		l.queueWrites()
		return
	}
	l.finishCommit()
}

// commitOpFile names the file a group commit operation worked on: its segment, or the log directory
// for the directory fsync.
func (l *Log) commitOpFile(tag uint64) string {
	if i := tagIndex(tag); tagKind(tag) != tagCommitDirFsync && i < len(l.commit.flight.parts) {
		return l.path(l.commit.flight.parts[i].seg.base)
	}
	return l.dir
}

// finishCommit ends the group in flight: on success the durable tail moves and every append in it
// is acknowledged in order; on failure the log fails and every queued append gets the error.
func (l *Log) finishCommit() {
	f := l.commit.flight
	if err := l.commit.err; err != nil {
		if l.failed == nil {
			l.failed = fmt.Errorf("%w: %s group commit: %w", ErrFailed, l.kind, err)
		}
		// Warn: the host reports the copy's failure, once, at ERROR (streamhost names the state).
		l.log.Warn("segment: group commit failed", "log", l.kind.String(), "dir", l.dir, "err", err)
		for _, a := range f.acks {
			l.events.AppendDone(l.kind, a.token, a.end, l.failed)
		}
		for _, a := range l.commit.pend.acks {
			l.events.AppendDone(l.kind, a.token, a.end, l.failed)
		}
		l.commit.pend.reset()
		f.reset()
		l.commit.stage = stageIdle
		l.afterCommit()
		return
	}
	for i := range f.parts {
		pt := &f.parts[i]
		pt.seg.size = pt.pos + int64(pt.to-pt.from)
		pt.seg.end = pt.end
		pt.seg.filled = max(pt.seg.filled, pt.seg.size)
	}
	assert.True(len(f.acks) > 0, "segment: group commit without appends")
	assert.True(f.acks[len(f.acks)-1].end >= l.durable, "segment: durable tail went back")
	l.durable = f.acks[len(f.acks)-1].end
	if obs := l.cfg.CommitObserver; obs != nil {
		obs(l.kind, time.Since(l.commit.writesAt))
	}
	// The stage stays busy while callbacks run, so a Flush from inside one cannot start a group
	// over the acks being walked.
	for _, a := range f.acks {
		l.events.AppendDone(l.kind, a.token, a.end, nil)
	}
	// Segments closed by this group, including one that filled up in an earlier group and was
	// closed only now, when the first batch of the next one became durable.
	for i := len(l.segs) - 2; i >= 0 && !l.segs[i].digestQueued; i-- {
		l.queueDigestIfClosed(l.segs[i])
	}
	f.reset()
	l.commit.stage = stageIdle
	l.afterCommit()
	l.Flush()
}

// CommitWritesAt is when the writes of the group commit in flight were queued on the ring; inside
// Events.AppendDone, of the group that just completed. It is the zero time without
// Config.CommitObserver, which is what makes the log read the clock.
func (l *Log) CommitWritesAt() time.Time { return l.commit.writesAt }

// afterCommit lets work that waits for a quiet log proceed.
func (l *Log) afterCommit() {
	l.prewriteKick()
	l.digestKick()
	if l.quiet != nil {
		l.quiet.logQuiet(l)
	}
}

// Complete routes the log's ring completions. It implements ring.Handler.
func (l *Log) Complete(c ring.Completion) {
	switch tagKind(c.Tag) {
	case tagCommitOpen, tagCommitWrite, tagCommitFsync, tagCommitDirFsync, tagCommitRename:
		l.onCommitOp(c)
	case tagRead:
		l.onRead(c)
	case tagDigestRead:
		l.onDigestRead(c)
	case tagSidecarOpen, tagSidecarWrite, tagSidecarClose:
		l.onSidecar(c)
	case tagPrewrite:
		l.onPrewrite(c)
	case tagDigestTruncate:
		l.onDigestTruncate(c)
	case tagReadOpen:
		l.onReadOpen(c)
	case tagSegClose:
		l.onSegClose(c)
	case tagDigestOpen:
		l.onDigestOpen(c)
	case tagUnpark:
		l.onUnpark(c)
	default:
		assert.True(false, "segment: completion with unknown tag")
	}
}
