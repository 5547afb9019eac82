package segment

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"

	"github.com/cespare/xxhash/v2"
	"golang.org/x/sys/unix"

	"github.com/ringstream/ringstream/internal/assert"
	"github.com/ringstream/ringstream/ring"
)

// ringEntriesMin is the smallest ring a log works with: one group commit of one file takes three
// operations (writev, fdatasync, directory fsync).
const ringEntriesMin = 4

// LogKind names one of a copy's two logs.
type LogKind uint8

const (
	// RecordLog holds the stream's records.
	RecordLog LogKind = 1
	// CursorLog holds consumer cursor events.
	CursorLog LogKind = 2
)

func (k LogKind) String() string {
	if k == RecordLog {
		return "records"
	}
	return "cursors"
}

// segment is one file of a log. The fields without a w prefix describe durable bytes; the w
// fields include bytes queued or in flight.
type segment struct {
	base          uint64 // offset of the first record
	end           uint64 // offset after the last durable record
	size          int64  // durable bytes
	wEnd          uint64 // offset after the last queued record
	wSize         int64  // bytes including queued ones
	fd            int    // -1 until the file is created, and for a closed segment nothing uses
	readers       int    // reads in flight on fd
	digestPending bool   // closed by a roll, its closing digest (and sidecar) to come, queued or running: fd stays open
	index         []indexEntry
	maxTimestamp  int64  // largest batch max timestamp (retention age)
	digest        uint64 // xxhash64 of the whole file, valid when digestKnown
	digestKnown   bool
	digestQueued  bool
	sidecarSaved  bool
	filled        int64  // bytes of the file known written: data, prewritten zeros, a spare's old bytes
	spareName     string // the spare this new segment's file is renamed from (recycling), until open
	spareSize     int64
	// runSum is the xxhash64 of the runSize bytes this log queued into s from its first byte on,
	// taken when a roll closed s (runKnown): its closing digest, without reading the file back.
	runSum   uint64
	runSize  int64
	runKnown bool
}

// active says whether s is the log's last segment, the one appends go to; every other segment is
// closed: nothing more is written to it.
func (l *Log) active(s *segment) bool { return s == l.segs[len(l.segs)-1] }

// Log is one segmented log of a copy. Its methods run on the shard goroutine that owns its ring.
type Log struct {
	kind   LogKind
	cfg    Config
	log    *slog.Logger
	r      ring.Ring
	sr     *syncRing
	events Events
	dir    string
	dirfd  int
	opsMax int

	segs     []*segment
	next     uint64 // offset the next append receives
	durable  uint64 // durable tail
	failed   error
	shut     bool
	held     bool   // the copy runs an exclusive rare operation: appends and reads get ErrBusy
	minEpoch uint64 // the copy's fence: appends from lower epochs are refused

	quiet  quietListener // told when a group commit ends (the copy's seal waits for it)
	broken brokenRules   // test-only bugs (export_test.go); zero otherwise
	spares []spare       // retired segments kept for reuse, oldest first

	commit   commitState
	reads    readTable
	closing  int // closes of closed segments' descriptors in flight
	dig      digestState
	run      runDigest
	pw       prewriteState
	pk       parkState
	activity *uint64 // the copy's count of appends, reads and seals (Copy.Activity); nil: none
}

// Head is the retained head: the lowest offset still in the log.
func (l *Log) Head() uint64 { return l.segs[0].base }

// DurableTail is the offset after the last durable record.
func (l *Log) DurableTail() uint64 { return l.durable }

// NextOffset is the offset the next append receives (durable tail plus queued records).
func (l *Log) NextOffset() uint64 { return l.next }

// Segments is the number of segment files.
func (l *Log) Segments() int { return len(l.segs) }

// SizeBytes is the durable size of the retained log.
func (l *Log) SizeBytes() int64 {
	var n int64
	for _, s := range l.segs {
		n += s.size
	}
	return n
}

// RecoveryReport says what open found and did to one log.
type RecoveryReport struct {
	Segments      int    // segment files kept
	Scanned       int    // segments scanned batch by batch (no valid sidecar, or the tail)
	CutBytes      int64  // bytes cut from a torn or corrupt tail
	CutSegments   int    // whole segment files removed past the torn point
	CutFile       string // the file where the cut happened, if any
	CutPosition   int64  // byte position of the cut in CutFile
	IndexRebuilds int    // sidecars rebuilt
	ZeroTailBytes int64  // zeros past the last batch of a segment (prewritten space), truncated
	// StaleTailBytes: bytes past the last batch of a segment the next one follows exactly (a
	// recycled file's old bytes), truncated.
	StaleTailBytes int64
}

// openLog opens or creates the log in the directory name under parentDir and recovers its tail.
// A directory it creates sets *created: the caller fsyncs parentDir before the log is used.
func openLog(kind LogKind, r ring.Ring, sr *syncRing, parentDir, name string, cfg Config, ev Events, created *bool) (*Log, RecoveryReport, error) {
	var rep RecoveryReport
	dir := filepath.Join(parentDir, name)
	made, err := sr.makeDir(unix.AT_FDCWD, dir)
	if err != nil {
		return nil, rep, err
	}
	*created = *created || made
	dirfd, err := sr.openat(unix.AT_FDCWD, dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, rep, fmt.Errorf("segment: open dir %s: %w", dir, err)
	}
	l := &Log{kind: kind, cfg: cfg, log: cfg.Logger, r: r, sr: sr, events: ev, dir: dir, dirfd: dirfd}
	if kind == CursorLog {
		l.cfg.RecycleSegments = -1 // cursor segments are small and rarely retired
	}
	l.opsMax = int(r.Info().SQEntries)
	if l.opsMax < ringEntriesMin {
		_ = sr.close(dirfd)
		return nil, rep, fmt.Errorf("%w: the ring has %d submission entries, fewer than %d", ErrConfig, l.opsMax, ringEntriesMin)
	}
	l.commit.init(cfg)
	l.reads.init(cfg.ReadsMax)
	l.dig.init()
	l.run.h = xxhash.New()
	if err := l.load(&rep); err != nil {
		l.closeFiles()
		return nil, rep, err
	}
	l.durable = l.segs[len(l.segs)-1].end
	l.next = l.durable
	rep.Segments = len(l.segs)
	return l, rep, nil
}

// load lists the segment files, loads sidecars and recovers the tail.
func (l *Log) load(rep *RecoveryReport) error {
	entries, err := os.ReadDir(l.dir)
	if err != nil {
		return fmt.Errorf("segment: list %s: %w", l.dir, err)
	}
	var bases []uint64
	for _, e := range entries {
		if b, ok := parseSegmentName(e.Name()); ok {
			bases = append(bases, b)
		}
	}
	slices.Sort(bases)
	if err := l.loadSpares(entries); err != nil {
		return err
	}
	if len(bases) == 0 {
		return l.createFirst()
	}
	for _, b := range bases {
		// Opened when recovery reads or changes one (segFd); only the active one stays open.
		l.segs = append(l.segs, &segment{base: b, fd: -1})
	}
	last := l.segs[len(l.segs)-1]
	if err := l.sr.unlink(l.dirfd, sidecarName(last.base), false); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("segment: remove stale %s: %w", sidecarName(last.base), err)
	}
	// Settled segments have a valid sidecar: every byte was durable when it was written.
	settled := -1
	for i, s := range l.segs[:len(l.segs)-1] {
		ok, err := l.loadSidecar(s)
		if err != nil {
			return err
		}
		if ok {
			settled = i
		}
	}
	if err := l.recoverTail(settled, rep); err != nil {
		return err
	}
	// Closed segments without a sidecar (scanned above) get one now; the last segment is active:
	// it has none and its digest is computed when it closes.
	for _, s := range l.segs[:len(l.segs)-1] {
		if !s.sidecarSaved {
			rep.IndexRebuilds++
			l.saveSidecarSync(s)
		}
	}
	last = l.segs[len(l.segs)-1]
	if last.sidecarSaved {
		if err := l.sr.unlink(l.dirfd, sidecarName(last.base), false); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("segment: remove %s: %w", sidecarName(last.base), err)
		}
	}
	last.digestKnown, last.digestQueued, last.sidecarSaved = false, false, false
	if last.size == 0 {
		l.runStart(last) // empty: every byte it will hold is queued from now on
	}
	l.reserveIndex(last)
	if _, err := l.segFd(last); err != nil {
		return err
	}
	l.closeIdle()
	return nil
}

// closeIdle closes, on a rare path, the descriptor of every closed segment that nothing uses:
// closed segments are opened when read (see Read) or when a rare path needs them (segFd).
func (l *Log) closeIdle() {
	for _, s := range l.segs {
		if !l.active(s) && s.fd >= 0 && s.readers == 0 && !s.digestPending && !l.commitUses(s) {
			if err := l.sr.close(s.fd); err != nil {
				l.log.Warn("segment: close failed", "file", l.path(s.base), "err", err)
			}
			s.fd = -1
		}
	}
}

// createFirst creates the first, empty segment of a new log at offset 0.
func (l *Log) createFirst() error {
	fd, err := l.sr.openat(l.dirfd, segmentName(0), unix.O_RDWR|unix.O_CREAT|unix.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("segment: create %s: %w", l.path(0), err)
	}
	l.segs = append(l.segs, &segment{fd: fd})
	l.reserveIndex(l.segs[0])
	l.runStart(l.segs[0])
	if err := l.sr.fsync(l.dirfd, false); err != nil {
		return fmt.Errorf("segment: fsync %s: %w", l.dir, err)
	}
	return nil
}

// removeSegment closes and unlinks s and its sidecar through the ring. The caller fsyncs the
// directory.
func (l *Log) removeSegment(s *segment) error {
	if s.fd >= 0 {
		if err := l.sr.close(s.fd); err != nil {
			return fmt.Errorf("segment: close %s: %w", l.path(s.base), err)
		}
		s.fd = -1
	}
	if err := l.sr.unlink(l.dirfd, sidecarName(s.base), false); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("segment: remove %s: %w", sidecarName(s.base), err)
	}
	if err := l.sr.unlink(l.dirfd, segmentName(s.base), false); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("segment: remove %s: %w", l.path(s.base), err)
	}
	return nil
}

// saveSidecarSync writes s's sidecar on a rare path (open). Failing to write it only costs a
// rescan at the next open, so the error is logged, not returned.
func (l *Log) saveSidecarSync(s *segment) {
	assert.True(s.digestKnown, "segment: sidecar without digest")
	b := encodeSidecar(s)
	fd, err := l.sr.openat(l.dirfd, sidecarName(s.base), unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC, 0o644)
	if err == nil {
		err = l.sr.writeAt(fd, b, 0)
		if cerr := l.sr.close(fd); err == nil {
			err = cerr
		}
	}
	if err != nil {
		l.log.Warn("segment: sidecar not saved", "file", sidecarName(s.base), "err", err)
		return
	}
	s.sidecarSaved = true
}

func (l *Log) path(base uint64) string { return filepath.Join(l.dir, segmentName(base)) }

// closeFiles closes every fd the log holds (rare path).
func (l *Log) closeFiles() {
	for _, s := range l.segs {
		if s.fd >= 0 {
			_ = l.sr.close(s.fd)
			s.fd = -1
		}
	}
	if l.dirfd >= 0 {
		_ = l.sr.close(l.dirfd)
		l.dirfd = -1
	}
}

// findSegment returns the index of the segment holding offset off (off < its wEnd), or the last
// segment when off is the log's end.
func (l *Log) findSegment(off uint64) int {
	i, found := slices.BinarySearchFunc(l.segs, off, func(s *segment, off uint64) int {
		switch {
		case s.base > off:
			return 1
		case s.base < off:
			return -1
		}
		return 0
	})
	if found {
		// Empty segments can share a base with the next one only transiently; take the last.
		for i+1 < len(l.segs) && l.segs[i+1].base == off {
			i++
		}
		return i
	}
	return i - 1
}

// indexPos returns the position of the last index entry at or below off in s.
func indexPos(s *segment, off uint64) (uint64, int64) {
	i, found := slices.BinarySearchFunc(s.index, off, func(e indexEntry, off uint64) int {
		switch {
		case e.offset > off:
			return 1
		case e.offset < off:
			return -1
		}
		return 0
	})
	if !found {
		i--
	}
	if i < 0 {
		return s.base, 0
	}
	return s.index[i].offset, s.index[i].pos
}
