package segment

import (
	"errors"
	"fmt"
	"math"

	"golang.org/x/sys/unix"
)

// cut removes every record at or past off (a rare path: it drives the ring synchronously and needs
// a quiet log). Whole segments past off are removed, last first, each removal made durable before
// the next, so a crash in the middle leaves a log that opens at or above off; then the segment
// holding off is shortened and its index trimmed. off at or past the durable tail is a no-op, so
// repeating a cut changes nothing. off must be a batch boundary (ErrNotBoundary) and not below
// the retained head (ErrBelowHead).
func (l *Log) cut(off uint64) error {
	switch {
	case l.shut:
		return ErrClosed
	case l.failed != nil:
		return l.failed
	case l.Busy():
		return ErrBusy
	case off < l.Head():
		return fmt.Errorf("%w: cut at %d, head %d", ErrBelowHead, off, l.Head())
	case off >= l.durable:
		return nil
	}
	if err := l.unparkSync(); err != nil {
		return err
	}
	i := l.findSegment(off)
	s := l.segs[i]
	pos, err := l.batchPos(s, off)
	if err != nil {
		return err
	}
	for j := len(l.segs) - 1; j > i; j-- {
		if err := l.removeSegmentDurably(l.segs[j]); err != nil {
			return err
		}
		l.segs[j] = nil
		l.segs = l.segs[:j]
	}
	if pos == 0 && i > 0 {
		// The cut falls on a segment boundary: drop the whole segment; the one before becomes active.
		if err := l.removeSegmentDurably(s); err != nil {
			return err
		}
		l.segs[i] = nil
		l.segs = l.segs[:i]
		s = l.segs[i-1]
		pos = s.size
	}
	l.runForget(s)
	if err := l.shorten(s, off, pos); err != nil {
		return err
	}
	l.durable, l.next = off, off
	l.closeIdle()
	return nil
}

// shorten makes s the active segment ending at byte pos, record offset off.
func (l *Log) shorten(s *segment, off uint64, pos int64) error {
	// An active segment has no sidecar; remove it first so no crash leaves a stale one that claims
	// the longer size.
	if err := l.sr.unlink(l.dirfd, sidecarName(s.base), false); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("segment: remove %s: %w", sidecarName(s.base), err)
	}
	fd, err := l.segFd(s) // it becomes the active segment: its descriptor stays open
	if err != nil {
		return err
	}
	if err := l.sr.ftruncate(fd, pos); err != nil {
		return fmt.Errorf("segment: truncate %s: %w", l.path(s.base), err)
	}
	if err := l.sr.fsync(fd, false); err != nil {
		return fmt.Errorf("segment: fsync %s: %w", l.path(s.base), err)
	}
	if err := l.sr.fsync(l.dirfd, false); err != nil {
		return fmt.Errorf("segment: fsync %s: %w", l.dir, err)
	}
	k := len(s.index)
	for k > 0 && s.index[k-1].offset >= off {
		k--
	}
	s.index = s.index[:k]
	l.reserveIndex(s)
	s.size, s.wSize, s.filled = pos, pos, pos
	s.end, s.wEnd = off, off
	s.digestKnown, s.digestQueued, s.sidecarSaved, s.digestPending = false, false, false, false
	return nil
}

// batchPos finds the byte position of the batch starting at off in s, reading from the nearest
// index entry.
func (l *Log) batchPos(s *segment, off uint64) (int64, error) {
	at, pos := indexPos(s, off)
	if at == off {
		return pos, nil
	}
	hdr := make([]byte, BatchHeaderSize)
	fd, err := l.segFd(s)
	if err != nil {
		return 0, err
	}
	for at < off {
		if _, err := l.sr.readAt(fd, hdr, pos); err != nil {
			return 0, fmt.Errorf("segment: read %s at %d: %w", l.path(s.base), pos, err)
		}
		h, err := decodeHeaderOnly(hdr)
		if err != nil {
			return 0, fmt.Errorf("segment: %s at byte %d: %w", l.path(s.base), pos, err)
		}
		if h.BaseOffset != at {
			return 0, fmt.Errorf("%w: %s at byte %d: batch base %d, expected %d", ErrCorrupt, l.path(s.base), pos, h.BaseOffset, at)
		}
		if h.NextOffset() > off {
			return 0, fmt.Errorf("%w: offset %d is inside the batch at %d", ErrNotBoundary, off, at)
		}
		at = h.NextOffset()
		pos += int64(h.Size())
	}
	return pos, nil
}

// removeSegmentDurably removes s and fsyncs the directory.
func (l *Log) removeSegmentDurably(s *segment) error {
	if err := l.removeSegment(s); err != nil {
		return err
	}
	if err := l.sr.fsync(l.dirfd, false); err != nil {
		return fmt.Errorf("segment: fsync %s: %w", l.dir, err)
	}
	return nil
}

// retainPick detaches the closed segments retention removes from the front: while the log holds
// more than maxBytes (0: no limit; -1: every segment the other bounds allow) or their newest
// batch is older than maxAgeMs before nowMs (0: no limit), and only durable segments that end at
// or below keepFrom and that no read or digest uses. The head moves now; removeDetached deletes
// the files.
func (l *Log) retainPick(nowMs, maxBytes, maxAgeMs int64, keepFrom uint64) []*segment {
	if l.shut || l.failed != nil {
		return nil
	}
	total := int64(0)
	for _, s := range l.segs {
		total += s.wSize
	}
	n := 0
	for n < len(l.segs)-1 {
		s := l.segs[n]
		if s.size != s.wSize || s.end > keepFrom || l.segInUse(s) {
			break
		}
		overBytes := maxBytes < 0 || (maxBytes > 0 && total > maxBytes)
		tooOld := maxAgeMs > 0 && s.maxTimestamp < nowMs-maxAgeMs
		if !overBytes && !tooOld {
			break
		}
		total -= s.size
		n++
	}
	if n == 0 {
		return nil
	}
	picked := append([]*segment(nil), l.segs[:n]...)
	clear(l.segs[:n])
	l.segs = l.segs[n:]
	return picked
}

// segInUse says whether a read, digest or zero write in flight or queued uses s, or its closing
// digest is still to come (s closed by a roll whose group is not durable yet).
func (l *Log) segInUse(s *segment) bool {
	if s.digestPending || l.prewriteBusy(s) {
		return true
	}
	for i := range l.reads.slots {
		if l.reads.slots[i].busy && l.reads.slots[i].seg == s {
			return true
		}
	}
	if l.dig.running && l.dig.seg == s {
		return true
	}
	for _, j := range l.dig.jobs {
		if j.seal || j.seg == s {
			return true
		}
	}
	return l.dig.sealing
}

// removeDetached removes (or retires as spares) the segments retainPick detached, oldest first,
// each removal made durable before the next, so a crash leaves the log starting at one of their
// bases.
func (l *Log) removeDetached(segs []*segment) (int, error) {
	if len(segs) > 0 {
		if err := l.unparkSync(); err != nil {
			return 0, err
		}
	}
	for i, s := range segs {
		if err := l.retire(s); err != nil {
			return i, err
		}
		if err := l.sr.fsync(l.dirfd, false); err != nil {
			return i, fmt.Errorf("segment: fsync %s: %w", l.dir, err)
		}
	}
	return len(segs), nil
}

// noKeep passes no keepFrom bound to retain.
const noKeep = math.MaxUint64

// decodeHeaderOnly decodes and checks a batch header without its payload.
func decodeHeaderOnly(b []byte) (BatchHeader, error) {
	h, _, _, err := DecodeBatch(b)
	if err == ErrShortBatch && len(b) >= BatchHeaderSize {
		// DecodeBatch checked the header before it found the payload missing.
		return h, nil
	}
	return h, err
}
