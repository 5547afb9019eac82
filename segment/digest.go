package segment

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/cespare/xxhash/v2"
	"golang.org/x/sys/unix"

	"github.com/ringstream/ringstream/internal/assert"
	"github.com/ringstream/ringstream/ring"
)

// digestJob is one unit of the log's digest work, run one at a time in order: a segment that just
// closed (hash it, then save its sidecar), or a seal digest of the whole retained log.
type digestJob struct {
	seg  *segment
	seal bool
}

// SealDigest is a log's digest and the tail it covers.
type SealDigest struct {
	Digest    uint64 // xxhash64 over (base, size, xxhash64 of the file) of each segment, in order
	Tail      uint64 // the durable tail the digest covers
	Segments  int    // segments folded in
	BytesRead int64  // bytes read to compute it (at most one segment in steady state)
}

// digestState is the digest worker: one chunked read at a time through the ring.
type digestState struct {
	jobs    []digestJob
	running bool
	stalled uint8 // a step that found the ring full; digestKick retries it
	h       *xxhash.Digest
	buf     []byte
	seg     *segment
	pos     int64
	upTo    int64

	sealing  bool
	sealIdx  int
	sealN    int
	sealLast int64
	sealH    *xxhash.Digest
	sealRes  SealDigest
	scratch  [24]byte

	readTotal int64 // bytes every digest read so far (DigestBytesRead)

	sidecarBuf []byte
	sidecarFd  int
	sidecarErr error
}

func (d *digestState) init() {
	d.h = xxhash.New()
	d.sealH = xxhash.New()
	d.sidecarFd = -1
}

// queueDigestIfClosed queues the digest of s once s is closed and every byte of it is durable.
func (l *Log) queueDigestIfClosed(s *segment) {
	if l.active(s) || s.digestQueued || s.size != s.wSize {
		return
	}
	s.digestQueued = true
	s.digestPending = true // its descriptor stays open for the digest
	// Oldest first: the loop in finishCommit walks back from the newest.
	l.dig.jobs = append(l.dig.jobs, digestJob{})
	copy(l.dig.jobs[1:], l.dig.jobs)
	l.dig.jobs[0] = digestJob{seg: s}
}

// requestSealDigest queues a seal digest. It runs once no group commit is in flight or queued,
// and its result goes to the quiet listener.
func (l *Log) requestSealDigest() {
	l.dig.jobs = append(l.dig.jobs, digestJob{seal: true})
	l.digestKick()
}

// digestKick starts the next digest job when the worker is free.
func (l *Log) digestKick() {
	d := &l.dig
	if d.stalled != stepNone {
		step := d.stalled
		d.stalled = stepNone
		l.digestStep(step)
		return
	}
	if d.running || len(d.jobs) == 0 {
		return
	}
	if l.failed != nil {
		l.failDigestJobs()
		return
	}
	if l.pk.parked {
		l.unpark() // a parked log's seal digest needs its active segment; the reopen kicks again
		return
	}
	j := d.jobs[0]
	if j.seal && (l.commit.busy() || len(l.commit.pend.acks) > 0) {
		return // the seal covers a quiet log; afterCommit kicks again
	}
	if !j.seal && l.prewriteBusy(j.seg) {
		return // the zero write's completion kicks again
	}
	d.jobs = append(d.jobs[:0], d.jobs[1:]...)
	d.running = true
	if d.buf == nil {
		d.buf = make([]byte, l.cfg.DigestChunkBytes)
	}
	if j.seal {
		d.sealing = true
		d.sealIdx, d.sealN = 0, len(l.segs)
		d.sealLast = l.segs[d.sealN-1].size
		d.sealH.Reset()
		d.sealRes = SealDigest{Tail: l.durable}
		l.sealNext()
		return
	}
	if j.seg.filled > j.seg.size {
		// Prewritten zeros past the closed segment's data go before its digest and sidecar, so
		// the sidecar's size matches the file.
		d.seg = j.seg
		l.digestStep(stepTruncate)
		return
	}
	l.digestStart(j.seg, j.seg.size)
}

func (l *Log) onDigestOpen(c ring.Completion) {
	d := &l.dig
	if err := c.Err(); err != nil {
		l.digestFailed(fmt.Errorf("segment: open %s: %w", l.path(d.seg.base), err))
		return
	}
	d.seg.fd = int(c.Res)
	l.digestStart(d.seg, d.upTo)
}

func (l *Log) onDigestTruncate(c ring.Completion) {
	d := &l.dig
	if err := c.Err(); err != nil {
		l.digestFailed(fmt.Errorf("segment: truncate %s: %w", l.path(d.seg.base), err))
		return
	}
	d.seg.filled = d.seg.size
	l.digestStart(d.seg, d.seg.size)
}

// failDigestJobs drops the queued jobs of a failed log; a waiting seal learns why.
func (l *Log) failDigestJobs() {
	jobs := l.dig.jobs
	l.dig.jobs = nil
	for _, j := range jobs {
		if j.seg != nil {
			j.seg.digestPending = false // its descriptor closes with the log
		}
		if j.seal && l.quiet != nil {
			l.quiet.sealDigestDone(l, SealDigest{}, l.failed)
		}
	}
}

func (l *Log) digestStart(s *segment, upTo int64) {
	d := &l.dig
	d.seg, d.pos, d.upTo = s, 0, upTo
	d.h.Reset()
	if upTo == 0 {
		l.digestSegmentDone(d.h.Sum64())
		return
	}
	if s.runKnown && s.runSize == upTo {
		l.digestSegmentDone(s.runSum) // hashed as its bytes were queued (rundigest.go)
		return
	}
	l.digestRead()
}

// Steps of the digest worker that queue one ring operation each.
const (
	stepNone uint8 = iota
	stepRead
	stepSidecarOpen
	stepSidecarWrite
	stepSidecarClose
	stepTruncate
	stepOpen
)

// digestStep queues the operation of step, or parks it until digestKick when the ring is full
// (the ring's queue-full answer is back-pressure, never an I/O error).
func (l *Log) digestStep(step uint8) {
	d := &l.dig
	if !l.room(1) {
		d.stalled = step
		return
	}
	var err error
	switch step {
	case stepRead:
		n := min(int64(len(d.buf)), d.upTo-d.pos)
		if err = l.r.Read(l, makeTag(tagDigestRead, 0), d.seg.fd, d.buf[:n], d.pos, 0); err != nil {
			l.digestFailed(fmt.Errorf("segment: queue digest read: %w", err))
		}
	case stepSidecarOpen:
		dirfd, name := l.at(sidecarName(d.seg.base))
		err = l.r.Openat(l, makeTag(tagSidecarOpen, 0), dirfd, name,
			unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_CLOEXEC, 0o644, 0)
		if err != nil {
			l.sidecarDone(fmt.Errorf("queue openat: %w", err))
		}
	case stepSidecarWrite:
		if err = l.r.Write(l, makeTag(tagSidecarWrite, 0), d.sidecarFd, d.sidecarBuf, 0, 0); err != nil {
			d.sidecarErr = fmt.Errorf("queue write: %w", err)
			l.digestStep(stepSidecarClose)
		}
	case stepOpen:
		dirfd, name := l.at(segmentName(d.seg.base))
		err = l.r.Openat(l, makeTag(tagDigestOpen, 0), dirfd, name, unix.O_RDONLY|unix.O_CLOEXEC, 0, 0)
		if err != nil {
			l.digestFailed(fmt.Errorf("segment: queue open: %w", err))
		}
	case stepTruncate:
		if err = l.r.Ftruncate(l, makeTag(tagDigestTruncate, 0), d.seg.fd, d.seg.size, 0); err != nil {
			l.digestFailed(fmt.Errorf("segment: queue truncate: %w", err))
		}
	case stepSidecarClose:
		if err = l.r.CloseFile(l, makeTag(tagSidecarClose, 0), d.sidecarFd, 0); err != nil {
			// Closing is not optional: do it with a plain syscall rather than leak the fd.
			_ = unix.Close(d.sidecarFd)
			d.sidecarFd = -1
			l.sidecarDone(errors.Join(d.sidecarErr, err))
		}
	}
}

func (l *Log) digestRead() { l.digestStep(stepRead) }

func (l *Log) onDigestRead(c ring.Completion) {
	d := &l.dig
	assert.True(d.running, "segment: digest completion without job")
	if err := c.Err(); err != nil {
		l.digestFailed(fmt.Errorf("segment: digest read %s: %w", l.path(d.seg.base), err))
		return
	}
	if c.Res == 0 {
		l.digestFailed(fmt.Errorf("%w: %s ends at %d, expected %d", ErrCorrupt, l.path(d.seg.base), d.pos, d.upTo))
		return
	}
	_, _ = d.h.Write(d.buf[:c.Res])
	d.bytesRead(int64(c.Res))
	d.pos += int64(c.Res)
	if d.pos < d.upTo {
		l.digestRead()
		return
	}
	l.digestSegmentDone(d.h.Sum64())
}

func (d *digestState) bytesRead(n int64) {
	d.readTotal += n
	if d.sealing {
		d.sealRes.BytesRead += n
	}
}

// digestSegmentDone ends the hashing of d.seg.
func (l *Log) digestSegmentDone(sum uint64) {
	d := &l.dig
	if d.sealing {
		if d.sealIdx < d.sealN-1 {
			d.seg.digest, d.seg.digestKnown = sum, true
		}
		l.sealFold(d.seg.base, d.upTo, sum)
		seg := d.seg
		d.seg = nil
		l.releaseSeg(seg)
		d.sealIdx++
		l.sealNext()
		return
	}
	d.seg.digest, d.seg.digestKnown = sum, true
	l.sidecarStart()
}

func (l *Log) sealFold(base uint64, size int64, sum uint64) {
	d := &l.dig
	binary.LittleEndian.PutUint64(d.scratch[0:], base)
	binary.LittleEndian.PutUint64(d.scratch[8:], uint64(size))
	binary.LittleEndian.PutUint64(d.scratch[16:], sum)
	_, _ = d.sealH.Write(d.scratch[:])
	d.sealRes.Segments++
}

// sealNext folds in closed segments with known digests and reads the first one without (normally
// only the active segment, up to its durable size when the seal began).
func (l *Log) sealNext() {
	d := &l.dig
	for d.sealIdx < d.sealN {
		s := l.segs[d.sealIdx]
		if d.sealIdx < d.sealN-1 && s.digestKnown {
			l.sealFold(s.base, s.size, s.digest)
			d.sealIdx++
			continue
		}
		size := s.size
		if d.sealIdx == d.sealN-1 {
			size = d.sealLast
		}
		if s.fd < 0 {
			// A closed segment whose digest is unknown (its closing digest failed) and that
			// nothing holds open: open it for the seal's read; releaseSeg closes it after.
			d.seg, d.upTo = s, size
			l.digestStep(stepOpen)
			return
		}
		l.digestStart(s, size)
		return
	}
	d.sealRes.Digest = d.sealH.Sum64()
	d.sealing = false
	d.running = false
	res := d.sealRes
	if l.quiet != nil {
		l.quiet.sealDigestDone(l, res, nil)
	}
	l.digestKick()
}

func (l *Log) digestFailed(err error) {
	d := &l.dig
	d.running = false
	if seg := d.seg; seg != nil {
		d.seg = nil
		if !d.sealing {
			seg.digestPending = false
		}
		l.releaseSeg(seg)
	}
	if d.sealing {
		d.sealing = false
		if l.quiet != nil {
			l.quiet.sealDigestDone(l, SealDigest{}, err)
		}
	} else {
		// The sidecar stays unsaved; the next open scans the segment instead.
		l.log.Warn("segment: digest of closed segment failed", "log", l.kind.String(), "err", err)
	}
	l.digestKick()
}

// sidecarStart writes the sidecar of the segment just hashed: openat, write, close, one after the
// other through the ring. No fsync: see the sidecar format comment.
func (l *Log) sidecarStart() {
	d := &l.dig
	d.sidecarBuf = encodeSidecar(d.seg)
	l.digestStep(stepSidecarOpen)
}

func (l *Log) onSidecar(c ring.Completion) {
	d := &l.dig
	err := c.Err()
	switch tagKind(c.Tag) {
	case tagSidecarOpen:
		if err != nil {
			l.sidecarDone(err)
			return
		}
		d.sidecarFd = int(c.Res)
		l.digestStep(stepSidecarWrite)
	case tagSidecarWrite:
		if err == nil && int(c.Res) != len(d.sidecarBuf) {
			err = io.ErrShortWrite
		}
		d.sidecarErr = err
		l.digestStep(stepSidecarClose)
	case tagSidecarClose:
		d.sidecarFd = -1
		werr := d.sidecarErr
		d.sidecarErr = nil
		if werr == nil {
			werr = err
		}
		if werr == nil {
			d.seg.sidecarSaved = true
		}
		l.sidecarDone(werr)
	}
}

func (l *Log) sidecarDone(err error) {
	d := &l.dig
	if err != nil {
		l.log.Warn("segment: sidecar not saved", "file", sidecarName(d.seg.base), "err", err)
	}
	d.sidecarBuf = nil
	seg := d.seg
	d.seg = nil
	d.running = false
	seg.digestPending = false
	l.releaseSeg(seg)
	l.digestKick()
}

// VerifyReport says what verify mode read.
type VerifyReport struct {
	Segments int
	Bytes    int64
}

// VerifySync recomputes every closed segment's digest with large reads through the ring and compares
// it with the stored one, and checks the active segment batch by batch. The first mismatch is an
// error wrapping ErrDigestMismatch (or ErrCorrupt) that names the file. It drives the ring
// synchronously (a rare, operator-driven path) and needs a quiet log (ErrBusy otherwise).
func (l *Log) VerifySync() (VerifyReport, error) {
	var rep VerifyReport
	if l.Busy() {
		return rep, ErrBusy
	}
	if err := l.unparkSync(); err != nil {
		return rep, err
	}
	defer l.closeIdle()
	buf := make([]byte, l.cfg.DigestChunkBytes)
	h := xxhash.New()
	for _, s := range l.segs {
		if l.active(s) {
			if _, err := l.verifyActive(s); err != nil {
				return rep, err
			}
			rep.Segments++
			rep.Bytes += s.size
			continue
		}
		h.Reset()
		fd, err := l.segFd(s)
		if err != nil {
			return rep, err
		}
		for pos := int64(0); pos < s.size; {
			n := min(int64(len(buf)), s.size-pos)
			got, err := l.sr.readAt(fd, buf[:n], pos)
			if err != nil {
				return rep, fmt.Errorf("segment: verify %s at %d: %w", l.path(s.base), pos+int64(got), err)
			}
			_, _ = h.Write(buf[:got])
			pos += int64(got)
		}
		rep.Segments++
		rep.Bytes += s.size
		if !s.digestKnown {
			s.digest, s.digestKnown = h.Sum64(), true
			continue
		}
		if h.Sum64() != s.digest {
			return rep, fmt.Errorf("%w: %s: stored %016x, read %016x", ErrDigestMismatch, l.path(s.base), s.digest, h.Sum64())
		}
	}
	return rep, nil
}

// verifyActive checks the active segment's durable bytes batch by batch.
func (l *Log) verifyActive(s *segment) (int64, error) {
	buf := make([]byte, s.size)
	if _, err := l.sr.readAt(s.fd, buf, 0); err != nil {
		return 0, fmt.Errorf("segment: verify %s: %w", l.path(s.base), err)
	}
	next := s.base
	for pos := 0; pos < len(buf); {
		h, _, n, err := DecodeBatch(buf[pos:])
		if err == nil && h.BaseOffset != next {
			err = fmt.Errorf("%w: batch base %d, expected %d", ErrCorrupt, h.BaseOffset, next)
		}
		if err != nil {
			return int64(pos), fmt.Errorf("segment: verify %s at byte %d: %w", l.path(s.base), pos, err)
		}
		next = h.NextOffset()
		pos += n
	}
	return int64(len(buf)), nil
}
