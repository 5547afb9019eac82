package engine

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/ringstream/ringstream/engine/vsr"
	"github.com/ringstream/ringstream/ring"
)

// ErrMetaStorage: the metadata group's storage could not be opened or a persist failed. After a failed
// persist the replica acknowledges nothing more (its held messages never leave); the node must restart.
var ErrMetaStorage = errors.New("engine: metadata storage")

// File names of the metadata group's storage under its directory (the format is engine/vsr's).
const (
	metaLogFile        = "log"
	metaSuperblockFile = "superblock" // two slots of vsr.SuperblockSize, at 0 and vsr.SuperblockSize
	metaSnapshotFile   = "snapshot.%d"
)

// metaPersist is one vsr persist as bytes, in the order written: snapshot slot, log append, superblock.
// The three slices lie in buf, which goes back to the store's free list once written.
type metaPersist struct {
	buf      []byte
	id       uint64
	snapshot []byte
	snapSlot int
	snapOp   uint64 // the checkpoint the superblock names: log records at or below it are dead
	log      []byte
	sb       []byte
	sbSlot   int
}

// metaStore keeps the metadata group's files. Persists run on a writer goroutine with its own ring
// (locked to its thread, as every ring is); completions come back to the shard goroutine through
// done, which the group drains on each tick.
type metaStore struct {
	dir          string
	logFD, sbFD  int
	snapFD       [2]int
	logEnd       int64 // where the next log append goes (writer goroutine only, after open)
	compactBytes int64 // a log past this size is rewritten without its dead records after a checkpoint

	jobs      chan metaPersist
	free      chan []byte // written persists' buffers, for reuse
	wg        sync.WaitGroup
	closeOnce sync.Once
	log       *slog.Logger

	mu     sync.Mutex
	done   uint64 // highest persist id durable
	failed error
}

// openMetaStore reads dir (creating it), recovers the durable state and cuts the log's torn tail. It
// runs before the shard starts: the reads are plain syscalls on the opening goroutine.
func openMetaStore(dir string, compactBytes int64, rcfg ring.Config, logger *slog.Logger) (*metaStore, vsr.Durable, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, vsr.Durable{}, fmt.Errorf("%w: %w", ErrMetaStorage, err)
	}
	var sbs, snaps [2][]byte
	sbBytes, err := readOptional(filepath.Join(dir, metaSuperblockFile))
	if err != nil {
		return nil, vsr.Durable{}, err
	}
	for i := 0; i < 2; i++ {
		if len(sbBytes) >= (i+1)*vsr.SuperblockSize {
			sbs[i] = sbBytes[i*vsr.SuperblockSize : (i+1)*vsr.SuperblockSize]
		}
		if snaps[i], err = readOptional(filepath.Join(dir, fmt.Sprintf(metaSnapshotFile, i))); err != nil {
			return nil, vsr.Durable{}, err
		}
	}
	logBytes, err := readOptional(filepath.Join(dir, metaLogFile))
	if err != nil {
		return nil, vsr.Durable{}, err
	}
	d, valid, err := vsr.Recover(sbs, snaps, logBytes)
	if err != nil {
		return nil, vsr.Durable{}, fmt.Errorf("%w: %w", ErrMetaStorage, err)
	}
	s := &metaStore{dir: dir, compactBytes: compactBytes, logFD: -1, sbFD: -1, snapFD: [2]int{-1, -1},
		jobs: make(chan metaPersist, 256),
		free: make(chan []byte, 256), log: logger}
	if err := s.openFiles(dir, int64(valid)); err != nil {
		s.closeFiles()
		return nil, vsr.Durable{}, err
	}
	started := make(chan error, 1)
	s.wg.Add(1)
	go s.writer(rcfg, started)
	if err := <-started; err != nil {
		s.wg.Wait()
		s.closeFiles()
		return nil, vsr.Durable{}, err
	}
	return s, d, nil
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
		fd, err := unix.Open(filepath.Join(dir, name), unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC, 0o644)
		if err != nil {
			return -1, fmt.Errorf("%w: open %s: %w", ErrMetaStorage, name, err)
		}
		return fd, nil
	}
	var err error
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
	for _, fd := range []int{s.logFD, s.sbFD, s.snapFD[0], s.snapFD[1]} {
		if fd >= 0 {
			_ = unix.Close(fd)
		}
	}
}

// submit hands a persist to the writer. It never blocks the shard for long: the queue holds 256
// persists, far more than the replica's pipeline produces between two ticks.
func (s *metaStore) submit(p metaPersist) { s.jobs <- p }

// buffer returns a written persist's buffer for reuse, or nil when none is free.
func (s *metaStore) buffer() []byte {
	select {
	case b := <-s.free:
		return b[:0]
	default:
		return nil
	}
}

// durable returns the highest persist id on disk and the first failure, if any.
func (s *metaStore) durable() (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.done, s.failed
}

// close stops the writer after the persists queued so far and closes the files. Calling it again
// does nothing.
func (s *metaStore) close() {
	s.closeOnce.Do(func() {
		close(s.jobs)
		s.wg.Wait()
		s.closeFiles()
	})
}

// writerHandler collects the writer ring's completions.
type writerHandler struct {
	pending int
	want    [6]int32 // byte count each write must report
	err     error
}

// errShortWrite: a write wrote fewer bytes than asked.
var errShortWrite = errors.New("short write")

func (h *writerHandler) Complete(c ring.Completion) {
	h.pending--
	err := c.Err()
	if err == nil && c.Op == ring.OpWrite && c.Res != h.want[c.Tag] {
		err = errShortWrite
	}
	if err != nil && h.err == nil {
		h.err = err
	}
}

// writer is the persist goroutine: one ring on its locked thread; each persist is one linked chain
// (snapshot write, fsync, log write, fdatasync, superblock write, fdatasync), so a step starts only
// after the one before it succeeded.
func (s *metaStore) writer(rcfg ring.Config, started chan<- error) {
	defer s.wg.Done()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	rg, err := ring.New(rcfg)
	if err != nil {
		started <- fmt.Errorf("%w: writer ring: %w", ErrMetaStorage, err)
		return
	}
	defer rg.Close()
	started <- nil
	h := &writerHandler{}
	for p := range s.jobs {
		err := s.runPersist(rg, h, p)
		if err == nil {
			s.logEnd += int64(len(p.log))
			if p.snapshot != nil && s.logEnd > s.compactBytes {
				err = s.compact(p.snapOp)
			}
		}
		s.mu.Lock()
		if err != nil && s.failed == nil {
			s.failed = err
			s.log.Error("metadata persist failed; the replica acknowledges nothing more", "persist", p.id, "err", err)
		}
		if s.failed == nil {
			s.done = p.id
		}
		s.mu.Unlock()
		select {
		case s.free <- p.buf:
		default:
		}
	}
}

func (s *metaStore) runPersist(rg ring.Ring, h *writerHandler, p metaPersist) error {
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
	steps[n], steps[n+1] = step{true, s.sbFD, p.sb, int64(p.sbSlot * vsr.SuperblockSize)}, step{false, s.sbFD, nil, 0}
	n += 2
	*h = writerHandler{pending: n}
	for i := 0; i < n; i++ {
		fl := ring.Link
		if i == n-1 {
			fl = 0
		}
		st := steps[i]
		var err error
		if st.write {
			h.want[i] = int32(len(st.buf))
			err = rg.Write(h, uint64(i), st.fd, st.buf, st.off, fl)
		} else {
			err = rg.Fsync(h, uint64(i), st.fd, true, fl)
		}
		if err != nil {
			return fmt.Errorf("%w: queue persist %d: %w", ErrMetaStorage, p.id, err)
		}
	}
	for h.pending > 0 {
		if err := rg.Wait(1); err != nil {
			return fmt.Errorf("%w: wait: %w", ErrMetaStorage, err)
		}
		rg.Dispatch()
	}
	if h.err != nil {
		return fmt.Errorf("%w: persist %d: %w", ErrMetaStorage, p.id, h.err)
	}
	return nil
}

// compact rewrites the log without the records at or below the checkpoint op that the durable
// superblock names: write log.new, fsync it, rename it over the log, fsync the directory. Until the
// rename the old log holds everything; after it the new one holds every record the superblock's chain
// can reach. It runs on the writer goroutine with plain syscalls (rare maintenance, never on the shard).
func (s *metaStore) compact(snapOp uint64) error {
	old, err := os.ReadFile(filepath.Join(s.dir, metaLogFile))
	if err != nil {
		return fmt.Errorf("%w: compact: %w", ErrMetaStorage, err)
	}
	kept := make([]byte, 0, len(old)/2)
	for off := 0; off < int(s.logEnd) && off < len(old); {
		e, n, err := vsr.DecodeLogRecord(old[off:])
		if err != nil {
			return fmt.Errorf("%w: compact: record at %d: %w", ErrMetaStorage, off, err)
		}
		if e.Op > snapOp {
			kept = append(kept, old[off:off+n]...)
		}
		off += n
	}
	tmp := filepath.Join(s.dir, metaLogFile+".new")
	fd, err := unix.Open(tmp, unix.O_RDWR|unix.O_CREAT|unix.O_TRUNC|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return fmt.Errorf("%w: compact: %w", ErrMetaStorage, err)
	}
	if err := writeAllSync(fd, kept); err != nil {
		_ = unix.Close(fd)
		return fmt.Errorf("%w: compact: %w", ErrMetaStorage, err)
	}
	if err := unix.Rename(tmp, filepath.Join(s.dir, metaLogFile)); err != nil {
		_ = unix.Close(fd)
		return fmt.Errorf("%w: compact: %w", ErrMetaStorage, err)
	}
	if err := syncDir(s.dir); err != nil {
		_ = unix.Close(fd)
		return fmt.Errorf("%w: compact: %w", ErrMetaStorage, err)
	}
	_ = unix.Close(s.logFD)
	s.logFD, s.logEnd = fd, int64(len(kept))
	s.log.Info("metadata log compacted", "checkpoint_op", snapOp, "bytes_before", len(old), "bytes_after", len(kept))
	return nil
}

func writeAllSync(fd int, b []byte) error {
	for off := 0; off < len(b); {
		n, err := unix.Pwrite(fd, b[off:], int64(off))
		if err != nil {
			return err
		}
		off += n
	}
	return unix.Fdatasync(fd)
}

func syncDir(dir string) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Fsync(fd)
}
