package ring_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/ringstream/ringstream/ring"
	"github.com/ringstream/ringstream/ring/ringtest"
)

// reentrant is a handler that, on its first completion, does what a handler may not: drive the ring
// it runs inside.
type reentrant struct {
	r     ring.Ring
	drive func(ring.Ring)
	got   int
}

func (h *reentrant) Complete(ring.Completion) {
	h.got++
	if h.got == 2 { // not the first of the batch: the guard must hold across every handler call
		h.drive(h.r)
	}
}

// TestHandlerDrivingRingAsserts: Wait or Dispatch called from inside a handler that this ring's
// Dispatch runs is a programmer error (it loses the batch's other completions), and crashes with a
// constant message on both backends.
func TestHandlerDrivingRingAsserts(t *testing.T) {
	cases := []struct {
		name  string
		drive func(ring.Ring)
		want  string
	}{
		{"Wait", func(r ring.Ring) { r.Wait(0) }, "ring: Wait called from a handler"},
		{"Wait1", func(r ring.Ring) { r.Wait(1) }, "ring: Wait called from a handler"},
		{"Dispatch", func(r ring.Ring) { r.Dispatch() }, "ring: Dispatch called from a handler"},
	}
	ringtest.ForEachBackend(t, func(t *testing.T, b ring.Backend) {
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				r := ringtest.New(t, b, 8)
				h := &reentrant{r: r, drive: c.drive}
				for tag := uint64(1); tag <= 3; tag++ {
					if err := r.Nop(h, tag, 0); err != nil {
						t.Fatal(err)
					}
				}
				if err := r.Wait(3); err != nil {
					t.Fatal(err)
				}
				if got := dispatchRecovering(r); got != c.want {
					t.Fatalf("panic %v, want %q", got, c.want)
				}
			})
		}
	})
}

// dispatchRecovering runs Dispatch and returns what it panicked with (nil when it did not).
func dispatchRecovering(r ring.Ring) (v any) {
	defer func() { v = recover() }()
	r.Dispatch()
	return nil
}

// chainer queues a linked write + fdatasync from inside the completion of tag 1, and submits it:
// queueing and Submit from a handler stay allowed (a log queues its next commit from a completion).
type chainer struct {
	r    ring.Ring
	fd   int
	data []byte
	got  []ring.Completion
	errs []error
}

func (h *chainer) Complete(c ring.Completion) {
	h.got = append(h.got, c)
	if c.Tag != 1 {
		return
	}
	if err := h.r.Write(h, 2, h.fd, h.data, 0, ring.Link); err != nil {
		h.errs = append(h.errs, err)
	}
	if err := h.r.Fsync(h, 3, h.fd, true, 0); err != nil {
		h.errs = append(h.errs, err)
	}
	if _, err := h.r.Submit(); err != nil {
		h.errs = append(h.errs, err)
	}
}

func TestHandlerMayQueueAndSubmit(t *testing.T) {
	ringtest.ForEachBackend(t, func(t *testing.T, b ring.Backend) {
		r := ringtest.New(t, b, 8)
		f, err := os.Create(filepath.Join(t.TempDir(), "f"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		h := &chainer{r: r, fd: int(f.Fd()), data: []byte("queued from a handler")}
		if err := r.Nop(h, 1, 0); err != nil {
			t.Fatal(err)
		}
		for len(h.got) < 3 {
			if err := r.Wait(1); err != nil {
				t.Fatal(err)
			}
			r.Dispatch()
		}
		if len(h.errs) != 0 {
			t.Fatalf("queueing from a handler: %v", h.errs)
		}
		for i, c := range h.got {
			if c.Tag != uint64(i+1) || c.Err() != nil {
				t.Fatalf("completion %d: %+v (%v)", i, c, c.Err())
			}
		}
		back, err := os.ReadFile(f.Name())
		if err != nil || string(back) != string(h.data) {
			t.Fatalf("file holds %q (%v), want %q", back, err, h.data)
		}
		if r.InFlight() != 0 {
			t.Fatalf("in flight %d", r.InFlight())
		}
	})
}
