package segment

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/ringstream/ringstream/ring"
)

// syncRing runs the rare paths' ring operations one at a time, sequentially: open and recovery,
// cut, verify, retention, cursor snapshots, log epochs, close and delete. It has two modes.
// Inside a job (job set) each operation is queued with the job as Handler and the job suspends
// until Poll resumes it after the completion: the shard loop never blocks. Without a job (the
// ...Sync methods, for tools and tests) it drives the ring itself with Wait and Dispatch, so it
// must never be used that way from inside a Handler.Complete call.
type syncRing struct {
	r    ring.Ring
	job  *job // the copy's running job, nil in synchronous mode
	done bool
	res  int32
	op   ring.Opcode
}

func (s *syncRing) Complete(c ring.Completion) {
	s.done = true
	s.res = c.Res
	s.op = c.Op
}

// run queues one operation with queue, passing the handler to queue it with, and returns its
// result once it completes. A full ring is back-pressure: the operation is queued again later.
func (s *syncRing) run(queue func(h ring.Handler) error) (int32, error) {
	if j := s.job; j != nil {
		return s.runInJob(j, queue)
	}
	s.done = false
	for {
		err := queue(s)
		if err == nil {
			break
		}
		if !errors.Is(err, ring.ErrQueueFull) || s.r.InFlight() == 0 {
			return 0, err
		}
		if err := s.r.Wait(1); err != nil {
			return 0, err
		}
		s.r.Dispatch()
	}
	for !s.done {
		if err := s.r.Wait(1); err != nil {
			return 0, err
		}
		s.r.Dispatch()
	}
	c := ring.Completion{Res: s.res, Op: s.op}
	return s.res, c.Err()
}

func (s *syncRing) runInJob(j *job, queue func(h ring.Handler) error) (int32, error) {
	for {
		if j.abandoned {
			return 0, fmt.Errorf("segment: %s abandoned: %w", j.res.Op, ErrClosed)
		}
		err := queue(j)
		if err == nil {
			break
		}
		if !errors.Is(err, ring.ErrQueueFull) || s.r.InFlight() == 0 {
			return 0, err
		}
		if err := j.nextTurn(); err != nil {
			return 0, err
		}
	}
	res, op, err := j.await()
	if err != nil {
		return 0, err
	}
	c := ring.Completion{Res: res, Op: op}
	return res, c.Err()
}

// turn lets the ring make progress while a rare path waits for its logs to go quiet: the job
// suspends until the next Poll; in synchronous mode the ring is waited on and dispatched. With
// nothing in flight there is nothing to wait for, and the caller's condition will never change.
func (s *syncRing) turn() error {
	if j := s.job; j != nil {
		return j.nextTurn()
	}
	if s.r.InFlight() == 0 {
		return fmt.Errorf("segment: waiting with nothing in flight: %w", ErrBusy)
	}
	if err := s.r.Wait(1); err != nil {
		return err
	}
	s.r.Dispatch()
	return nil
}

// readAt fills buf from off, stopping early only at end of file. It returns the bytes read.
func (s *syncRing) readAt(fd int, buf []byte, off int64) (int, error) {
	n := 0
	for n < len(buf) {
		rest := buf[n:]
		at := off + int64(n)
		res, err := s.run(func(h ring.Handler) error { return s.r.Read(h, 0, fd, rest, at, 0) })
		if err != nil {
			return n, err
		}
		if res == 0 {
			return n, io.EOF
		}
		n += int(res)
	}
	return n, nil
}

// writeAt writes all of buf at off.
func (s *syncRing) writeAt(fd int, buf []byte, off int64) error {
	n := 0
	for n < len(buf) {
		rest := buf[n:]
		at := off + int64(n)
		res, err := s.run(func(h ring.Handler) error { return s.r.Write(h, 0, fd, rest, at, 0) })
		if err != nil {
			return err
		}
		if res == 0 {
			return fmt.Errorf("segment: write made no progress: %w", io.ErrShortWrite)
		}
		n += int(res)
	}
	return nil
}

func (s *syncRing) fsync(fd int, datasync bool) error {
	_, err := s.run(func(h ring.Handler) error { return s.r.Fsync(h, 0, fd, datasync, 0) })
	return err
}

func (s *syncRing) ftruncate(fd int, size int64) error {
	_, err := s.run(func(h ring.Handler) error { return s.r.Ftruncate(h, 0, fd, size, 0) })
	return err
}

func (s *syncRing) openat(dirfd int, name string, flags int, mode uint32) (int, error) {
	res, err := s.run(func(h ring.Handler) error { return s.r.Openat(h, 0, dirfd, name, flags|unix.O_CLOEXEC, mode, 0) })
	if err != nil {
		return -1, err
	}
	return int(res), nil
}

func (s *syncRing) close(fd int) error {
	_, err := s.run(func(h ring.Handler) error { return s.r.CloseFile(h, 0, fd, 0) })
	return err
}

// readFile reads a whole small file relative to dirfd. A missing file returns unix.ENOENT.
func (s *syncRing) readFile(dirfd int, name string, sizeMax int) ([]byte, error) {
	fd, err := s.openat(dirfd, name, unix.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		_ = s.close(fd)
		return nil, fmt.Errorf("segment: fstat %s: %w", name, err)
	}
	if st.Size > int64(sizeMax) {
		_ = s.close(fd)
		return nil, fmt.Errorf("%w: %s is %d bytes, more than %d", ErrCorrupt, name, st.Size, sizeMax)
	}
	buf := make([]byte, st.Size)
	n, err := s.readAt(fd, buf, 0)
	cerr := s.close(fd)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return buf[:n], cerr
}

// writeFileAtomic replaces the file name in directory dir with data: write a temporary file,
// fsync it, rename it over name, fsync the directory. Every path is absolute (AT_FDCWD): no
// descriptor of dir stays open.
func (s *syncRing) writeFileAtomic(dir, name string, data []byte) error {
	if err := s.renameInto(dir, name, data); err != nil {
		return err
	}
	return s.fsyncDir(dir)
}

// renameInto is writeFileAtomic without the directory fsync: once it returns nil, name holds
// data (a crash may still bring the old file back until the directory is fsynced).
func (s *syncRing) renameInto(dir, name string, data []byte) error {
	tmp := filepath.Join(dir, name+".tmp")
	fd, err := s.openat(unix.AT_FDCWD, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("segment: create %s: %w", tmp, err)
	}
	err = s.writeAt(fd, data, 0)
	if err == nil {
		err = s.fsync(fd, false)
	}
	if cerr := s.close(fd); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("segment: write %s: %w", tmp, err)
	}
	if err := s.rename(unix.AT_FDCWD, tmp, unix.AT_FDCWD, filepath.Join(dir, name)); err != nil {
		return fmt.Errorf("segment: rename %s: %w", tmp, err)
	}
	return nil
}

// rename renames oldName in oldDirfd to newName in newDirfd (RENAMEAT).
func (s *syncRing) rename(oldDirfd int, oldName string, newDirfd int, newName string) error {
	_, err := s.run(func(h ring.Handler) error {
		return s.r.RenameAt(h, 0, oldDirfd, oldName, newDirfd, newName, 0, 0)
	})
	return err
}

// unlink removes name in dirfd (UNLINKAT); dir says it is a directory.
func (s *syncRing) unlink(dirfd int, name string, dir bool) error {
	flags := 0
	if dir {
		flags = unix.AT_REMOVEDIR
	}
	_, err := s.run(func(h ring.Handler) error { return s.r.UnlinkAt(h, 0, dirfd, name, flags, 0) })
	return err
}

// mkdir creates the directory name in dirfd (MKDIRAT).
func (s *syncRing) mkdir(dirfd int, name string, mode uint32) error {
	_, err := s.run(func(h ring.Handler) error { return s.r.MkdirAt(h, 0, dirfd, name, mode, 0) })
	return err
}

// makeDir creates the directory name in dirfd unless it exists, and says whether it created it.
func (s *syncRing) makeDir(dirfd int, name string) (bool, error) {
	err := s.mkdir(dirfd, name, 0o755)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, unix.EEXIST):
		return false, nil
	}
	return false, fmt.Errorf("segment: create %s: %w", name, err)
}

// fsyncDirOf fsyncs the directory holding path, making a create, rename or removal of path
// durable.
func (s *syncRing) fsyncDirOf(path string) error { return s.fsyncDir(filepath.Dir(path)) }

// fsyncDir opens dir, fsyncs it and closes it: a copy keeps no descriptor of its directory open
// (see the package doc), so each rare operation that changes it opens it for the fsync.
func (s *syncRing) fsyncDir(dir string) error {
	fd, err := s.openat(unix.AT_FDCWD, dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return fmt.Errorf("segment: open dir %s: %w", dir, err)
	}
	err = s.fsync(fd, false)
	if cerr := s.close(fd); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("segment: fsync dir %s: %w", dir, err)
	}
	return nil
}
