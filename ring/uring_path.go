package ring

import (
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Path and space operations of the io_uring backend: RENAMEAT, UNLINKAT, MKDIRAT, FALLOCATE and
// STATX. The paths are NUL-terminated copies in the slot, so the caller's strings may go at once.

func (r *uringRing) RenameAt(h Handler, tag uint64, oldDirfd int, oldPath string, newDirfd int, newPath string, flags uint32, fl Flags) error {
	if strings.IndexByte(oldPath, 0) >= 0 || strings.IndexByte(newPath, 0) >= 0 {
		return r.postEmulated(h, tag, OpRenameAt, fl, -int32(unix.EINVAL)) // no kernel path holds a NUL
	}
	s, e, err := r.queue(h, tag, OpRenameAt, fl)
	if err != nil {
		return err
	}
	s.setPath(oldPath)
	s.setPath2(newPath)
	e.fd, e.addr = int32(oldDirfd), addrOf(&s.path[0])
	e.len, e.off = uint32(int32(newDirfd)), addrOf(&s.path2[0])
	e.opFlags = flags
	return nil
}

func (r *uringRing) UnlinkAt(h Handler, tag uint64, dirfd int, path string, flags int, fl Flags) error {
	s, e, err := r.queuePath(h, tag, OpUnlinkAt, dirfd, path, fl)
	if err != nil || s == nil {
		return err
	}
	e.opFlags = uint32(flags)
	return nil
}

func (r *uringRing) MkdirAt(h Handler, tag uint64, dirfd int, path string, mode uint32, fl Flags) error {
	s, e, err := r.queuePath(h, tag, OpMkdirAt, dirfd, path, fl)
	if err != nil || s == nil {
		return err
	}
	e.len = mode
	return nil
}

func (r *uringRing) Statx(h Handler, tag uint64, dirfd int, path string, flags int, mask uint32, st *unix.Statx_t, fl Flags) error {
	s, e, err := r.queuePath(h, tag, OpStatx, dirfd, path, fl)
	if err != nil || s == nil {
		return err
	}
	s.statx = st
	e.len, e.off, e.opFlags = mask, uint64(uintptr(unsafe.Pointer(st))), uint32(flags)
	return nil
}

// queuePath queues an operation on one path relative to dirfd. A path holding a NUL completes with
// EINVAL at the next Dispatch, and then s is nil and there is nothing left to fill.
func (r *uringRing) queuePath(h Handler, tag uint64, op Opcode, dirfd int, path string, fl Flags) (*slot, *sqe, error) {
	if strings.IndexByte(path, 0) >= 0 {
		return nil, nil, r.postEmulated(h, tag, op, fl, -int32(unix.EINVAL))
	}
	s, e, err := r.queue(h, tag, op, fl)
	if err != nil {
		return nil, nil, err
	}
	s.setPath(path)
	e.fd, e.addr = int32(dirfd), addrOf(&s.path[0])
	return s, e, nil
}

func (r *uringRing) Fallocate(h Handler, tag uint64, fd int, mode uint32, off, length int64, fl Flags) error {
	_, e, err := r.queue(h, tag, OpFallocate, fl)
	if err != nil {
		return err
	}
	e.fd, e.len, e.off, e.addr = int32(fd), mode, uint64(off), uint64(length)
	return nil
}
