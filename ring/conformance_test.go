package ring

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// newRingFunc builds a ring of one backend. The suite calls it on a locked OS thread.
type newRingFunc func(entries uint32) (Ring, error)

// recorder is a Handler that keeps every completion it receives, in order.
type recorder struct {
	got []Completion
}

func (c *recorder) Complete(comp Completion) { c.got = append(c.got, comp) }

func (c *recorder) byTag(t *testing.T, tag uint64) Completion {
	t.Helper()
	for _, comp := range c.got {
		if comp.Tag == tag {
			return comp
		}
	}
	t.Fatalf("no completion with tag %d (have %d completions)", tag, len(c.got))
	return Completion{}
}

// testRing locks the calling goroutine to its thread (left locked, so the thread exits with the test)
// and builds a ring that is closed when the test ends.
func testRing(t *testing.T, newRing newRingFunc, entries uint32) Ring {
	t.Helper()
	runtime.LockOSThread()
	r, err := newRing(entries)
	if err != nil {
		t.Fatalf("new ring: %v", err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// drive submits and dispatches until rec holds want completions.
func drive(t *testing.T, r Ring, rec *recorder, want int) {
	t.Helper()
	for len(rec.got) < want {
		if err := r.Wait(1); err != nil {
			t.Fatalf("wait: %v", err)
		}
		r.Dispatch()
	}
	if len(rec.got) != want {
		t.Fatalf("got %d completions, want %d", len(rec.got), want)
	}
}

func tempFile(t *testing.T) *os.File {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(t.TempDir(), "data"), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func mustOK(t *testing.T, c Completion) {
	t.Helper()
	if err := c.Err(); err != nil {
		t.Fatalf("tag %d: %v", c.Tag, err)
	}
}

// runConformance runs every behaviour the Ring contract promises against one backend, on real files
// and real loopback sockets.
func runConformance(t *testing.T, newRing newRingFunc) {
	tests := []struct {
		name string
		fn   func(*testing.T, newRingFunc)
	}{
		{"Nop", testNop},
		{"WriteThenReadBack", testWriteThenReadBack},
		{"LinkedWriteFdatasync", testLinkedWriteFdatasync},
		{"FailedLinkCancelsRest", testFailedLinkCancelsRest},
		{"Ftruncate", testFtruncate},
		{"WritevReadv", testWritevReadv},
		{"BadFdReturnsError", testBadFdReturnsError},
		{"OpenatClose", testOpenatClose},
		{"MkdirAt", testMkdirAt},
		{"UnlinkAt", testUnlinkAt},
		{"RenameAt", testRenameAt},
		{"Fallocate", testFallocate},
		{"Statx", testStatx},
		{"PathOpsLinkedAfterWrite", testPathOpsLinkedAfterWrite},
		{"PathFailureCancelsChain", testPathFailureCancelsChain},
		{"PathBadArguments", testPathBadArguments},
		{"WriteAtFilePosition", testWriteAtFilePosition},
		{"QueueFullIsBackPressure", testQueueFullIsBackPressure},
		{"MixedOps100k", testMixedOps100k},
		{"RegisteredBuffers", testRegisteredBuffers},
		{"RegisteredFiles", testRegisteredFiles},
		{"RegistrationErrors", testRegistrationErrors},
		{"MsgRingBetweenRings", testMsgRingBetweenRings},
		{"ClosedRing", testClosedRing},
		{"AcceptConnectSendRecvTCP", testSendRecvTCP},
		{"SendmsgGather", testSendmsgGather},
		{"SendZC", testSendZC},
		{"ConnectRefused", testConnectRefused},
		{"TimeoutFires", testTimeoutFires},
		{"LinkTimeoutCancelsRecv", testLinkTimeoutCancelsRecv},
		{"LinkTimeoutNotReached", testLinkTimeoutNotReached},
		{"LinkTimeoutAloneIsInvalid", testLinkTimeoutAloneIsInvalid},
		{"BadArgumentsComplete", testBadArgumentsComplete},
		{"MsgRingToClosedRing", testMsgRingToClosedRing},
		{"WaitAllRecvWaitsForAll", testWaitAllRecvWaitsForAll},
		{"WaitAllSendSendsAll", testWaitAllSendSendsAll},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, newRing) })
	}
}

func testClosedRing(t *testing.T, newRing newRingFunc) {
	runtime.LockOSThread()
	r, err := newRing(8)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.Nop(&recorder{}, 1, 0); !errors.Is(err, ErrClosed) {
		t.Fatalf("nop on a closed ring: %v, want ErrClosed", err)
	}
	if _, err := r.Submit(); !errors.Is(err, ErrClosed) {
		t.Fatalf("submit on a closed ring: %v, want ErrClosed", err)
	}
	if err := r.Wait(1); !errors.Is(err, ErrClosed) {
		t.Fatalf("wait on a closed ring: %v, want ErrClosed", err)
	}
	if n := r.Dispatch(); n != 0 {
		t.Fatalf("dispatch on a closed ring: %d", n)
	}
	if err := r.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("second close: %v, want ErrClosed", err)
	}
}

// closedFd returns a descriptor number that is not open: one far above any this test process opens.
func closedFd(t *testing.T) int {
	t.Helper()
	const fd = 1<<20 - 3
	if _, err := unix.FcntlInt(fd, unix.F_GETFD, 0); !errors.Is(err, unix.EBADF) {
		t.Fatalf("fd %d is open", fd)
	}
	return fd
}

// lockThread locks the test goroutine to its thread for the rest of the test; the thread exits with it.
func lockThread(t *testing.T) {
	t.Helper()
	runtime.LockOSThread()
}
