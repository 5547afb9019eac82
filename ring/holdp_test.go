package ring

import (
	"errors"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// With WaitHoldsP, a thread waiting in io_uring_enter keeps the process's only P, yet the rest of
// the process still runs: a garbage collection (a stop-the-world) completes and another goroutine
// wakes the wait, all before the ring's own 3 s timeout would have ended it. The runtime reaches the
// waiter only by a signal, and the wait must yield on the EINTR it causes.
func TestWaitHoldsP_YieldsToTheRuntime(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])

	type result struct {
		rec *recorder
		err error
	}
	ready, done := make(chan error, 1), make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		r, err := New(Config{Backend: BackendIOUring, Entries: 8, Logger: quietLogger(), WaitHoldsP: true})
		if err != nil {
			ready <- err
			return
		}
		defer r.Close()
		if !r.(*uringRing).holdP {
			ready <- errors.New("WaitHoldsP not set on the ring")
			return
		}
		rec := &recorder{}
		buf := make([]byte, 1)
		if err := r.Recv(rec, 1, fds[0], buf, 0, 0); err != nil {
			ready <- err
			return
		}
		if err := r.Timeout(rec, 2, 3*time.Second, 0); err != nil {
			ready <- err
			return
		}
		ready <- nil
		err = r.Wait(1)
		r.Dispatch()
		done <- result{rec, err}
	}()
	if err := <-ready; errors.Is(err, ErrUnavailable) {
		if requireIOUring() {
			t.Fatalf("io_uring refused and RINGSTREAM_REQUIRE_IOURING=1: %v", err)
		}
		t.Skipf("io_uring refused: %v", err)
	} else if err != nil {
		t.Fatal(err)
	}
	runtime.GC() // stops the world, the waiter's P included
	if _, err := unix.Write(fds[1], []byte{1}); err != nil {
		t.Fatal(err)
	}
	res := <-done
	if res.err != nil {
		t.Fatal(res.err)
	}
	if len(res.rec.got) != 1 || res.rec.got[0].Tag != 1 {
		t.Fatalf("completions %+v, want the receive alone (tag 1): the rest of the process did not run "+
			"while the ring waited", res.rec.got)
	}
}
