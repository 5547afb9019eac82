package ring

import (
	"strings"
	"time"

	"github.com/ringstream/ringstream/internal/assert"

	"golang.org/x/sys/unix"
)

// Typed operations of the io_uring backend: each fills one SQE, and keeps in the slot whatever the
// kernel will read after this call returns.

func (r *uringRing) Nop(h Handler, tag uint64, fl Flags) error {
	_, _, err := r.queue(h, tag, OpNop, fl)
	return err
}

func (r *uringRing) Read(h Handler, tag uint64, fd int, buf []byte, off int64, fl Flags) error {
	return r.queueRW(h, tag, OpRead, fd, buf, off, fl)
}

func (r *uringRing) Write(h Handler, tag uint64, fd int, buf []byte, off int64, fl Flags) error {
	return r.queueRW(h, tag, OpWrite, fd, buf, off, fl)
}

func (r *uringRing) queueRW(h Handler, tag uint64, op Opcode, fd int, buf []byte, off int64, fl Flags) error {
	s, e, err := r.queue(h, tag, op, fl)
	if err != nil {
		return err
	}
	s.buf = buf
	e.fd, e.addr, e.len, e.off = int32(fd), addrOf(bytePtr(buf)), uint32(len(buf)), uint64(off)
	return nil
}

func (r *uringRing) Readv(h Handler, tag uint64, fd int, bufs [][]byte, off int64, fl Flags) error {
	return r.queueRWV(h, tag, OpReadv, fd, bufs, off, fl)
}

func (r *uringRing) Writev(h Handler, tag uint64, fd int, bufs [][]byte, off int64, fl Flags) error {
	return r.queueRWV(h, tag, OpWritev, fd, bufs, off, fl)
}

func (r *uringRing) queueRWV(h Handler, tag uint64, op Opcode, fd int, bufs [][]byte, off int64, fl Flags) error {
	s, e, err := r.queue(h, tag, op, fl)
	if err != nil {
		return err
	}
	s.setIovecs(bufs)
	e.fd, e.addr, e.len, e.off = int32(fd), uint64(uintptr(s.iovecsPtr())), uint32(len(bufs)), uint64(off)
	return nil
}

func (r *uringRing) ReadFixed(h Handler, tag uint64, fd int, buf []byte, bufIndex uint16, off int64, fl Flags) error {
	return r.queueFixed(h, tag, OpReadFixed, fd, buf, bufIndex, off, fl)
}

func (r *uringRing) WriteFixed(h Handler, tag uint64, fd int, buf []byte, bufIndex uint16, off int64, fl Flags) error {
	return r.queueFixed(h, tag, OpWriteFixed, fd, buf, bufIndex, off, fl)
}

func (r *uringRing) queueFixed(h Handler, tag uint64, op Opcode, fd int, buf []byte, bufIndex uint16, off int64, fl Flags) error {
	s, e, err := r.queue(h, tag, op, fl)
	if err != nil {
		return err
	}
	s.buf = buf
	e.fd, e.addr, e.len, e.off = int32(fd), addrOf(bytePtr(buf)), uint32(len(buf)), uint64(off)
	e.bufIndex = bufIndex
	return nil
}

func (r *uringRing) Fsync(h Handler, tag uint64, fd int, datasync bool, fl Flags) error {
	_, e, err := r.queue(h, tag, OpFsync, fl)
	if err != nil {
		return err
	}
	e.fd = int32(fd)
	if datasync {
		e.opFlags = fsyncDatasync
	}
	return nil
}

// Ftruncate uses IORING_OP_FTRUNCATE where the kernel has it. Elsewhere it runs ftruncate(2) now and
// posts the result as a completion of this ring; on those kernels it does not wait for operations
// queued before it, and a Link on it is ignored.
func (r *uringRing) Ftruncate(h Handler, tag uint64, fd int, size int64, fl Flags) error {
	if !r.probed[kopFtruncate] {
		return r.emulateFtruncate(h, tag, fd, size, fl)
	}
	_, e, err := r.queue(h, tag, OpFtruncate, fl)
	if err != nil {
		return err
	}
	e.fd, e.off = int32(fd), uint64(size)
	return nil
}

func (r *uringRing) emulateFtruncate(h Handler, tag uint64, fd int, size int64, fl Flags) error {
	if fl&FixedFile != 0 {
		// The registered table lives in the kernel; without the opcode there is no way to reach it.
		return r.postEmulated(h, tag, OpFtruncate, fl, -int32(unix.EBADF))
	}
	if r.closed {
		return ErrClosed
	}
	res := retryIntr(func() (int, error) { return 0, unix.Ftruncate(fd, size) })
	return r.postEmulated(h, tag, OpFtruncate, fl, res)
}

// postEmulated takes a slot for an operation the ring finished without the kernel (an emulated
// ftruncate, or arguments no kernel would accept) and queues its completion for the next Dispatch.
func (r *uringRing) postEmulated(h Handler, tag uint64, op Opcode, fl Flags, res int32) error {
	if r.closed {
		return ErrClosed
	}
	assert.True(h != nil, "ring: nil handler")
	idx, s, ok := r.slots.acquire(h, tag, op, fl)
	if !ok {
		return ErrQueueFull
	}
	r.emulated = append(r.emulated, cqe{userData: userData(idx, s.gen), res: res})
	return nil
}

// Openat opens with O_CLOEXEC added, as Go's os package does.
func (r *uringRing) Openat(h Handler, tag uint64, dirfd int, path string, flags int, mode uint32, fl Flags) error {
	if strings.IndexByte(path, 0) >= 0 {
		return r.postEmulated(h, tag, OpOpenat, fl, -int32(unix.EINVAL)) // no kernel path holds a NUL
	}
	s, e, err := r.queue(h, tag, OpOpenat, fl)
	if err != nil {
		return err
	}
	s.setPath(path)
	e.fd, e.addr, e.len = int32(dirfd), addrOf(&s.path[0]), mode
	e.opFlags = uint32(flags | unix.O_CLOEXEC)
	return nil
}

func (r *uringRing) CloseFile(h Handler, tag uint64, fd int, fl Flags) error {
	_, e, err := r.queue(h, tag, OpClose, fl)
	if err != nil {
		return err
	}
	e.fd = int32(fd)
	return nil
}

func (r *uringRing) Send(h Handler, tag uint64, fd int, buf []byte, msgFlags int, fl Flags) error {
	return r.queueSendRecv(h, tag, OpSend, fd, buf, msgFlags, fl)
}

func (r *uringRing) Recv(h Handler, tag uint64, fd int, buf []byte, msgFlags int, fl Flags) error {
	return r.queueSendRecv(h, tag, OpRecv, fd, buf, msgFlags, fl)
}

// SendZC folds the kernel's two CQEs (the result, then the notification that buf is free) into one
// completion, dispatched with the second.
func (r *uringRing) SendZC(h Handler, tag uint64, fd int, buf []byte, msgFlags int, fl Flags) error {
	return r.queueSendRecv(h, tag, OpSendZC, fd, buf, msgFlags, fl)
}

func (r *uringRing) queueSendRecv(h Handler, tag uint64, op Opcode, fd int, buf []byte, msgFlags int, fl Flags) error {
	s, e, err := r.queue(h, tag, op, fl)
	if err != nil {
		return err
	}
	s.buf = buf
	e.fd, e.addr, e.len, e.opFlags = int32(fd), addrOf(bytePtr(buf)), uint32(len(buf)), uint32(msgFlags)
	return nil
}

func (r *uringRing) Sendmsg(h Handler, tag uint64, fd int, bufs [][]byte, msgFlags int, fl Flags) error {
	s, e, err := r.queue(h, tag, OpSendmsg, fl)
	if err != nil {
		return err
	}
	s.setIovecs(bufs)
	s.msghdr = unix.Msghdr{}
	if len(s.iovecs) > 0 {
		s.msghdr.Iov = &s.iovecs[0]
		s.msghdr.SetIovlen(len(s.iovecs))
	}
	e.fd, e.addr, e.len, e.opFlags = int32(fd), addrOf(&s.msghdr), 1, uint32(msgFlags)
	return nil
}

// Accept asks for the new socket with SOCK_CLOEXEC and does not return the peer address.
func (r *uringRing) Accept(h Handler, tag uint64, fd int, fl Flags) error {
	_, e, err := r.queue(h, tag, OpAccept, fl)
	if err != nil {
		return err
	}
	e.fd, e.opFlags = int32(fd), unix.SOCK_CLOEXEC
	return nil
}

func (r *uringRing) Connect(h Handler, tag uint64, fd int, sa unix.Sockaddr, fl Flags) error {
	n, ok := sockaddrToRaw(sa, &r.addrScratch)
	if !ok {
		return r.postEmulated(h, tag, OpConnect, fl, -int32(unix.EAFNOSUPPORT))
	}
	s, e, err := r.queue(h, tag, OpConnect, fl)
	if err != nil {
		return err
	}
	s.sockaddr, s.addrLen = r.addrScratch, n
	e.fd, e.addr, e.off = int32(fd), addrOf(&s.sockaddr), uint64(n)
	return nil
}

func (r *uringRing) Timeout(h Handler, tag uint64, d time.Duration, fl Flags) error {
	return r.queueTimeout(h, tag, OpTimeout, d, fl)
}

func (r *uringRing) LinkTimeout(h Handler, tag uint64, d time.Duration, fl Flags) error {
	return r.queueTimeout(h, tag, OpLinkTimeout, d, fl)
}

func (r *uringRing) queueTimeout(h Handler, tag uint64, op Opcode, d time.Duration, fl Flags) error {
	s, e, err := r.queue(h, tag, op, fl)
	if err != nil {
		return err
	}
	if d < 0 {
		d = 0
	}
	s.timespec = unix.NsecToTimespec(int64(d))
	e.addr, e.len = addrOf(&s.timespec), 1
	return nil
}

// MsgRing posts to target with IORING_MSG_DATA. The post carries this package's marker in the CQE
// flags (IORING_MSG_RING_FLAGS_PASS) so the target tells messages from its own completions.
func (r *uringRing) MsgRing(h Handler, tag uint64, target Ring, res int32, msgTag uint64, fl Flags) error {
	t, ok := target.(*uringRing)
	if !ok {
		return ErrUnsupported
	}
	if t.peersClosed.Load() {
		// Its fd number may already name another file. A target must outlive the posts to it; this
		// catches the plain case of a post after Close.
		return r.postEmulated(h, tag, OpMsgRing, fl, -int32(unix.EBADFD))
	}
	s, e, err := r.queue(h, tag, OpMsgRing, fl)
	if err != nil {
		return err
	}
	s.target = target
	e.fd, e.len, e.off = int32(t.fd), uint32(res), msgTag
	e.opFlags, e.fileIndex = msgRingFlagsPass, msgCQEMarker
	return nil
}
