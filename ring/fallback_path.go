package ring

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// Path and space operations of the fallback backend: each fills a slot, which Submit runs with
// renameat2(2), unlinkat(2), mkdirat(2), fallocate(2) or statx(2).

func (r *fallbackRing) RenameAt(h Handler, tag uint64, oldDirfd int, oldPath string, newDirfd int, newPath string, flags uint32, fl Flags) error {
	_, s, err := r.queue(h, tag, OpRenameAt, fl)
	if err != nil {
		return err
	}
	s.fd, s.fd2, s.openFlags = oldDirfd, newDirfd, int(flags)
	if !s.setPath(oldPath) || !s.setPath2(newPath) {
		s.path = s.path[:0] // executes as EINVAL
	}
	return nil
}

func (r *fallbackRing) UnlinkAt(h Handler, tag uint64, dirfd int, path string, flags int, fl Flags) error {
	s, err := r.queuePath(h, tag, OpUnlinkAt, dirfd, path, fl)
	if err == nil {
		s.openFlags = flags
	}
	return err
}

func (r *fallbackRing) MkdirAt(h Handler, tag uint64, dirfd int, path string, mode uint32, fl Flags) error {
	s, err := r.queuePath(h, tag, OpMkdirAt, dirfd, path, fl)
	if err == nil {
		s.mode = mode
	}
	return err
}

func (r *fallbackRing) Statx(h Handler, tag uint64, dirfd int, path string, flags int, mask uint32, st *unix.Statx_t, fl Flags) error {
	s, err := r.queuePath(h, tag, OpStatx, dirfd, path, fl)
	if err == nil {
		s.openFlags, s.mode, s.statx = flags, mask, st
	}
	return err
}

// queuePath takes a slot for an operation on one path relative to dirfd. A path holding a NUL
// executes as EINVAL.
func (r *fallbackRing) queuePath(h Handler, tag uint64, op Opcode, dirfd int, path string, fl Flags) (*slot, error) {
	_, s, err := r.queue(h, tag, op, fl)
	if err != nil {
		return nil, err
	}
	s.fd = dirfd
	if !s.setPath(path) {
		s.path = s.path[:0]
	}
	return s, nil
}

func (r *fallbackRing) Fallocate(h Handler, tag uint64, fd int, mode uint32, off, length int64, fl Flags) error {
	_, s, err := r.queue(h, tag, OpFallocate, fl)
	if err == nil {
		s.fd, s.mode, s.off, s.length = fd, mode, off, length
	}
	return err
}

// executePath runs a path operation. A slot whose path is empty held a NUL byte: EINVAL, as the
// io_uring backend answers.
func (r *fallbackRing) executePath(s *slot) int32 {
	if len(s.path) == 0 {
		return -int32(unix.EINVAL)
	}
	path := uintptr(unsafe.Pointer(&s.path[0]))
	switch s.op {
	case OpRenameAt:
		return rawSyscallRes(unix.SYS_RENAMEAT2, uintptr(s.fd), path, uintptr(s.fd2),
			uintptr(unsafe.Pointer(&s.path2[0])), uintptr(uint32(s.openFlags)))
	case OpUnlinkAt:
		return rawSyscallRes(unix.SYS_UNLINKAT, uintptr(s.fd), path, uintptr(s.openFlags), 0, 0)
	case OpMkdirAt:
		return rawSyscallRes(unix.SYS_MKDIRAT, uintptr(s.fd), path, uintptr(s.mode), 0, 0)
	case OpStatx:
		return rawSyscallRes(unix.SYS_STATX, uintptr(s.fd), path, uintptr(s.openFlags), uintptr(s.mode),
			uintptr(unsafe.Pointer(s.statx)))
	}
	panic("ring: not a path operation")
}
