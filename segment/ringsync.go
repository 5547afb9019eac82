package segment

import (
	"errors"
	"fmt"
	"io"

	"golang.org/x/sys/unix"

	"github.com/ringstream/ringstream/ring"
)

// syncRing drives one ring operation at a time to completion on the calling (shard) thread. Only
// the rare paths use it: open and recovery, cut, verify, retention, cursor snapshots, log epochs
// and the fence. It must never be used from inside a Handler.Complete call.
type syncRing struct {
	r    ring.Ring
	done bool
	res  int32
	op   ring.Opcode
}

func (s *syncRing) Complete(c ring.Completion) {
	s.done = true
	s.res = c.Res
	s.op = c.Op
}

// run queues one operation with queue (retrying while the ring reports ErrQueueFull) and waits
// for its completion.
func (s *syncRing) run(queue func() error) (int32, error) {
	s.done = false
	for {
		err := queue()
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

// readAt fills buf from off, stopping early only at end of file. It returns the bytes read.
func (s *syncRing) readAt(fd int, buf []byte, off int64) (int, error) {
	n := 0
	for n < len(buf) {
		rest := buf[n:]
		at := off + int64(n)
		res, err := s.run(func() error { return s.r.Read(s, 0, fd, rest, at, 0) })
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
		res, err := s.run(func() error { return s.r.Write(s, 0, fd, rest, at, 0) })
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
	_, err := s.run(func() error { return s.r.Fsync(s, 0, fd, datasync, 0) })
	return err
}

func (s *syncRing) ftruncate(fd int, size int64) error {
	_, err := s.run(func() error { return s.r.Ftruncate(s, 0, fd, size, 0) })
	return err
}

func (s *syncRing) openat(dirfd int, name string, flags int, mode uint32) (int, error) {
	res, err := s.run(func() error { return s.r.Openat(s, 0, dirfd, name, flags|unix.O_CLOEXEC, mode, 0) })
	if err != nil {
		return -1, err
	}
	return int(res), nil
}

func (s *syncRing) close(fd int) error {
	_, err := s.run(func() error { return s.r.CloseFile(s, 0, fd, 0) })
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

// writeFileAtomic replaces name in the directory dirfd with data: write a temporary file, fsync
// it, rename it over name, fsync the directory. The rename is a plain syscall (the ring contract
// has no renameat); this path is rare.
func (s *syncRing) writeFileAtomic(dirfd int, name string, data []byte) error {
	tmp := name + ".tmp"
	fd, err := s.openat(dirfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC, 0o644)
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
	if err := unix.Renameat(dirfd, tmp, dirfd, name); err != nil {
		return fmt.Errorf("segment: rename %s: %w", tmp, err)
	}
	return s.fsync(dirfd, false)
}
