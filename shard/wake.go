package shard

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/ringstream/ringstream/ring"
)

// waker lets any goroutine end a shard's wait on its ring. It is a pair of connected datagram
// sockets: the shard keeps a Recv armed on one end, and Wake writes one byte on the other. Both
// backends serve a socket Recv (io_uring polls it, the fallback parks it on epoll), so nothing in the
// ring has to be safe from another thread. Wakes are coalesced: while one is pending, further calls
// write nothing.
type waker struct {
	rd, wr  int
	pending atomic.Bool // a byte was written and the shard has not yet taken it

	mu     sync.Mutex // orders Wake's write against close, so the fd number is never reused under it
	closed bool

	buf      [16]byte // the Recv's buffer: kept alive by the waker until its completion
	inFlight bool     // the Recv is on the ring (shard goroutine only)
}

func newWaker() (*waker, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("shard: wakeup socketpair: %w", err)
	}
	return &waker{rd: fds[0], wr: fds[1]}, nil
}

// wake writes one byte unless a wakeup is already pending. Safe from any goroutine, at any time,
// also after the shard ended (it then does nothing).
func (w *waker) wake() {
	if !w.pending.CompareAndSwap(false, true) {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return
	}
	// EAGAIN means the socket buffer holds unread bytes: the shard is woken anyway.
	one := [1]byte{1}
	_, _ = unix.Write(w.wr, one[:])
}

// force writes a byte whatever pending says: the shard's drain uses it to complete its own Recv.
func (w *waker) force() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.closed {
		one := [1]byte{1}
		_, _ = unix.Write(w.wr, one[:])
	}
}

// arm posts the Recv on the shard's ring. It returns false when the ring had no room even after a
// Submit; the loop tries again after its next Dispatch.
func (w *waker) arm(r ring.Ring, h ring.Handler, tag uint64) bool {
	if w.inFlight {
		return true
	}
	err := r.Recv(h, tag, w.rd, w.buf[:], 0, 0)
	if errors.Is(err, ring.ErrQueueFull) {
		_, _ = r.Submit()
		err = r.Recv(h, tag, w.rd, w.buf[:], 0, 0)
	}
	w.inFlight = err == nil
	return w.inFlight
}

// taken is called when the Recv completed: the next wake writes again.
func (w *waker) taken() {
	w.inFlight = false
	w.pending.Store(false)
}

// close closes both ends; a later wake does nothing.
func (w *waker) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return
	}
	w.closed = true
	unix.Close(w.rd)
	unix.Close(w.wr)
}
