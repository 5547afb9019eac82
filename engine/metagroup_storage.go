package engine

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/ringstream/ringstream/engine/vsr"
	"github.com/ringstream/ringstream/internal/assert"
	"github.com/ringstream/ringstream/ring"
)

// ErrMetaStorage: the metadata group's storage could not be opened or a persist failed. After a failed
// persist the replica acknowledges nothing more (its held messages never leave); the node must restart.
var ErrMetaStorage = errors.New("engine: metadata storage")

// ErrMetaUnformatted: the metadata directory holds no formatted replica: it was never formatted, or its
// disk was lost. The error says which command makes it usable.
var ErrMetaUnformatted = errors.New("engine: metadata storage not formatted")

// File names of the metadata group's storage under its directory (the format is engine/vsr's).
const (
	metaLogFile        = "log"
	metaSuperblockFile = "superblock" // vsr.SuperblockCopies copies, each at the start of its own 4 KiB
	metaSnapshotFile   = "snapshot.%d"
)

// metaSuperblockStride is the distance between two superblock copies in their file: one page, so one
// bad sector or page damages one copy.
const metaSuperblockStride = 4096

// metaPersist is one vsr persist as bytes, in the order written: snapshot slot, log append, superblock
// copies (one write from offset 0: every copy, each at the start of its own metaSuperblockStride).
// The three slices lie in buf, which goes back to the store's free list once written.
type metaPersist struct {
	buf      []byte
	id       uint64
	snapshot []byte
	snapSlot int
	snapOp   uint64 // the checkpoint the superblock names: log records at or below it are dead
	log      []byte
	sb       []byte
}

// metaStore keeps the metadata group's files. After open it lives on shard 0's goroutine: persists
// queue on the shard's ring (one linked chain each, one chain in flight at a time, in order) and their
// completions come back to the store's Complete in the shard's loop. Nothing in it is locked.
type metaStore struct {
	dir          string
	dirFD        int // the directory, for the fsync after compaction's rename
	logFD, sbFD  int
	snapFD       [2]int
	logEnd       int64 // where the next log append goes
	compactBytes int64 // a log past this size is rewritten without its dead records after a checkpoint
	log          *slog.Logger

	rg      ring.Ring     // shard 0's ring, from the group's first tick; nil before
	queue   []metaPersist // persists waiting for the ring, oldest first
	stage   metaStage     // what the chain in flight is, if any
	cur     metaPersist   // the persist whose chain (or compaction) is in flight
	pending int           // completions of the chain in flight not yet dispatched
	want    [6]int32      // byte count each write or read of the chain must report, by tag
	opErr   error         // the chain's first failure
	compact metaCompaction
	free    [][]byte // written persists' buffers, for reuse

	done   uint64 // highest persist id durable
	failed error  // the first failure: nothing is queued after it

	// brokenNoSuperblockSync is a deliberately wrong persist (no fdatasync after the superblock
	// write), and brokenNoDirSync a compaction without the directory fsync after its rename; set only
	// by tests, to prove the power-loss tests catch them.
	brokenNoSuperblockSync bool
	brokenNoDirSync        bool
}

// metaStage is what the store has on the ring.
type metaStage uint8

const (
	stageIdle          metaStage = iota // nothing in flight
	stagePersist                        // a persist's chain of writes and fdatasyncs
	stageCompactRead                    // compaction: reading the log
	stageCompactOpen                    // compaction: opening log.new
	stageCompactWrite                   // compaction: log.new's write and fdatasync
	stageCompactRename                  // compaction: log.new renamed over the log, directory fsync
)

func (st metaStage) String() string {
	switch st {
	case stageCompactRead:
		return "read the log"
	case stageCompactOpen:
		return "open " + metaLogFile + ".new"
	case stageCompactWrite:
		return "write " + metaLogFile + ".new"
	case stageCompactRename:
		return "rename " + metaLogFile + ".new"
	}
	return "persist"
}

// metaCompaction is the state of a log rewrite in flight.
type metaCompaction struct {
	snapOp uint64 // records at or below it are dead
	old    []byte // the log as read
	kept   []byte // the records past snapOp
	fd     int    // log.new
}

// metaFreeMax bounds the written persists' buffers kept for reuse.
const metaFreeMax = 8

// openMetaStore reads dir, recovers the durable state and cuts the log's torn tail. The directory must
// have been formatted (FormatMeta) for id: a missing or empty directory is ErrMetaUnformatted, never a
// new replica. It runs before the shard starts: the reads are plain syscalls on the opening goroutine.
func openMetaStore(dir string, id vsr.Identity, compactBytes int64, logger *slog.Logger) (*metaStore, vsr.Durable, error) {
	var sbs [vsr.SuperblockCopies][]byte
	var snaps [2][]byte
	sbBytes, err := readOptional(filepath.Join(dir, metaSuperblockFile))
	if err != nil {
		return nil, vsr.Durable{}, err
	}
	for i := range sbs {
		if off := i * metaSuperblockStride; len(sbBytes) >= off+vsr.SuperblockSize {
			sbs[i] = sbBytes[off : off+vsr.SuperblockSize]
		}
	}
	for i := range snaps {
		if snaps[i], err = readOptional(filepath.Join(dir, fmt.Sprintf(metaSnapshotFile, i))); err != nil {
			return nil, vsr.Durable{}, err
		}
	}
	logBytes, err := readOptional(filepath.Join(dir, metaLogFile))
	if err != nil {
		return nil, vsr.Durable{}, err
	}
	d, valid, err := vsr.Recover(sbs, snaps, logBytes)
	if errors.Is(err, vsr.ErrUnformatted) {
		return nil, vsr.Durable{}, fmt.Errorf("%w: %s holds no superblock (%w): format it with `ringstream format`, "+
			"with --recover if this replica's disk was lost or replaced", ErrMetaUnformatted, dir, err)
	}
	if err != nil {
		return nil, vsr.Durable{}, fmt.Errorf("%w: %w", ErrMetaStorage, err)
	}
	if got := d.Superblock.Identity; got.Cluster != id.Cluster || got.Node != id.Node || got.Replica != id.Replica {
		return nil, vsr.Durable{}, fmt.Errorf("%w: %s was formatted for cluster %d node %d replica %d, not cluster %d "+
			"node %d replica %d", ErrMetaStorage, dir, got.Cluster, got.Node, got.Replica, id.Cluster, id.Node, id.Replica)
	}
	s := &metaStore{dir: dir, compactBytes: compactBytes, dirFD: -1, logFD: -1, sbFD: -1, snapFD: [2]int{-1, -1},
		log: logger, compact: metaCompaction{fd: -1}}
	if err := s.openFiles(dir, int64(valid)); err != nil {
		s.closeFiles()
		return nil, vsr.Durable{}, err
	}
	if err := s.repairSuperblocks(sbs, d); err != nil {
		s.closeFiles()
		return nil, vsr.Durable{}, err
	}
	return s, d, nil
}

// repairSuperblocks rewrites every superblock copy that differs from the superblock in force with its
// bytes, then fdatasyncs the file, before the replica acts. A crash in the middle of a persist's copies
// leaves some copies new, one torn and the rest old; left so, the superblock in force may be held by
// two copies only, and a crash during the next persist's copies can leave no two copies alike: the
// replica would recover from the group a state it never lost. After the repair every copy holds the
// superblock in force, so one more torn copy still leaves a quorum. Storage whose state Recover could
// not prove (d.Cause set: no quorum, or the state it names is missing) is left as it is: the replica
// recovers, and its first persist rewrites every copy.
func (s *metaStore) repairSuperblocks(copies [vsr.SuperblockCopies][]byte, d vsr.Durable) error {
	if d.Cause != nil {
		return nil
	}
	want := vsr.AppendSuperblock(make([]byte, 0, vsr.SuperblockSize), d.Superblock)
	repaired := 0
	for i, b := range copies {
		if string(b) == string(want) {
			continue
		}
		n, err := unix.Pwrite(s.sbFD, want, int64(i*metaSuperblockStride))
		if err == nil && n != len(want) {
			err = errShortWrite
		}
		if err != nil {
			return fmt.Errorf("%w: repair superblock copy %d: %w", ErrMetaStorage, i, err)
		}
		repaired++
	}
	if repaired == 0 {
		return nil
	}
	if err := unix.Fdatasync(s.sbFD); err != nil {
		return fmt.Errorf("%w: repair superblock copies: %w", ErrMetaStorage, err)
	}
	s.log.Info("metadata storage: superblock copies repaired at open", "copies", repaired,
		"sequence", d.Superblock.Sequence, "op", d.Superblock.Op)
	return nil
}

func readOptional(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMetaStorage, err)
	}
	return b, nil
}

// openFiles opens the four files and cuts the log to its valid prefix.
func (s *metaStore) openFiles(dir string, logValid int64) error {
	open := func(name string) (int, error) {
		// No O_CREAT: the format step made every file and synced the directory.
		fd, err := unix.Open(filepath.Join(dir, name), unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1, fmt.Errorf("%w: open %s: %w", ErrMetaStorage, name, err)
		}
		return fd, nil
	}
	var err error
	if s.dirFD, err = unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
		return fmt.Errorf("%w: open %s: %w", ErrMetaStorage, dir, err)
	}
	if s.logFD, err = open(metaLogFile); err != nil {
		return err
	}
	if s.sbFD, err = open(metaSuperblockFile); err != nil {
		return err
	}
	for i := range s.snapFD {
		if s.snapFD[i], err = open(fmt.Sprintf(metaSnapshotFile, i)); err != nil {
			return err
		}
	}
	if err := unix.Ftruncate(s.logFD, logValid); err != nil {
		return fmt.Errorf("%w: cut the log's torn tail: %w", ErrMetaStorage, err)
	}
	if err := unix.Fdatasync(s.logFD); err != nil {
		return fmt.Errorf("%w: %w", ErrMetaStorage, err)
	}
	s.logEnd = logValid
	return nil
}

func (s *metaStore) closeFiles() {
	for _, fd := range []int{s.dirFD, s.logFD, s.sbFD, s.snapFD[0], s.snapFD[1], s.compact.fd} {
		if fd >= 0 {
			_ = unix.Close(fd)
		}
	}
	s.dirFD, s.logFD, s.sbFD, s.snapFD, s.compact.fd = -1, -1, -1, [2]int{-1, -1}, -1
}

// attach hands the store the shard's ring (shard goroutine, from the group's first tick on).
func (s *metaStore) attach(rg ring.Ring) { s.rg = rg }

// submit queues a persist behind the ones before it and starts it when the ring is free. After a
// failure it drops the persist: nothing more becomes durable.
func (s *metaStore) submit(p metaPersist) {
	if s.failed != nil {
		return
	}
	s.queue = append(s.queue, p)
	s.kick()
}

// buffer returns a written persist's buffer for reuse, or nil when none is free.
func (s *metaStore) buffer() []byte {
	if n := len(s.free); n > 0 {
		b := s.free[n-1]
		s.free = s.free[:n-1]
		return b[:0]
	}
	return nil
}

// durable returns the highest persist id on disk and the first failure, if any.
func (s *metaStore) durable() (uint64, error) { return s.done, s.failed }

// close closes the files. Call it after the shard stopped: its drain waited for every operation
// queued on its ring, so no chain of the store is in flight. Calling it again does nothing.
func (s *metaStore) close() { s.closeFiles() }

// errShortWrite: a write wrote fewer bytes than asked. errShortRead: a read of the log for compaction
// read fewer bytes than the log holds.
var (
	errShortWrite = errors.New("short write")
	errShortRead  = errors.New("short read")
)

// kick starts the next queued persist when nothing is in flight. It runs on the shard goroutine (a
// tick, a submit, or the completion of the chain before). When the ring has no room, the persist stays
// queued and the next tick tries again.
func (s *metaStore) kick() {
	if s.rg == nil || s.stage != stageIdle || s.failed != nil || len(s.queue) == 0 {
		return
	}
	p := s.queue[0]
	queued, err := s.queuePersist(p)
	if errors.Is(err, ring.ErrQueueFull) && queued == 0 {
		return // nothing queued: the next tick tries again
	}
	n := copy(s.queue, s.queue[1:]) // shift in place, so the queue's array is reused
	s.queue[n] = metaPersist{}
	s.queue = s.queue[:n]
	s.cur, s.stage = p, stagePersist
	if err != nil {
		// Part of the chain is queued and the rest could not be: the persist cannot complete as one
		// chain. It fails once the queued part has completed.
		s.opErr = fmt.Errorf("queue persist %d: %w", p.id, err)
		s.pending = queued
		if queued == 0 {
			s.finish()
		}
		return
	}
	if _, err := s.rg.Submit(); err != nil {
		s.log.Warn("metadata persist: submit", "persist", p.id, "err", err) // the shard's Wait submits again
	}
}

// queuePersist queues p's chain: snapshot write, fsync, log write, fdatasync, superblock write,
// fdatasync, each linked to the next, so a step starts only after the one before it succeeded. It
// queues nothing unless the ring has room for the whole chain, and returns how many it queued.
func (s *metaStore) queuePersist(p metaPersist) (int, error) {
	type step struct {
		write bool
		fd    int
		buf   []byte
		off   int64
	}
	var steps [6]step
	n := 0
	if p.snapshot != nil {
		steps[n], steps[n+1] = step{true, s.snapFD[p.snapSlot], p.snapshot, 0}, step{false, s.snapFD[p.snapSlot], nil, 0}
		n += 2
	}
	if p.log != nil {
		steps[n], steps[n+1] = step{true, s.logFD, p.log, s.logEnd}, step{false, s.logFD, nil, 0}
		n += 2
	}
	steps[n], steps[n+1] = step{true, s.sbFD, p.sb, 0}, step{false, s.sbFD, nil, 0}
	n += 2
	if s.brokenNoSuperblockSync {
		n-- // the broken variant: the superblock copies are written and never synced
	}
	if s.rg.InFlight()+n > int(s.rg.Info().SQEntries) {
		return 0, ring.ErrQueueFull
	}
	s.opErr, s.pending = nil, 0
	for i := 0; i < n; i++ {
		fl := ring.Link
		if i == n-1 {
			fl = 0
		}
		st := steps[i]
		var err error
		if st.write {
			s.want[i] = int32(len(st.buf))
			err = s.rg.Write(s, uint64(i), st.fd, st.buf, st.off, fl)
		} else {
			err = s.rg.Fsync(s, uint64(i), st.fd, true, fl)
		}
		if err != nil {
			return i, err
		}
		s.pending++
	}
	return n, nil
}

// Complete receives the completions of the store's chains on the shard goroutine. The chain is over
// when its last completion arrives (a failed step cancels the rest, which still complete).
func (s *metaStore) Complete(c ring.Completion) {
	assert.True(s.stage != stageIdle && s.pending > 0, "engine: metadata store completion with nothing in flight")
	s.pending--
	err := c.Err()
	if err == nil && c.Op == ring.OpWrite && c.Res != s.want[c.Tag] {
		err = errShortWrite
	}
	if err == nil && c.Op == ring.OpRead && c.Res != s.want[c.Tag] {
		err = errShortRead
	}
	if err == nil && c.Op == ring.OpOpenat {
		s.compact.fd = int(c.Res)
	}
	if err != nil && s.opErr == nil {
		s.opErr = err
	}
	if s.pending == 0 {
		s.finish()
	}
}

// finish ends the chain that just completed and starts what comes next: the compaction after a
// checkpoint, or the next persist.
func (s *metaStore) finish() {
	stage, err := s.stage, s.opErr
	s.stage, s.opErr = stageIdle, nil
	switch stage {
	case stagePersist:
		p := s.cur
		if err != nil {
			s.fail(p.id, fmt.Errorf("%w: persist %d: %w", ErrMetaStorage, p.id, err))
			return
		}
		s.done = p.id
		s.logEnd += int64(len(p.log))
		s.cur = metaPersist{}
		if len(s.free) < metaFreeMax {
			s.free = append(s.free, p.buf)
		}
		if p.snapshot != nil && s.logEnd > s.compactBytes {
			s.startCompaction(p.id, p.snapOp)
			return
		}
	default:
		if err != nil {
			s.fail(s.cur.id, fmt.Errorf("%w: compact: %s: %w", ErrMetaStorage, stage, err))
			return
		}
		if s.nextCompactionStage(stage) {
			return
		}
	}
	s.kick()
}

// fail records the store's first failure: the replica acknowledges nothing more, and nothing more is
// queued.
func (s *metaStore) fail(id uint64, err error) {
	if s.failed == nil {
		s.failed = err
		s.log.Error("metadata persist failed; the replica acknowledges nothing more", "persist", id, "err", err)
	}
	s.queue = nil
}

func syncDir(dir string) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Fsync(fd)
}
