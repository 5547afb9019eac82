package ringtest

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"testing"

	"github.com/ringstream/ringstream/ring"
)

// RequireEnv is the environment variable that turns a skipped io_uring subtest into a failure. CI
// sets it to 1, so a machine or container that refuses io_uring cannot pass CI on the fallback alone.
const RequireEnv = "RINGSTREAM_REQUIRE_IOURING"

// Backends are the backends ForEachBackend runs, in order.
func Backends() []ring.Backend { return []ring.Backend{ring.BackendIOUring, ring.BackendFallback} }

// Available reports whether an io_uring ring can be set up on this machine, and when it cannot, why
// (the errno io_uring_setup gave, and the io_uring_disabled sysctl when it is set).
func Available() (ok bool, reason string) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	r, err := ring.New(ring.Config{Backend: ring.BackendIOUring, Entries: 4, Logger: QuietLogger()})
	if err != nil {
		return false, err.Error()
	}
	if err := r.Close(); err != nil {
		return false, fmt.Sprintf("io_uring ring set up but not closed: %v", err)
	}
	return true, ""
}

// ForEachBackend runs f as one subtest per backend, "io_uring" then "fallback". Where io_uring cannot
// be set up here (ENOSYS, EPERM, kernel.io_uring_disabled, a seccomp profile), the io_uring subtest is
// skipped with the reason; with RINGSTREAM_REQUIRE_IOURING=1 in the environment that skip is a
// failure instead (CI sets it). Each subtest runs f on a goroutine locked to its OS thread.
func ForEachBackend(t *testing.T, f func(t *testing.T, b ring.Backend)) {
	t.Helper()
	forEachBackend(t, Available, os.Getenv(RequireEnv), f)
}

// forEachBackend is ForEachBackend with the probe and the variable's value as parameters, so the
// package's own tests can play a machine that refuses io_uring without touching the sysctl.
func forEachBackend(t *testing.T, probe func() (bool, string), require string, f func(*testing.T, ring.Backend)) {
	t.Helper()
	mustIOUring, err := parseRequire(require)
	if err != nil {
		t.Fatal(err)
	}
	ok, reason := probe()
	for _, b := range Backends() {
		t.Run(string(b), func(t *testing.T) {
			if b == ring.BackendIOUring && !ok {
				if mustIOUring {
					t.Fatalf("ringtest: io_uring unavailable and %s=1: %s", RequireEnv, reason)
				}
				t.Skipf("ringtest: io_uring unavailable: %s", reason)
			}
			runtime.LockOSThread() // never unlocked: the thread exits with the subtest
			f(t, b)
		})
	}
}

// errRequireValue: RINGSTREAM_REQUIRE_IOURING holds neither "", "0" nor "1".
var errRequireValue = errors.New("ringtest: bad value")

func parseRequire(v string) (bool, error) {
	switch v {
	case "", "0":
		return false, nil
	case "1":
		return true, nil
	}
	return false, fmt.Errorf("%w: %s=%q, want 1 (io_uring required) or 0 or unset", errRequireValue, RequireEnv, v)
}

// New builds a ring of backend b with the given submission queue size, and closes it when the test
// ends. It locks the calling goroutine to its OS thread for good (the thread exits with the test), so
// the ring may be driven from that goroutine, nested subtests' goroutines included. A ring that cannot
// be built fails the test: ForEachBackend has already skipped a refused io_uring.
func New(t testing.TB, b ring.Backend, entries uint32) ring.Ring {
	t.Helper()
	runtime.LockOSThread()
	r, err := ring.New(ring.Config{Backend: b, Entries: entries, Logger: QuietLogger()})
	if err != nil {
		t.Fatalf("ringtest: new %s ring: %v", b, err)
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil && !errors.Is(err, ring.ErrClosed) {
			t.Errorf("ringtest: close %s ring: %v", b, err)
		}
	})
	return r
}

// QuietLogger discards the ring's setup log, which tests do not need to see.
func QuietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
