package vsr_test

import (
	"errors"
	"testing"

	"github.com/ringstream/ringstream/engine/sim"
	"github.com/ringstream/ringstream/engine/vsr"
)

// TestSim_CatchesDoViewChangeIgnoringLogView proves the simulator's checks can fail: with the
// deliberately broken rule (the longest do-view-change log wins whatever its log view), some seed
// among the first 1,000 must end in a violation.
func TestSim_CatchesDoViewChangeIgnoringLogView(t *testing.T) {
	if raceEnabled {
		t.Skip("single-goroutine simulation: runs in the plain pass of scripts/test, not under -race")
	}
	for seed := uint64(0); seed < 1000; seed++ {
		opts := sim.Draw(seed)
		opts.OnReplica = vsr.BreakIgnoreLogView
		_, err := sim.Run(opts)
		if errors.Is(err, sim.ErrViolation) {
			t.Logf("caught at seed %d: %v", seed, err)
			return
		}
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
	}
	t.Fatal("the broken do-view-change survived 1,000 seeds: the simulator's checks are too weak")
}
