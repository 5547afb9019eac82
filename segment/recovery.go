package segment

import (
	"errors"
	"fmt"

	"github.com/cespare/xxhash/v2"
	"golang.org/x/sys/unix"

	"github.com/ringstream/ringstream/internal/assert"
)

// Recovery on open: the unsettled tail is scanned batch by batch and cut at the first bad batch.

// recoverTail checks every segment after the last settled one batch by batch. The first bad
// batch, or a segment that does not start where the previous one ends, is the torn tail: it is
// cut with everything after it. The same damage in or before a settled segment is an error.
func (l *Log) recoverTail(settled int, rep *RecoveryReport) error {
	for i, s := range l.segs {
		gap := i > 0 && s.base != l.segs[i-1].end
		if gap && i <= settled {
			return fmt.Errorf("%w: %s starts at %d, previous segment ends at %d", ErrCorrupt, l.path(s.base), s.base, l.segs[i-1].end)
		}
		if gap {
			// A group commit that crossed a roll runs one chain per file; a crash can leave the
			// new file written and the old one short. Nothing from that group was acknowledged.
			return l.cutTail(i, -1, rep)
		}
		if s.sidecarSaved {
			continue
		}
		rep.Scanned++
		pos, err := l.scan(s)
		if err == errZeroTail {
			if err := l.truncateZeroTail(s, pos, &rep.ZeroTailBytes); err != nil {
				return err
			}
			err = nil
		}
		if err != nil && i+1 < len(l.segs) && l.segs[i+1].base == s.end {
			// The next segment starts where the valid batches end, so every batch written here
			// is whole: what follows is a recycled file's old bytes, not a torn write.
			if err := l.truncateZeroTail(s, pos, &rep.StaleTailBytes); err != nil {
				return err
			}
			s.digestKnown, s.digestQueued = true, true
			err = nil
		}
		if err != nil {
			if i <= settled {
				return fmt.Errorf("segment: %s at byte %d: %w", l.path(s.base), pos, err)
			}
			return l.cutTail(i, pos, rep)
		}
		// What open read may still sit only in the page cache (the writer was killed before its
		// fdatasync): make it durable before reporting it as the durable tail.
		if s.size == 0 {
			continue // nothing read, nothing to make durable
		}
		fd, err := l.segFd(s)
		if err != nil {
			return err
		}
		if err := l.sr.fsync(fd, true); err != nil {
			return fmt.Errorf("segment: fsync %s: %w", l.path(s.base), err)
		}
	}
	return nil
}

// segFd is s's descriptor on a rare path, opened (read-write) if s has none; the log's rare paths
// close the descriptors of closed segments when they end (closeIdle).
func (l *Log) segFd(s *segment) (int, error) {
	if s.fd >= 0 {
		return s.fd, nil
	}
	fd, err := l.sr.openat(l.dirfd, segmentName(s.base), unix.O_RDWR, 0)
	if err != nil {
		return -1, fmt.Errorf("segment: open %s: %w", l.path(s.base), err)
	}
	s.fd = fd
	return fd, nil
}

// statSeg is fstatat of s's file (a plain syscall on an inode the directory lookup brings into
// memory: no descriptor is opened for it).
func (l *Log) statSeg(s *segment, st *unix.Stat_t) error {
	if err := unix.Fstatat(l.dirfd, segmentName(s.base), st, 0); err != nil {
		return fmt.Errorf("segment: stat %s: %w", l.path(s.base), err)
	}
	return nil
}

// loadSidecar reads s's sidecar and, if it is valid and matches the file, adopts it. A file
// shorter than its valid sidecar says is corruption: the sidecar was written after those bytes
// were durable. A longer file is not: zeros prewritten past the data may survive a crash that
// lost the (unsynced) truncation before the sidecar; such a segment is scanned instead.
func (l *Log) loadSidecar(s *segment) (bool, error) {
	b, err := l.sr.readFile(l.dirfd, sidecarName(s.base), sidecarFixedSize+sidecarEntriesMax*sidecarEntrySize+8)
	if err != nil {
		return false, nil
	}
	sc, err := decodeSidecar(b)
	if err != nil || sc.base != s.base {
		return false, nil
	}
	var st unix.Stat_t
	if err := l.statSeg(s, &st); err != nil {
		return false, err
	}
	if st.Size < sc.size {
		return false, fmt.Errorf("%w: %s is %d bytes, its sidecar says %d were durable", ErrCorrupt, l.path(s.base), st.Size, sc.size)
	}
	if st.Size != sc.size {
		return false, nil
	}
	s.end, s.wEnd = sc.end, sc.end
	s.size, s.wSize, s.filled = sc.size, sc.size, sc.size
	s.digest, s.digestKnown, s.digestQueued = sc.digest, true, true
	s.maxTimestamp = sc.maxTimestamp
	s.index = sc.index
	s.sidecarSaved = true
	return true, nil
}

// scan reads s whole, checks it batch by batch and rebuilds its index, end and digest. On error it
// returns the byte position of the first bad batch; s then describes the valid prefix.
func (l *Log) scan(s *segment) (int64, error) {
	var st unix.Stat_t
	if err := l.statSeg(s, &st); err != nil {
		return 0, err
	}
	fd, err := l.segFd(s)
	if err != nil {
		return 0, err
	}
	buf := make([]byte, st.Size)
	n, err := l.sr.readAt(fd, buf, 0)
	if err != nil && n != len(buf) {
		return 0, fmt.Errorf("segment: read %s: %w", l.path(s.base), err)
	}
	s.index = s.index[:0]
	s.end, s.size, s.maxTimestamp = s.base, 0, 0
	var lastIndexed int64
	var scanErr error
	for int(s.size) < len(buf) {
		h, _, sz, err := DecodeBatch(buf[s.size:])
		if err == nil && h.BaseOffset != s.end {
			err = fmt.Errorf("%w: batch base %d, expected %d", ErrCorrupt, h.BaseOffset, s.end)
		}
		if err != nil {
			scanErr = err
			break
		}
		if len(s.index) == 0 || s.size-lastIndexed >= l.cfg.IndexIntervalBytes {
			s.index = append(s.index, indexEntry{offset: s.end, pos: s.size})
			lastIndexed = s.size
		}
		s.end = h.NextOffset()
		s.maxTimestamp = max(s.maxTimestamp, h.MaxTimestamp)
		s.size += int64(sz)
	}
	s.wEnd, s.wSize = s.end, s.size
	if scanErr != nil && allZero(buf[s.size:]) {
		// Zeros from the last batch to the end of the file: space prewritten ahead of the data
		// (Config.PrewriteBytes), or a file extended by a write that never landed. Neither holds
		// data that was ever acknowledged; the caller truncates it without calling it a cut.
		scanErr = errZeroTail
	}
	s.digest = xxhash.Sum64(buf[:s.size])
	s.digestKnown = scanErr == nil || scanErr == errZeroTail
	s.digestQueued = s.digestKnown
	s.filled = s.size
	return s.size, scanErr
}

// errZeroTail marks a scan that ended in zeros, not in a bad batch. It never leaves the package.
var errZeroTail = errors.New("segment: zero tail")

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// truncateZeroTail drops the zeros or stale bytes past a segment's last batch (see scan) and
// makes it durable, counting the bytes in count.
func (l *Log) truncateZeroTail(s *segment, pos int64, count *int64) error {
	var st unix.Stat_t
	if err := l.statSeg(s, &st); err != nil {
		return err
	}
	*count += st.Size - pos
	fd, err := l.segFd(s)
	if err != nil {
		return err
	}
	if err := l.sr.ftruncate(fd, pos); err != nil {
		return fmt.Errorf("segment: truncate %s: %w", l.path(s.base), err)
	}
	if err := l.sr.fsync(fd, false); err != nil {
		return fmt.Errorf("segment: fsync %s: %w", l.path(s.base), err)
	}
	return nil
}

// cutTail cuts a torn or corrupt tail found at byte pos of segment i: that segment is shortened to
// pos and every later segment removed. pos -1 removes segment i too.
func (l *Log) cutTail(i int, pos int64, rep *RecoveryReport) error {
	if pos < 0 {
		i--
		pos = l.segs[i].size
		assert.True(l.segs[i].size == l.segs[i].wSize, "segment: cut after an unscanned segment")
	}
	s := l.segs[i]
	var st unix.Stat_t
	if err := l.statSeg(s, &st); err != nil {
		return err
	}
	rep.CutFile, rep.CutPosition = l.path(s.base), pos
	rep.CutBytes += st.Size - pos
	for _, later := range l.segs[i+1:] {
		if err := l.statSeg(later, &st); err == nil {
			rep.CutBytes += st.Size
		}
		rep.CutSegments++
		if err := l.removeSegment(later); err != nil {
			return err
		}
	}
	l.segs = l.segs[:i+1]
	fd, err := l.segFd(s)
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
	l.log.Warn("segment: cut torn tail on open", "log", l.kind.String(), "file", rep.CutFile,
		"position", pos, "bytes_cut", rep.CutBytes, "segments_removed", rep.CutSegments, "tail", s.end)
	return nil
}
