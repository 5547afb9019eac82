package vsr_test

import (
	"errors"
	"flag"
	"strings"
	"testing"

	"github.com/ringstream/ringstream/engine/sim"
	"github.com/ringstream/ringstream/engine/vsr"
)

var (
	brokenCount = flag.Bool("broken-count", false,
		"run every broken variant over all 1,000 seeds and log how many catch it, instead of stopping at the first")
	brokenOutcome = flag.Bool("broken-outcome", false,
		"turn off the simulator's durability check: catch a message sent too early only by what it breaks")
)

// brokenSeedsMax is the budget within which the simulator must catch each broken variant.
const brokenSeedsMax = 1000

// catchBroken runs the simulator with hook on every replica over seeds 0 .. brokenSeedsMax-1 and
// fails unless some seed ends in a violation. It logs the seed that caught the variant (and, with
// -broken-count, how many of the seeds did).
func catchBroken(t *testing.T, hook func(*vsr.Replica)) {
	t.Helper()
	catchBrokenBy(t, hook, nil, func(error) bool { return true })
}

// catchBrokenBy is catchBroken with tune applied to each seed's options (when not nil), counting only
// the violations that caught accepts.
func catchBrokenBy(t *testing.T, hook func(*vsr.Replica), tune func(*sim.Options), caughtBy func(error) bool) {
	t.Helper()
	if raceEnabled {
		t.Skip("single-goroutine simulation: runs in the plain pass of scripts/test, not under -race")
	}
	first, caught := int64(-1), 0
	for seed := uint64(0); seed < brokenSeedsMax; seed++ {
		opts := sim.Draw(seed)
		opts.OnReplica = hook
		opts.NoDurabilityCheck = *brokenOutcome
		if tune != nil {
			tune(&opts)
		}
		_, err := sim.Run(opts)
		if err != nil && !errors.Is(err, sim.ErrViolation) {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if err == nil || !caughtBy(err) {
			continue
		}
		caught++
		if first < 0 {
			first = int64(seed)
			t.Logf("caught at seed=%d: %v", seed, err)
		}
		if !*brokenCount {
			return
		}
	}
	if first < 0 {
		t.Fatalf("the broken variant survived %d seeds: the simulator's checks are too weak", brokenSeedsMax)
	}
	t.Logf("caught by %d of %d seeds, first at seed=%d", caught, brokenSeedsMax, first)
}

// TestSim_CatchesDoViewChangeIgnoringLogView: the longest do-view-change log wins whatever its log
// view.
func TestSim_CatchesDoViewChangeIgnoringLogView(t *testing.T) { catchBroken(t, vsr.BreakIgnoreLogView) }

// TestSim_CatchesPrepareOKBeforeDurable: a backup acknowledges a prepare before the entry is durable,
// so a crash can lose an op the primary counted toward a commit.
func TestSim_CatchesPrepareOKBeforeDurable(t *testing.T) { catchBroken(t, vsr.BreakPrepareOKEarly) }

// TestSim_CatchesViewChangeBeforeDurable: do-view-change and start-view leave before the log they
// carry is durable, so a crash can lose the log a new view was built on.
func TestSim_CatchesViewChangeBeforeDurable(t *testing.T) { catchBroken(t, vsr.BreakViewChangeEarly) }

// TestSim_CatchesWipedReplicaVotingWithoutRecovery: a replica whose disk was wiped (and formatted as
// its replacement) votes and acknowledges at once with an empty log, so a view change can leave out an
// op it had acknowledged (issue 10's first repro).
func TestSim_CatchesWipedReplicaVotingWithoutRecovery(t *testing.T) {
	catchBroken(t, vsr.BreakSkipRecovery)
}

// TestSim_CatchesMixedCheckpointChunks: a state transfer takes a chunk of a newer checkpoint as the
// next one of the checkpoint it assembles and installs the bytes unchecked, so a replica can hold a
// state (client table, state machine) that no replica had at its commit. The frames' checksums leave
// no other way to corrupt a chunk, and the sender keeps serving the checkpoint being pulled, so the
// mix needs transfers that outlast two checkpoints: the runs use the smallest chunks (64 bytes, where
// a large checkpoint can also outlast the liveness bounds), and only a safety violation (digests
// differing at one commit, or a replica's assertion) counts as caught.
func TestSim_CatchesMixedCheckpointChunks(t *testing.T) {
	catchBrokenBy(t, vsr.BreakMixChunks, smallestChunks, func(err error) bool {
		return strings.Contains(err.Error(), "digest") || strings.Contains(err.Error(), "assertion: ")
	})
}

// smallestChunks makes every replica of a run move checkpoints in chunks of vsr.SnapshotChunkBytesMin.
func smallestChunks(o *sim.Options) {
	o.VSR = func(n int, self uint8) vsr.Config {
		c := sim.SimVSRConfig(n, self)
		c.SnapshotChunkBytes = vsr.SnapshotChunkBytesMin
		return c
	}
}

// TestSim_AssertionIsAViolation: a replica's state machine that asserts (meta's op order, broken by
// installing the mixed checkpoint of seed 266) ends the run as a violation naming the seed, not a
// crash of the simulator.
func TestSim_AssertionIsAViolation(t *testing.T) {
	if raceEnabled {
		t.Skip("single-goroutine simulation: runs in the plain pass of scripts/test, not under -race")
	}
	opts := sim.Draw(266)
	opts.OnReplica = vsr.BreakMixChunks
	smallestChunks(&opts)
	_, err := sim.Run(opts)
	if !errors.Is(err, sim.ErrViolation) || !strings.Contains(err.Error(), "seed=266") ||
		!strings.Contains(err.Error(), "assertion: meta: ") {
		t.Fatalf("seed 266 with mixed chunks: %v, want a violation naming meta's assertion", err)
	}
}
