package segment

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/ringstream/ringstream/internal/assert"
	"github.com/ringstream/ringstream/ring"
)

// prewriteState writes zeros ahead of the active segment's data (Config.PrewriteBytes), so group
// commits land on blocks the file system has already allocated and written, and their fdatasync
// has no size change or extent conversion to journal. The zeros reach the disk with the next
// group commit's fdatasync. One zero write is in flight at a time; no group commit writes into
// its range until it completes (they would race), and a closed segment is digested only after
// it completes and the segment has been cut back to its data. A log prewrites only once it has
// been appended to since it opened: an idle copy writes no zeros (10,000 idle copies would have
// written 10 GB of them at each boot, recovery having cut the zero tail of the last run).
type prewriteState struct {
	zeros    []byte
	seg      *segment
	from, to int64
	armed    bool // an append was queued since open
	inFlight bool
	off      bool // disabled after a failed zero write; the log works on without it
}

// prewriteKick queues the next zero write when the active segment's written-ahead space runs
// below half a chunk.
func (l *Log) prewriteKick() {
	chunk := int64(l.cfg.PrewriteBytes)
	pw := &l.pw
	if chunk <= 0 || !pw.armed || pw.inFlight || pw.off || l.failed != nil || l.shut {
		return
	}
	s := l.segs[len(l.segs)-1]
	if s.fd < 0 {
		return
	}
	from := max(s.filled, s.wSize)
	if from-s.wSize >= chunk/2 {
		return
	}
	to := min(from+chunk, l.cfg.SegmentBytes)
	if to <= from || !l.room(1) {
		return
	}
	if pw.zeros == nil {
		pw.zeros = make([]byte, chunk)
	}
	if err := l.r.Write(l, makeTag(tagPrewrite, 0), s.fd, pw.zeros[:to-from], from, 0); err != nil {
		return // retried at the next kick
	}
	pw.seg, pw.from, pw.to, pw.inFlight = s, from, to, true
}

func (l *Log) onPrewrite(c ring.Completion) {
	pw := &l.pw
	assert.True(pw.inFlight, "segment: prewrite completion without write")
	pw.inFlight = false
	s := pw.seg
	pw.seg = nil
	if err := c.Err(); err != nil || int64(c.Res) != pw.to-pw.from {
		pw.off = true
		l.log.Warn("segment: prewrite failed, continuing without it", "log", l.kind.String(), "err", c.Err(), "res", c.Res)
	} else {
		s.filled = max(s.filled, pw.to)
	}
	l.digestKick()
	l.Flush()
}

// prewriteBlocks says whether a group commit writing [pos, end) of s must wait for the zero write
// in flight.
func (l *Log) prewriteBlocks(s *segment, pos, end int64) bool {
	pw := &l.pw
	return pw.inFlight && pw.seg == s && pos < pw.to && end > pw.from
}

// prewriteBusy says whether a zero write to s is in flight.
func (l *Log) prewriteBusy(s *segment) bool { return l.pw.inFlight && l.pw.seg == s }

// trimPrewritten cuts the active segment's file back to its data on a clean close, so the files a
// closed copy leaves hold exactly its batches. Synchronous (Close).
func (l *Log) trimPrewritten() error {
	s := l.segs[len(l.segs)-1]
	if s.filled <= s.size || (s.fd < 0 && !l.pk.parked) {
		return nil
	}
	fd := s.fd
	if fd < 0 { // a parked log: open the file for the truncate
		var err error
		if fd, err = l.sr.openat(unix.AT_FDCWD, l.path(s.base), unix.O_RDWR, 0); err != nil {
			return fmt.Errorf("segment: open %s: %w", l.path(s.base), err)
		}
		defer func() { _ = l.sr.close(fd) }()
	}
	if err := l.sr.ftruncate(fd, s.size); err != nil {
		return fmt.Errorf("segment: truncate %s: %w", l.path(s.base), err)
	}
	s.filled = s.size
	return nil
}
