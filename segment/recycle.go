package segment

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/ringstream/ringstream/ring"
)

// Recycling retired segments (Config.RecycleSegments). Retention renames a retired record
// segment to "<base>.spare" instead of unlinking it, keeping up to RecycleSegments of them; a
// roll then renames a spare to the new segment's name (RENAMEAT linked to OPENAT, in the group
// commit, whose directory fsync covers it) and the group commits overwrite blocks the file
// system has already allocated and written: no size change and no extent conversion to journal,
// as with prewritten zeros, without writing the zeros. The spare's old bytes past the data are
// what prewritten zeros are: a closed segment is cut back to its data before its digest and
// sidecar, and recovery truncates them (RecoveryReport.StaleTailBytes) where the next segment
// starts exactly where the valid batches end; in the last segment they are cut as a torn tail.
// Stale bytes can never pass for data: a spare only ever held offsets below the retained head.

// spare is a retired segment file kept for reuse.
type spare struct {
	name string
	size int64
}

const spareSuffix = ".spare"

func spareName(base uint64) string { return pad20(base) + spareSuffix }

// parseSpareName says whether name is a spare's.
func parseSpareName(name string) bool {
	if len(name) != 20+len(spareSuffix) || name[20:] != spareSuffix {
		return false
	}
	_, err := strconv.ParseUint(name[:20], 10, 64)
	return err == nil
}

// recycles says whether the log keeps retired segments for reuse.
func (l *Log) recycles() bool { return l.cfg.RecycleSegments > 0 }

// loadSpares adopts the spares found on open, up to the configured number, and removes the rest.
func (l *Log) loadSpares(entries []os.DirEntry) error {
	for _, e := range entries {
		if !parseSpareName(e.Name()) {
			continue
		}
		info, err := e.Info()
		if err == nil && l.recycles() && len(l.spares) < l.cfg.RecycleSegments {
			l.spares = append(l.spares, spare{name: e.Name(), size: info.Size()})
			continue
		}
		if err := l.sr.unlink(l.dirfd, e.Name(), false); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("segment: remove %s: %w", e.Name(), err)
		}
	}
	return nil
}

// retire removes a segment retention dropped: it becomes a spare when the pool has room and the
// file is worth reusing (at least half a segment), else it is unlinked. The caller fsyncs the
// directory.
func (l *Log) retire(s *segment) error {
	if !l.recycles() || len(l.spares) >= l.cfg.RecycleSegments || s.size < l.cfg.SegmentBytes/2 {
		return l.removeSegment(s)
	}
	if s.fd >= 0 {
		if err := l.sr.close(s.fd); err != nil {
			return fmt.Errorf("segment: close %s: %w", l.path(s.base), err)
		}
		s.fd = -1
	}
	if err := l.sr.unlink(l.dirfd, sidecarName(s.base), false); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("segment: remove %s: %w", sidecarName(s.base), err)
	}
	name := spareName(s.base)
	if err := l.sr.rename(l.dirfd, segmentName(s.base), l.dirfd, name); err != nil {
		return fmt.Errorf("segment: retire %s: %w", l.path(s.base), err)
	}
	l.spares = append(l.spares, spare{name: name, size: s.size})
	return nil
}

// takeSpare gives the oldest spare to the new segment s, if there is one.
func (l *Log) takeSpare(s *segment) bool {
	if !l.recycles() || len(l.spares) == 0 {
		return false
	}
	sp := l.spares[0]
	copy(l.spares, l.spares[1:])
	l.spares = l.spares[:len(l.spares)-1]
	s.spareName, s.spareSize = sp.name, sp.size
	return true
}

// queueRecycledOpen queues the rename of s's spare to s's name, linked to its open.
func (l *Log) queueRecycledOpen(i int, s *segment) error {
	err := l.r.RenameAt(l, makeTag(tagCommitRename, uint64(i)), l.dirfd, s.spareName, l.dirfd,
		segmentName(s.base), 0, ring.Link)
	if err != nil {
		return fmt.Errorf("queue renameat: %w", err)
	}
	l.commit.outstanding++
	err = l.r.Openat(l, makeTag(tagCommitOpen, uint64(i)), l.dirfd, segmentName(s.base), unix.O_RDWR|unix.O_CLOEXEC, 0, 0)
	if err != nil {
		return fmt.Errorf("queue openat: %w", err)
	}
	l.commit.outstanding++
	return nil
}
