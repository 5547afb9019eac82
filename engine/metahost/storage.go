package metahost

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ringstream/ringstream/engine/vsr"
	"github.com/ringstream/ringstream/internal/assert"
	"github.com/ringstream/ringstream/ring"
)

// ErrStorage: the metadata group's storage could not be opened or a persist failed. After a failed
// persist the replica acknowledges nothing more (its held messages never leave); the node must restart.
var ErrStorage = errors.New("engine: metadata storage")

// ErrUnformatted: the metadata directory holds no formatted replica: it was never formatted, or its
// disk was lost. The error says which command makes it usable.
var ErrUnformatted = errors.New("engine: metadata storage not formatted")

// File names of the metadata group's storage under its directory (the format is engine/vsr's).
const (
	metaLogFile      = "log" // the superblock copies' header area, then the log records
	metaSnapshotFile = "snapshot.%d"
	// metaLegacySuperblockFile held the copies before they moved into the log file's header; open
	// names it when it finds one, rather than calling the directory unformatted.
	metaLegacySuperblockFile = "superblock"
)

// metaHeaderSize is the log file's header area: vsr.SuperblockSlots copy slots of vsr.CopySlotSize
// bytes (two areas of vsr.SuperblockCopies), each copy at the start of its slot, so one bad page
// damages one copy. The log records start after it.
const metaHeaderSize = vsr.SuperblockSlots * vsr.CopySlotSize

// metaPersist is one vsr persist as bytes, in the order written: snapshot slot, log append, superblock
// copy (the same bytes to every copy slot of area). copy carries the log records inline unless split:
// then the log is synced before the copies are written. The slices lie in buf, which goes back to the
// store's free list once written.
type metaPersist struct {
	buf      []byte
	id       uint64
	snapshot []byte
	snapSlot int
	snapOp   uint64 // the checkpoint the superblock names: log records at or below it are dead
	log      []byte
	copy     []byte
	area     int
	split    bool
}

// metaStore keeps the metadata group's files. After open it lives on shard 0's goroutine: persists
// queue on the shard's ring (one linked chain each, one chain in flight at a time, in order) and their
// completions come back to the store's Complete in the shard's loop. Nothing in it is locked.
type metaStore struct {
	dir          string
	dirFD        int // the directory, for the fsync after compaction's rename
	logFD        int // the log file: header area, then records
	snapFD       [2]int
	logEnd       int64 // where the next log append goes, from the end of the header area
	compactBytes int64 // a log past this size is rewritten without its dead records after a checkpoint
	log          *slog.Logger

	rg      ring.Ring           // shard 0's ring, from the group's first tick; nil before
	queue   []metaPersist       // persists waiting for the ring, oldest first
	stage   metaStage           // what the chain in flight is, if any
	cur     metaPersist         // the persist whose chain (or compaction) is in flight
	pending int                 // completions of the chain in flight not yet dispatched
	want    [metaChainMax]int32 // byte count each write or read of the chain must report, by tag
	opErr   error               // the chain's first failure
	compact metaCompaction
	free    [][]byte // written persists' buffers, for reuse

	done   uint64 // highest persist id durable
	failed error  // the first failure: nothing is queued after it

	observe  func(time.Duration) // Group.SetPersistObserver (nil: none)
	queuedAt time.Time           // when the chain in flight was queued (only with observe)

	// Deliberately wrong variants, set only by tests to prove the power-loss tests catch them:
	// brokenNoSync, a persist without its (last) fdatasync; brokenNoDirSync, a compaction without the
	// directory fsync after its rename; brokenNoInline, copies that do not carry the persist's records
	// (Group.persist reads it); brokenNoLogRepair, an open that does not append the records only
	// the copy in force holds.
	brokenNoSync      bool
	brokenNoDirSync   bool
	brokenNoInline    bool
	brokenNoLogRepair bool
	// twoSync (benchmarks only, and safe): every persist takes the split path, the log synced before
	// the copies, which is what a persist cost before one fdatasync per persist.
	twoSync bool
}

// metaChainMax is the longest persist chain: snapshot write and fsync, log write, fdatasync (split),
// the copies' writes, fdatasync.
const metaChainMax = 5 + vsr.SuperblockCopies

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
	if s.observe != nil {
		s.queuedAt = time.Now()
	}
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

// queuePersist queues p's chain, each step linked to the next, so a step starts only after the one
// before it succeeded: the snapshot's write and fsync (a checkpoint); the log append; an fdatasync when
// p is split (its records too large to go inline); the copy written to every slot of its area; one
// fdatasync, which makes the log append and the copies durable together. It queues nothing unless the
// ring has room for the whole chain, and returns how many it queued.
func (s *metaStore) queuePersist(p metaPersist) (int, error) {
	type step struct {
		write bool
		fd    int
		buf   []byte
		off   int64
	}
	var steps [metaChainMax]step
	n := 0
	add := func(st step) { steps[n] = st; n++ }
	if p.snapshot != nil {
		add(step{true, s.snapFD[p.snapSlot], p.snapshot, 0})
		add(step{false, s.snapFD[p.snapSlot], nil, 0})
	}
	if p.log != nil {
		add(step{true, s.logFD, p.log, metaHeaderSize + s.logEnd})
		if p.split {
			add(step{false, s.logFD, nil, 0})
		}
	}
	for c := 0; c < vsr.SuperblockCopies; c++ {
		add(step{true, s.logFD, p.copy, int64((p.area*vsr.SuperblockCopies + c) * vsr.CopySlotSize)})
	}
	if !s.brokenNoSync {
		add(step{false, s.logFD, nil, 0})
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
			s.fail(p.id, fmt.Errorf("%w: persist %d: %w", ErrStorage, p.id, err))
			return
		}
		s.done = p.id
		if s.observe != nil {
			s.observe(time.Since(s.queuedAt))
		}
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
			s.fail(s.cur.id, fmt.Errorf("%w: compact: %s: %w", ErrStorage, stage, err))
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
