package ring

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Typed file operations of the fallback backend: each fills a slot, which Submit runs. And the
// syscall helpers every fallback operation uses.

func (r *fallbackRing) Nop(h Handler, tag uint64, fl Flags) error {
	_, _, err := r.queue(h, tag, OpNop, fl)
	return err
}

func (r *fallbackRing) Read(h Handler, tag uint64, fd int, buf []byte, off int64, fl Flags) error {
	_, s, err := r.queue(h, tag, OpRead, fl)
	if err == nil {
		s.fd, s.buf, s.off = fd, buf, off
	}
	return err
}

func (r *fallbackRing) Write(h Handler, tag uint64, fd int, buf []byte, off int64, fl Flags) error {
	_, s, err := r.queue(h, tag, OpWrite, fl)
	if err == nil {
		s.fd, s.buf, s.off = fd, buf, off
	}
	return err
}

func (r *fallbackRing) Readv(h Handler, tag uint64, fd int, bufs [][]byte, off int64, fl Flags) error {
	_, s, err := r.queue(h, tag, OpReadv, fl)
	if err == nil {
		s.fd, s.off = fd, off
		s.setIovecs(bufs)
	}
	return err
}

func (r *fallbackRing) Writev(h Handler, tag uint64, fd int, bufs [][]byte, off int64, fl Flags) error {
	_, s, err := r.queue(h, tag, OpWritev, fl)
	if err == nil {
		s.fd, s.off = fd, off
		s.setIovecs(bufs)
	}
	return err
}

func (r *fallbackRing) Fsync(h Handler, tag uint64, fd int, datasync bool, fl Flags) error {
	_, s, err := r.queue(h, tag, OpFsync, fl)
	if err == nil {
		s.fd, s.datasync = fd, datasync
	}
	return err
}

func (r *fallbackRing) Ftruncate(h Handler, tag uint64, fd int, size int64, fl Flags) error {
	_, s, err := r.queue(h, tag, OpFtruncate, fl)
	if err == nil {
		s.fd, s.off = fd, size
	}
	return err
}

func (r *fallbackRing) Openat(h Handler, tag uint64, dirfd int, path string, flags int, mode uint32, fl Flags) error {
	_, s, err := r.queue(h, tag, OpOpenat, fl)
	if err != nil {
		return err
	}
	s.fd, s.openFlags, s.mode = dirfd, flags, mode
	if !s.setPath(path) {
		s.path = s.path[:0] // executes as EINVAL
	}
	return nil
}

func (r *fallbackRing) CloseFile(h Handler, tag uint64, fd int, fl Flags) error {
	_, s, err := r.queue(h, tag, OpClose, fl)
	if err == nil {
		s.fd = fd
	}
	return err
}

func (r *fallbackRing) ReadFixed(h Handler, tag uint64, fd int, buf []byte, bufIndex uint16, off int64, fl Flags) error {
	_, s, err := r.queue(h, tag, OpReadFixed, fl)
	if err == nil {
		s.fd, s.buf, s.off, s.bufIndex = fd, buf, off, bufIndex
	}
	return err
}

func (r *fallbackRing) WriteFixed(h Handler, tag uint64, fd int, buf []byte, bufIndex uint16, off int64, fl Flags) error {
	_, s, err := r.queue(h, tag, OpWriteFixed, fl)
	if err == nil {
		s.fd, s.buf, s.off, s.bufIndex = fd, buf, off, bufIndex
	}
	return err
}

func (r *fallbackRing) RegisterFiles(fds []int) error {
	if r.closed {
		return ErrClosed
	}
	if len(fds) == 0 {
		return fmt.Errorf("ring: register files: %w", unix.EINVAL)
	}
	if r.registeredFiles != nil {
		return fmt.Errorf("ring: register files: %w", unix.EBUSY)
	}
	r.registeredFiles = append(make([]int, 0, len(fds)), fds...)
	return nil
}

func (r *fallbackRing) UnregisterFiles() error {
	if r.registeredFiles == nil {
		return fmt.Errorf("ring: unregister files: %w", unix.ENXIO)
	}
	r.registeredFiles = nil
	return nil
}

func (r *fallbackRing) RegisterBuffers(bufs [][]byte) error {
	if r.closed {
		return ErrClosed
	}
	if len(bufs) == 0 {
		return fmt.Errorf("ring: register buffers: %w", unix.EINVAL)
	}
	if r.registeredBufs != nil {
		return fmt.Errorf("ring: register buffers: %w", unix.EBUSY)
	}
	r.registeredBufs = append(make([][]byte, 0, len(bufs)), bufs...)
	return nil
}

func (r *fallbackRing) UnregisterBuffers() error {
	if r.registeredBufs == nil {
		return fmt.Errorf("ring: unregister buffers: %w", unix.ENXIO)
	}
	r.registeredBufs = nil
	return nil
}

// executeRW runs a read or write at s.off, or at the file position when s.off is -1 (read(2),
// write(2), readv(2), writev(2)), as io_uring does for offset -1.
func executeRW(fd int, s *slot) int32 {
	atPos := s.off == -1
	switch s.op {
	case OpRead:
		if atPos {
			return retryIntr(func() (int, error) { return unix.Read(fd, s.buf) })
		}
		return retryIntr(func() (int, error) { return unix.Pread(fd, s.buf, s.off) })
	case OpWrite:
		if atPos {
			return retryIntr(func() (int, error) { return unix.Write(fd, s.buf) })
		}
		return retryIntr(func() (int, error) { return unix.Pwrite(fd, s.buf, s.off) })
	}
	iov, n := uintptr(s.iovecsPtr()), uintptr(len(s.iovecs))
	switch {
	case s.op == OpReadv && atPos:
		return rawSyscallRes(unix.SYS_READV, uintptr(fd), iov, n, 0, 0)
	case s.op == OpReadv:
		return rawSyscallRes(unix.SYS_PREADV, uintptr(fd), iov, n, uintptr(s.off), 0)
	case atPos:
		return rawSyscallRes(unix.SYS_WRITEV, uintptr(fd), iov, n, 0, 0)
	}
	return rawSyscallRes(unix.SYS_PWRITEV, uintptr(fd), iov, n, uintptr(s.off), 0)
}

// retryIntr runs a syscall wrapper, retrying on EINTR, and turns its outcome into a completion result.
func retryIntr(f func() (int, error)) int32 {
	for {
		n, err := f()
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return errnoOf(err)
		}
		return int32(n)
	}
}

// rawSyscallRes runs a syscall that may block (the runtime is told), retrying on EINTR.
func rawSyscallRes(trap, a1, a2, a3, a4, a5 uintptr) int32 {
	for {
		r1, _, errno := unix.Syscall6(trap, a1, a2, a3, a4, a5, 0)
		if errno == unix.EINTR {
			continue
		}
		if errno != 0 {
			return -int32(errno)
		}
		return int32(r1)
	}
}

// insideBuffer says whether b lies within reg's memory.
func insideBuffer(b, reg []byte) bool {
	if len(reg) == 0 {
		return false
	}
	if len(b) == 0 {
		return true
	}
	start := uintptr(unsafe.Pointer(&reg[0]))
	p := uintptr(unsafe.Pointer(&b[0]))
	return p >= start && p+uintptr(len(b)) <= start+uintptr(len(reg))
}
