package ring

import (
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Operations of the fallback backend that may have to wait: sockets (run non-blocking, parked on
// epoll while they would block), timeouts and link timeouts (parked until a deadline), and MsgRing.
//
// Sockets are registered edge-triggered for both directions the first time an operation on them
// parks. An operation is first tried after the previous attempt returned EAGAIN, so an edge after
// that attempt always produces an event: no wakeup is lost.

// What a parked slot waits for.
const (
	waitNone uint8 = iota
	waitSocket
	waitTimer
)

func (r *fallbackRing) Send(h Handler, tag uint64, fd int, buf []byte, msgFlags int, fl Flags) error {
	return r.queueSock(h, tag, OpSend, fd, buf, msgFlags, fl)
}

func (r *fallbackRing) Recv(h Handler, tag uint64, fd int, buf []byte, msgFlags int, fl Flags) error {
	return r.queueSock(h, tag, OpRecv, fd, buf, msgFlags, fl)
}

func (r *fallbackRing) queueSock(h Handler, tag uint64, op Opcode, fd int, buf []byte, msgFlags int, fl Flags) error {
	_, s, err := r.queue(h, tag, op, fl)
	if err == nil {
		s.fd, s.buf, s.msgFlags, s.off = fd, buf, msgFlags, 0 // off counts bytes done under MSG_WAITALL
	}
	return err
}

func (r *fallbackRing) Sendmsg(h Handler, tag uint64, fd int, bufs [][]byte, msgFlags int, fl Flags) error {
	_, s, err := r.queue(h, tag, OpSendmsg, fl)
	if err != nil {
		return err
	}
	s.fd, s.msgFlags = fd, msgFlags
	s.setIovecs(bufs)
	s.msghdr = unix.Msghdr{}
	if len(s.iovecs) > 0 {
		s.msghdr.Iov = &s.iovecs[0]
		s.msghdr.SetIovlen(len(s.iovecs))
	}
	return nil
}

// SendZC has no zero-copy path without io_uring.
func (r *fallbackRing) SendZC(h Handler, tag uint64, fd int, buf []byte, msgFlags int, fl Flags) error {
	if r.closed {
		return ErrClosed
	}
	return ErrUnsupported
}

// Accept puts the listening socket in non-blocking mode (the fallback's one change to a caller's
// descriptor) and accepts with SOCK_CLOEXEC; the new socket is left blocking, as io_uring leaves it.
func (r *fallbackRing) Accept(h Handler, tag uint64, fd int, fl Flags) error {
	_, s, err := r.queue(h, tag, OpAccept, fl)
	if err == nil {
		s.fd = fd
	}
	return err
}

// Connect puts the socket in non-blocking mode and parks until the connection is made or refused.
func (r *fallbackRing) Connect(h Handler, tag uint64, fd int, sa unix.Sockaddr, fl Flags) error {
	_, s, err := r.queue(h, tag, OpConnect, fl)
	if err != nil {
		return err
	}
	s.fd = fd
	n, ok := sockaddrToRaw(sa, &s.sockaddr)
	if !ok {
		n = 0
	}
	s.addrLen = n
	s.connectStarted = false
	return nil
}

func (r *fallbackRing) Timeout(h Handler, tag uint64, d time.Duration, fl Flags) error {
	_, s, err := r.queue(h, tag, OpTimeout, fl)
	if err == nil {
		s.off = int64(max(d, 0))
	}
	return err
}

// LinkTimeout bounds the operation queued before it; Submit attaches it to that operation.
func (r *fallbackRing) LinkTimeout(h Handler, tag uint64, d time.Duration, fl Flags) error {
	_, s, err := r.queue(h, tag, OpLinkTimeout, fl)
	if err == nil {
		s.off = int64(max(d, 0))
	}
	return err
}

// MsgRing posts a message into target's inbox and completes at once. A fallback inbox holds as many
// messages as the target has in-flight slots; a post to a full inbox completes with EOVERFLOW.
func (r *fallbackRing) MsgRing(h Handler, tag uint64, target Ring, res int32, msgTag uint64, fl Flags) error {
	if _, ok := target.(*fallbackRing); !ok {
		return ErrUnsupported
	}
	_, s, err := r.queue(h, tag, OpMsgRing, fl)
	if err == nil {
		s.target, s.msgRes, s.msgTag = target, res, msgTag
	}
	return err
}

// executeParkable runs the operations that may have to wait. parked reports that it now waits.
func (r *fallbackRing) executeParkable(idx int32, s *slot, fd int) (int32, bool) {
	var res int32
	switch s.op {
	case OpMsgRing:
		return s.target.(*fallbackRing).inbox.post(s.msgTag, s.msgRes), false
	case OpTimeout:
		s.waitKind = waitTimer
		s.deadlineNs = monotonicNs() + s.off
		r.parked = append(r.parked, idx)
		return 0, true
	case OpLinkTimeout:
		// Not attached (nothing queued before it in this submission carried Link): the kernel
		// refuses such a link timeout with EINVAL.
		return -int32(unix.EINVAL), false
	case OpSend:
		res = sendRecvStream(s, fd, unix.SYS_SENDTO, unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL)
	case OpRecv:
		res = sendRecvStream(s, fd, unix.SYS_RECVFROM, unix.MSG_DONTWAIT)
	case OpSendmsg:
		res = sockSyscall(unix.SYS_SENDMSG, fd, uintptr(unsafe.Pointer(&s.msghdr)), uintptr(s.msgFlags|unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL), 0)
	case OpAccept:
		if err := unix.SetNonblock(fd, true); err != nil {
			return errnoOf(err), false
		}
		res = rawSyscallRes(unix.SYS_ACCEPT4, uintptr(fd), 0, 0, unix.SOCK_CLOEXEC, 0)
	case OpConnect:
		res = r.executeConnect(fd, s)
	default:
		return -int32(unix.EOPNOTSUPP), false
	}
	if res == -int32(unix.EAGAIN) {
		r.parkSocket(idx, s, fd)
		return 0, true
	}
	return res, false
}

// executeConnect starts a non-blocking connect, or on a retry learns how it ended: EALREADY while it
// is still under way, EISCONN once it succeeded, or the error that ended it.
func (r *fallbackRing) executeConnect(fd int, s *slot) int32 {
	if s.addrLen == 0 {
		return -int32(unix.EAFNOSUPPORT)
	}
	if !s.connectStarted {
		if err := unix.SetNonblock(fd, true); err != nil {
			return errnoOf(err)
		}
	}
	res := rawSyscallRes(unix.SYS_CONNECT, uintptr(fd), uintptr(unsafe.Pointer(&s.sockaddr)), uintptr(s.addrLen), 0, 0)
	started := s.connectStarted
	s.connectStarted = true
	switch {
	case res == -int32(unix.EINPROGRESS) || res == -int32(unix.EALREADY):
		return -int32(unix.EAGAIN)
	case res == -int32(unix.EISCONN) && started:
		return 0
	}
	return res
}

// sendRecvStream runs one send or recv without blocking. Under MSG_WAITALL it goes on, across parks,
// until the whole buffer is done (as io_uring does for stream sockets), counting progress in s.off;
// it then stops early only at end of stream or on an error, returning the bytes done if any.
func sendRecvStream(s *slot, fd int, trap uintptr, extraFlags int) int32 {
	if s.msgFlags&unix.MSG_WAITALL == 0 {
		return sockSyscall(trap, fd, uintptr(unsafe.Pointer(bytePtr(s.buf))), uintptr(len(s.buf)), s.msgFlags|extraFlags)
	}
	flags := s.msgFlags&^unix.MSG_WAITALL | extraFlags
	for int(s.off) < len(s.buf) {
		rest := s.buf[s.off:]
		n := sockSyscall(trap, fd, uintptr(unsafe.Pointer(&rest[0])), uintptr(len(rest)), flags)
		switch {
		case n == -int32(unix.EAGAIN):
			return n // parks; progress so far stays in s.off
		case n < 0 && s.off > 0:
			return int32(s.off)
		case n < 0:
			return n
		case n == 0:
			return int32(s.off) // end of stream
		}
		s.off += int64(n)
	}
	return int32(s.off)
}

// sockSyscall is a four-argument socket call (the address arguments zero), retried on EINTR.
func sockSyscall(trap uintptr, fd int, a2, a3 uintptr, flags int) int32 {
	return rawSyscallRes(trap, uintptr(fd), a2, a3, uintptr(flags), 0)
}

// parkSocket registers fd with epoll (once; EEXIST means it already is) and parks the operation.
func (r *fallbackRing) parkSocket(idx int32, s *slot, fd int) {
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLOUT | unix.EPOLLRDHUP | unix.EPOLLET, Fd: int32(fd)}
	if err := unix.EpollCtl(r.epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil && err != unix.EEXIST {
		r.log.Warn("ring: fallback: epoll_ctl add", "fd", fd, "err", err)
	}
	s.waitKind = waitSocket
	s.fd = fd // resolved through the registered files, if it was an index
	s.flags &^= FixedFile
	r.parked = append(r.parked, idx)
}

// startLinkTimeout arms the link timeout of an operation that just parked.
func (r *fallbackRing) startLinkTimeout(s *slot) {
	if s.linkTimeout >= 0 {
		lt := &r.slots.slots[s.linkTimeout]
		lt.deadlineNs = monotonicNs() + lt.off
	}
}

// cancelLinkTimeout completes the link timeout of an operation that finished first (ECANCELED).
func (r *fallbackRing) cancelLinkTimeout(s *slot) {
	if s.linkTimeout >= 0 {
		lt := s.linkTimeout
		s.linkTimeout = -1
		r.complete(lt, -int32(unix.ECANCELED), 0)
	}
}

// resumeParked retries parked socket operations (when epoll reported sockets) and fires timers that
// are due, then resumes the chains of those that finished.
func (r *fallbackRing) resumeParked(sockets bool) {
	if len(r.parked) == 0 {
		return
	}
	now := monotonicNs()
	r.scratch = append(r.scratch[:0], r.parked...)
	r.parked = r.parked[:0]
	for _, idx := range r.scratch {
		s := &r.slots.slots[idx]
		switch {
		case s.waitKind == waitTimer && now >= s.deadlineNs:
			s.waitKind = waitNone
			r.complete(idx, -int32(unix.ETIME), 0)
			r.runChain(s.next, true)
		case s.waitKind == waitSocket && s.linkTimeout >= 0 && now >= r.slots.slots[s.linkTimeout].deadlineNs:
			s.waitKind = waitNone
			lt := s.linkTimeout
			s.linkTimeout = -1
			r.complete(idx, -int32(unix.ECANCELED), 0)
			r.complete(lt, -int32(unix.ETIME), 0)
			r.runChain(s.next, true)
		case s.waitKind == waitSocket && sockets:
			s.waitKind = waitNone
			res, parked := r.executeParkable(idx, s, s.fd)
			if parked {
				continue // parkSocket put it back
			}
			r.complete(idx, res, 0)
			r.cancelLinkTimeout(s)
			r.runChain(s.next, chainBreaks(s, res))
		default:
			r.parked = append(r.parked, idx)
		}
	}
}

// pollTimeoutMs is the epoll_wait timeout: until the nearest deadline of a parked timer or link
// timeout, rounded up to a millisecond, or -1 when nothing parked has a deadline.
func (r *fallbackRing) pollTimeoutMs() int {
	nearest := int64(-1)
	for _, idx := range r.parked {
		s := &r.slots.slots[idx]
		d := int64(-1)
		if s.waitKind == waitTimer {
			d = s.deadlineNs
		} else if s.linkTimeout >= 0 {
			d = r.slots.slots[s.linkTimeout].deadlineNs
		}
		if d >= 0 && (nearest < 0 || d < nearest) {
			nearest = d
		}
	}
	if nearest < 0 {
		return -1
	}
	wait := nearest - monotonicNs()
	if wait <= 0 {
		return 0
	}
	return int((wait + int64(time.Millisecond) - 1) / int64(time.Millisecond))
}

// monotonicNs is CLOCK_MONOTONIC in nanoseconds.
func monotonicNs() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0
	}
	return ts.Nano()
}
