package metahost

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/ringstream/ringstream/engine/vsr"
)

// Opening the metadata group's storage: read the files, recover (vsr.Recover), cut the log's torn
// tail and repair what Recover asks, all before the shard starts.

// openMetaStore reads dir, recovers the durable state, cuts the log's torn tail and repairs what
// Recover asks (repairAtOpen). The directory must have been formatted (Format) for id: a missing or
// empty directory is ErrUnformatted, never a new replica. It runs before the shard starts: the reads
// and writes are plain syscalls on the opening goroutine.
func openMetaStore(dir string, id vsr.Identity, compactBytes int64, logger *slog.Logger) (*metaStore, vsr.Durable, error) {
	return openMetaStoreWith(dir, id, compactBytes, logger, false)
}

// openMetaStoreWith is openMetaStore; noLogRepair is the broken variant brokenNoLogRepair, for tests.
func openMetaStoreWith(dir string, id vsr.Identity, compactBytes int64, logger *slog.Logger,
	noLogRepair bool) (*metaStore, vsr.Durable, error) {
	var snaps [2][]byte
	file, err := readOptional(filepath.Join(dir, metaLogFile))
	if err != nil {
		return nil, vsr.Durable{}, err
	}
	copies, records := splitLogFile(file)
	for i := range snaps {
		if snaps[i], err = readOptional(filepath.Join(dir, fmt.Sprintf(metaSnapshotFile, i))); err != nil {
			return nil, vsr.Durable{}, err
		}
	}
	d, valid, err := vsr.Recover(copies, snaps, records)
	if errors.Is(err, vsr.ErrUnformatted) {
		if _, serr := os.Stat(filepath.Join(dir, metaLegacySuperblockFile)); serr == nil {
			return nil, vsr.Durable{}, fmt.Errorf("%w: %s has the layout before one fdatasync per persist (a %q file; "+
				"the superblock copies now head the %q file): format a new directory and let the replica recover",
				ErrStorage, dir, metaLegacySuperblockFile, metaLogFile)
		}
		return nil, vsr.Durable{}, fmt.Errorf("%w: %s holds no superblock (%w): format it with `ringstream format`, "+
			"with --recover if this replica's disk was lost or replaced", ErrUnformatted, dir, err)
	}
	if err != nil {
		return nil, vsr.Durable{}, fmt.Errorf("%w: %w", ErrStorage, err)
	}
	if got := d.Superblock.Identity; got.Cluster != id.Cluster || got.Node != id.Node || got.Replica != id.Replica {
		return nil, vsr.Durable{}, fmt.Errorf("%w: %s was formatted for cluster %d node %d replica %d, not cluster %d "+
			"node %d replica %d", ErrStorage, dir, got.Cluster, got.Node, got.Replica, id.Cluster, id.Node, id.Replica)
	}
	s := &metaStore{dir: dir, compactBytes: compactBytes, dirFD: -1, logFD: -1, snapFD: [2]int{-1, -1},
		log: logger, compact: metaCompaction{fd: -1}, brokenNoLogRepair: noLogRepair}
	if err := s.openFiles(dir, int64(valid)); err != nil {
		s.closeFiles()
		return nil, vsr.Durable{}, err
	}
	if err := s.repairAtOpen(copies, d); err != nil {
		s.closeFiles()
		return nil, vsr.Durable{}, err
	}
	return s, d, nil
}

// splitLogFile cuts the log file's bytes into its copy slots and its records.
func splitLogFile(file []byte) (copies [vsr.SuperblockSlots][]byte, records []byte) {
	for i := range copies {
		off := i * vsr.CopySlotSize
		if off < len(file) {
			copies[i] = file[off:min(len(file), off+vsr.CopySlotSize)]
		}
	}
	if len(file) > metaHeaderSize {
		records = file[metaHeaderSize:]
	}
	return copies, records
}

// repairAtOpen does what Recover asks before the replica acts, with one fdatasync: it rewrites every
// copy of the area in force that differs from the copy in force, and appends the records only that
// copy carries (a power loss kept the copy and lost the log's append). Without the first, a superblock
// that a power loss left on one copy is one bad sector from a rollback; without the second, the persist
// after next overwrites that area and the records are nowhere. Storage whose state Recover could not
// prove (d.Cause set) is left as it is: the replica recovers, and its first persist writes the other
// area.
func (s *metaStore) repairAtOpen(copies [vsr.SuperblockSlots][]byte, d vsr.Durable) error {
	if d.Cause != nil || d.InForce == nil {
		return nil
	}
	repaired := 0
	area := vsr.AreaOf(d.Superblock.Sequence)
	for c := 0; c < vsr.SuperblockCopies; c++ {
		slot := area*vsr.SuperblockCopies + c
		if len(copies[slot]) >= len(d.InForce) && string(copies[slot][:len(d.InForce)]) == string(d.InForce) {
			continue
		}
		if err := pwriteAll(s.logFD, d.InForce, int64(slot*vsr.CopySlotSize)); err != nil {
			return fmt.Errorf("%w: repair superblock copy %d: %w", ErrStorage, slot, err)
		}
		repaired++
	}
	unlogged := len(d.Unlogged)
	if unlogged > 0 && !s.brokenNoLogRepair {
		if err := pwriteAll(s.logFD, d.Unlogged, metaHeaderSize+s.logEnd); err != nil {
			return fmt.Errorf("%w: append the records only the superblock copy holds: %w", ErrStorage, err)
		}
		s.logEnd += int64(unlogged)
	}
	if repaired == 0 && unlogged == 0 {
		return nil
	}
	if err := unix.Fdatasync(s.logFD); err != nil {
		return fmt.Errorf("%w: repair at open: %w", ErrStorage, err)
	}
	s.log.Info("metadata storage: repaired at open", "copies", repaired, "unlogged_bytes", unlogged,
		"sequence", d.Superblock.Sequence, "op", d.Superblock.Op)
	return nil
}

// pwriteAll writes b at off, all of it.
func pwriteAll(fd int, b []byte, off int64) error {
	for len(b) > 0 {
		n, err := unix.Pwrite(fd, b, off)
		if err != nil {
			return err
		}
		if n == 0 {
			return errShortWrite
		}
		b, off = b[n:], off+int64(n)
	}
	return nil
}

func readOptional(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrStorage, err)
	}
	return b, nil
}

// openFiles opens the three files and cuts the log to its valid prefix.
func (s *metaStore) openFiles(dir string, logValid int64) error {
	open := func(name string) (int, error) {
		// No O_CREAT: the format step made every file and synced the directory.
		fd, err := unix.Open(filepath.Join(dir, name), unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1, fmt.Errorf("%w: open %s: %w", ErrStorage, name, err)
		}
		return fd, nil
	}
	var err error
	if s.dirFD, err = unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
		return fmt.Errorf("%w: open %s: %w", ErrStorage, dir, err)
	}
	if s.logFD, err = open(metaLogFile); err != nil {
		return err
	}
	for i := range s.snapFD {
		if s.snapFD[i], err = open(fmt.Sprintf(metaSnapshotFile, i)); err != nil {
			return err
		}
	}
	if err := unix.Ftruncate(s.logFD, metaHeaderSize+logValid); err != nil {
		return fmt.Errorf("%w: cut the log's torn tail: %w", ErrStorage, err)
	}
	if err := unix.Fdatasync(s.logFD); err != nil {
		return fmt.Errorf("%w: %w", ErrStorage, err)
	}
	s.logEnd = logValid
	return nil
}

func (s *metaStore) closeFiles() {
	for _, fd := range []int{s.dirFD, s.logFD, s.snapFD[0], s.snapFD[1], s.compact.fd} {
		if fd >= 0 {
			_ = unix.Close(fd)
		}
	}
	s.dirFD, s.logFD, s.snapFD, s.compact.fd = -1, -1, [2]int{-1, -1}, -1
}
