package ring

import (
	"os"
	"testing"
)

// Seams for the external tests (package ring_test), which run through ringtest.ForEachBackend and so
// cannot live inside package ring: ringtest imports ring.

// RunConformance runs the shared conformance suite against backend b.
func RunConformance(t *testing.T, b Backend) { runConformance(t, backendRingFunc(b)) }

// RunSteadyStateAllocs pins the no-allocation promise on backend b.
func RunSteadyStateAllocs(t *testing.T, b Backend) { runSteadyStateAllocs(t, backendRingFunc(b)) }

// backendRingFunc builds rings of backend b for the suites written against newRingFunc.
func backendRingFunc(b Backend) newRingFunc {
	return func(entries uint32) (Ring, error) {
		return New(Config{Backend: b, Entries: entries, Logger: quietLogger()})
	}
}

// requireIOUring mirrors ringtest.RequireEnv for the internal tests that need io_uring's internals
// (ringtest cannot be imported here: it imports ring).
func requireIOUring() bool { return os.Getenv("RINGSTREAM_REQUIRE_IOURING") == "1" }
