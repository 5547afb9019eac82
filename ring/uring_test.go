package ring

import (
	"errors"
	"runtime"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// iouringOrSkip builds an io_uring ring on a locked thread, or skips where the kernel refuses it
// (fails instead under RINGSTREAM_REQUIRE_IOURING=1, as ringtest.ForEachBackend does).
func iouringOrSkip(t *testing.T, entries uint32) *uringRing {
	t.Helper()
	r, err := newIOUringRing(entries)
	if errors.Is(err, ErrUnavailable) && requireIOUring() {
		t.Fatalf("io_uring refused and RINGSTREAM_REQUIRE_IOURING=1: %v", err)
	}
	if errors.Is(err, ErrUnavailable) {
		t.Skipf("io_uring refused: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r.(*uringRing)
}

func TestIOUringInfo(t *testing.T) {
	lockThread(t)
	r := iouringOrSkip(t, 16)
	info := r.Info()
	if info.Backend != BackendIOUring || info.FallbackReason != "" {
		t.Fatalf("backend %q reason %q", info.Backend, info.FallbackReason)
	}
	if info.SQEntries != 16 || info.CQEntries != 32 {
		t.Fatalf("sq %d cq %d, want 16 and 32", info.SQEntries, info.CQEntries)
	}
	if !slices.Contains(info.SetupFlags, "CQSIZE") {
		t.Fatalf("setup flags %v lack CQSIZE", info.SetupFlags)
	}
	// Whatever set was accepted, every set tried before it is listed as refused.
	if !slices.Contains(info.SetupFlags, "SINGLE_ISSUER") && len(info.SetupRefused) == 0 {
		t.Fatalf("SINGLE_ISSUER not accepted, yet nothing listed as refused")
	}
	for _, op := range []Opcode{OpNop, OpRead, OpWrite, OpFsync, OpFtruncate} {
		if !info.Has(op) {
			t.Fatalf("ops %v lack %v", info.Ops, op)
		}
	}
	t.Logf("setup %v refused %v features %v ops %v", info.SetupFlags, info.SetupRefused, info.Features, info.Ops)
}

// TestIOUringFtruncateWithoutOpcode drops IORING_OP_FTRUNCATE from the probe, as on kernels before
// 6.9, and checks that Ftruncate still truncates and completes through Dispatch.
func TestIOUringFtruncateWithoutOpcode(t *testing.T) {
	lockThread(t)
	r := iouringOrSkip(t, 8)
	r.probed[kopFtruncate] = false
	f := tempFile(t)
	if _, err := f.Write(make([]byte, 5000)); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	if err := r.Ftruncate(rec, 1, int(f.Fd()), 77, 0); err != nil {
		t.Fatal(err)
	}
	if err := r.Nop(rec, 2, 0); err != nil {
		t.Fatal(err)
	}
	drive(t, r, rec, 2)
	mustOK(t, rec.byTag(t, 1))
	if st, _ := f.Stat(); st.Size() != 77 {
		t.Fatalf("size %d, want 77", st.Size())
	}
	if r.InFlight() != 0 {
		t.Fatalf("in flight %d", r.InFlight())
	}
}

// TestIOUringWrongThreadIsAnError: under SINGLE_ISSUER the kernel refuses a submission from any thread
// but the ring's (under COOP_TASKRUN the first thread to submit becomes it; under DEFER_TASKRUN the
// creator is it, and even a bare wait from elsewhere is refused); Wait says so instead of panicking or
// hanging.
func TestIOUringWrongThreadIsAnError(t *testing.T) {
	lockThread(t)
	r := iouringOrSkip(t, 8)
	if !slices.Contains(r.Info().SetupFlags, "SINGLE_ISSUER") {
		t.Skip("ring set up without SINGLE_ISSUER")
	}
	rec := &recorder{}
	if err := r.Nop(rec, 1, 0); err != nil {
		t.Fatal(err)
	}
	drive(t, r, rec, 1) // the owning thread submits first
	if err := r.Nop(rec, 2, 0); err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() {
		runtime.LockOSThread() // a different thread, for certain
		done <- r.Wait(0)
	}()
	err := <-done
	if !errors.Is(err, unix.EEXIST) || !strings.Contains(err.Error(), "thread other than") {
		t.Fatalf("wait from another thread: %v, want the SINGLE_ISSUER error", err)
	}
	// The owning thread still drives the ring, the refused submission included.
	drive(t, r, rec, 2)
}
