package ring_test

import (
	"testing"

	"github.com/ringstream/ringstream/ring"
	"github.com/ringstream/ringstream/ring/ringtest"
)

// The shared suites, run once per backend through ringtest, so a machine that refuses io_uring skips
// (or, in CI, fails) the io_uring half with the reason instead of failing every operation.

func TestConformance(t *testing.T) {
	ringtest.ForEachBackend(t, ring.RunConformance)
}

func TestSteadyStateAllocatesNothing(t *testing.T) {
	ringtest.ForEachBackend(t, ring.RunSteadyStateAllocs)
}
