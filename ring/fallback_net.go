package ring

import (
	"time"

	"golang.org/x/sys/unix"
)

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

func (r *fallbackRing) Send(h Handler, tag uint64, fd int, buf []byte, msgFlags int, fl Flags) error {
	return ErrUnsupported
}

func (r *fallbackRing) Recv(h Handler, tag uint64, fd int, buf []byte, msgFlags int, fl Flags) error {
	return ErrUnsupported
}

func (r *fallbackRing) Sendmsg(h Handler, tag uint64, fd int, bufs [][]byte, msgFlags int, fl Flags) error {
	return ErrUnsupported
}

// SendZC has no zero-copy path without io_uring.
func (r *fallbackRing) SendZC(h Handler, tag uint64, fd int, buf []byte, msgFlags int, fl Flags) error {
	return ErrUnsupported
}

func (r *fallbackRing) Accept(h Handler, tag uint64, fd int, fl Flags) error {
	return ErrUnsupported
}

func (r *fallbackRing) Connect(h Handler, tag uint64, fd int, sa unix.Sockaddr, fl Flags) error {
	return ErrUnsupported
}

func (r *fallbackRing) Timeout(h Handler, tag uint64, d time.Duration, fl Flags) error {
	return ErrUnsupported
}

func (r *fallbackRing) LinkTimeout(h Handler, tag uint64, d time.Duration, fl Flags) error {
	return ErrUnsupported
}

// executeParkable runs the operations that may have to wait.
func (r *fallbackRing) executeParkable(idx int32, s *slot, fd int) (int32, bool) {
	switch s.op {
	case OpMsgRing:
		return s.target.(*fallbackRing).inbox.post(s.msgTag, s.msgRes), false
	}
	return -int32(unix.EOPNOTSUPP), false
}

func (r *fallbackRing) startLinkTimeout(s *slot)  {}
func (r *fallbackRing) cancelLinkTimeout(s *slot) {}
func (r *fallbackRing) resumeParked(sockets bool) {}
func (r *fallbackRing) pollTimeoutMs() int        { return -1 }
