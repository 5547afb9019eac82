package ring

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ringstream/ringstream/internal/allocs"
)

// countHandler counts completions and remembers the last failure, without allocating.
type countHandler struct {
	n      int
	failed int
}

func (h *countHandler) Complete(c Completion) {
	h.n++
	if c.Err() != nil {
		h.failed++
	}
}

// driveCount submits and dispatches until h has seen want completions.
func driveCount(t *testing.T, r Ring, h *countHandler, want int) {
	for h.n < want {
		if err := r.Wait(1); err != nil {
			t.Fatal(err)
		}
		r.Dispatch()
	}
}

// runSteadyStateAllocs pins the no-allocation promise of queue, submit and dispatch on one backend
// (TestSteadyStateAllocatesNothing runs it on both): nops, a linked writev+fdatasync, pread, and a
// send/recv pair over loopback TCP.
func runSteadyStateAllocs(t *testing.T, newRing newRingFunc) {
	r := testRing(t, newRing, 64)
	f := tempFile(t)
	fd := int(f.Fd())
	pathA, pathB := f.Name(), f.Name()+".b"
	h := &countHandler{}
	block := make([]byte, 4096)
	bufs := [][]byte{block[:1024], block[1024:]}
	client, server := tcpPair(t, r)
	msg := make([]byte, 256)
	in := make([]byte, 256)
	cases := []struct {
		name string
		ops  int
		run  func() error
	}{
		{"nop x8", 8, func() error {
			for i := 0; i < 8; i++ {
				if err := r.Nop(h, uint64(i), 0); err != nil {
					return err
				}
			}
			return nil
		}},
		{"writev+fdatasync", 2, func() error {
			if err := r.Writev(h, 1, fd, bufs, 0, Link); err != nil {
				return err
			}
			return r.Fsync(h, 2, fd, true, 0)
		}},
		{"read", 1, func() error { return r.Read(h, 3, fd, block, 0, 0) }},
		{"renameat there and back", 2, func() error {
			if err := r.RenameAt(h, 6, unix.AT_FDCWD, pathA, unix.AT_FDCWD, pathB, 0, Link); err != nil {
				return err
			}
			return r.RenameAt(h, 7, unix.AT_FDCWD, pathB, unix.AT_FDCWD, pathA, 0, 0)
		}},
		{"send+recv", 2, func() error {
			if err := r.Send(h, 4, client, msg, 0, 0); err != nil {
				return err
			}
			return r.Recv(h, 5, server, in, unix.MSG_WAITALL, 0)
		}},
	}
	for _, c := range cases {
		got := allocs.In(t, 200, func() {
			want := h.n + c.ops
			if err := c.run(); err != nil {
				t.Fatal(err)
			}
			driveCount(t, r, h, want)
		})
		if got != 0 {
			t.Errorf("%s: %d allocations in 200 runs, want 0", c.name, got)
		}
	}
	// A vector of two buffers on a slot that never carried one: the free stack hands out slots in
	// completion order, so steady state reaches slots a warm-up never used.
	fresh := testRing(t, newRing, 64)
	warmed := false
	got := allocs.In(t, 1, func() {
		if !warmed { // In's warm-up call: the slots must stay fresh for the counted one
			warmed = true
			return
		}
		want := h.n + 64
		for i := range 64 {
			if err := fresh.Writev(h, uint64(i), fd, bufs, 0, 0); err != nil {
				t.Fatal(err)
			}
		}
		driveCount(t, fresh, h, want)
	})
	if got != 0 {
		t.Errorf("writev of two buffers on 64 fresh slots: %d allocations, want 0", got)
	}
	if h.failed != 0 {
		t.Fatalf("%d operations failed", h.failed)
	}
}
