package streamsim

import (
	"flag"
	"testing"
)

var (
	seedFlag   = flag.Uint64("seed", 0, "run only this seed of TestSim (a failing seed's one-line repro)")
	seedsFlag  = flag.Int("seeds", 200, "seeds TestSim runs")
	firstFlag  = flag.Uint64("first", 1, "first seed TestSim runs")
	keepGoing  = flag.Bool("keepgoing", false, "TestSim logs each failing seed and goes on, failing at the end")
	verbose    = flag.Bool("simlog", false, "log the run's events")
	recOnly    = flag.Bool("recordonly", false, "TestBrokenVariants also hunts each variant with the record checks only (informational)")
	quorumOnce = flag.Bool("quorumonce", false, "report an owner's lost quorum once per epoch, as shard/heartbeat did before issue 22 (quorum.go)")
	window     = flag.Int("quorumwindow", 0, "the owners' R24 quorum window in ticks (0: the default)")
	atArrival  = flag.Bool("quorumarrival", false, "count a CommitReply when it arrives, as shard/heartbeat did before issue 22 (quorum.go)")
	noInPlace  = flag.Bool("noinplace", false, "reopen every copy from its disk on each assignment, never Reassign in place")
)

func options(t *testing.T, seed uint64, v Variant) Options {
	o := Options{Seed: seed, Variant: v, QuorumOncePerEpoch: *quorumOnce, QuorumWindowTicks: *window,
		QuorumReplyAtArrival: *atArrival, NoInPlace: *noInPlace}
	if *verbose {
		o.Log = t.Logf
	}
	return o
}

// TestSim runs the simulator over many seeds with every fault and the real protocol; every check
// must hold after every step.
func TestSim(t *testing.T) {
	first, last := seedRange()
	var sum Stats
	failovers := 0
	for seed := first; seed <= last; seed++ {
		st, err := runSeed(t, seed, Correct)
		if err != nil && *keepGoing {
			t.Errorf("%v\nrepro: go test ./engine/sim/streamsim -run TestSim -seed=%d -simlog", err, seed)
		} else if err != nil {
			t.Fatalf("%v\nrepro: go test ./engine/sim/streamsim -run TestSim -seed=%d -simlog", err, seed)
		}
		sum.Acked += st.Acked
		sum.Confirmed += st.Confirmed
		sum.Accepted += st.Accepted
		sum.AcceptedDiverged += st.AcceptedDiverged
		sum.Shrunken += st.Shrunken
		sum.Empty += st.Empty
		sum.Pauses += st.Pauses
		sum.Stuck += st.Stuck
		sum.Reads += st.Reads
		sum.InPlace += st.InPlace
		sum.QuorumLost += st.QuorumLost
		sum.BatchOps += st.BatchOps
		sum.BatchRefused += st.BatchRefused
		if st.MaxEpoch > 1 {
			failovers++
		}
		if (seed-first+1)%1000 == 0 {
			t.Logf("seeds %d..%d pass", first, seed)
		}
	}
	n := int(last - first + 1)
	t.Logf("seeds %d..%d: %d batches acknowledged, %d confirmed, %d runs with a failover, %d shrunken "+
		"assignments, %d empty replacement copies, %d owners woken after their failover, %d accepted losses "+
		"(%d then with a divergent follower), %d streams stuck at the end, %d fetch replies checked against "+
		"earlier confirms and reads, %d assignments applied in place, %d owners that lost their quorum, "+
		"%d batch metadata ops (%d entries refused alone)", first, last, sum.Acked, sum.Confirmed, failovers,
		sum.Shrunken, sum.Empty, sum.Pauses, sum.Accepted, sum.AcceptedDiverged, sum.Stuck, sum.Reads, sum.InPlace,
		sum.QuorumLost, sum.BatchOps, sum.BatchRefused)
	if n >= 20 && (sum.Acked < 10*n || failovers < n/3) {
		t.Fatalf("the runs did too little to prove anything")
	}
}

// seedRange is the seeds TestSim and TestSimDiskErrors run: -seed alone, else -seeds from -first
// (20 of them at most under the race detector, which the single-goroutine simulator does not need).
func seedRange() (first, last uint64) {
	if *seedFlag != 0 {
		return *seedFlag, *seedFlag
	}
	seeds := *seedsFlag
	if raceEnabled && seeds > 20 {
		seeds = 20
	}
	return *firstFlag, *firstFlag + uint64(seeds) - 1
}

// skipUnderRace skips a long seed loop in the race pass; the plain pass runs it.
func skipUnderRace(t *testing.T) {
	t.Helper()
	if raceEnabled {
		t.Skip("the simulator runs on one goroutine; the plain pass runs this loop")
	}
}

func runSeed(t *testing.T, seed uint64, v Variant) (Stats, error) {
	return Run(options(t, seed, v))
}

// TestBrokenVariants: each test-only broken variant is caught within 1,000 seeds; the seed that
// caught it is logged.
func TestBrokenVariants(t *testing.T) {
	skipUnderRace(t)
	modes := []bool{false}
	if *recOnly {
		modes = append(modes, true)
	}
	for _, only := range modes {
		for _, v := range []Variant{NoPrefixGuard, SealRMinus1, RawTailSeal, ConfirmWMinus1, AckBeforeFsync, OwnerQuorumOne,
			QuorumBackAfterOneReply, BatchCommitsAll} {
			name := v.String()
			if only {
				name += " (record checks only)"
			}
			t.Run(name, func(t *testing.T) { hunt(t, v, only) })
		}
	}
}

// hunt runs seeds of variant v until a check fails, at most 1,000.
func hunt(t *testing.T, v Variant, recordChecksOnly bool) {
	for seed := uint64(1); seed <= 1000; seed++ {
		o := options(t, seed, v)
		o.RecordChecksOnly = recordChecksOnly
		if _, err := Run(o); err != nil {
			t.Logf("caught at seed %d: %v", seed, err)
			return
		}
	}
	if recordChecksOnly {
		// Informational: the requirement is on the full checks, which fire before a record is lost.
		t.Logf("%s survived 1,000 seeds with the record checks only", v)
		return
	}
	t.Fatalf("%s survived 1,000 seeds", v)
}

// TestRecoveryTime measures, in ticks, the failover of 1, 100 and 1,000 streams losing their owner
// at once (control.DefaultConfig: eager failover grace 20 ticks), and the same when the lost node
// also held the metadata primary.
func TestRecoveryTime(t *testing.T) {
	for _, withPrimary := range []bool{false, true} {
		for _, n := range []int{1, 100, 1000} {
			if n == 1000 && testing.Short() {
				continue
			}
			r, err := MeasureRecovery(n, 2, withPrimary)
			if err != nil {
				t.Fatalf("%d streams: %v", n, err)
			}
			t.Log(r)
		}
	}
}

// TestSim_CursorOnlyCutSeed keeps the cursor-cut finding's seed (doc.go) passing: with log epochs
// dropped on a cursor-only cut, it cuts a confirmed record at tick 571.
func TestSim_CursorOnlyCutSeed(t *testing.T) {
	if _, err := runSeed(t, 11829, Correct); err != nil {
		t.Fatalf("%v\nrepro: go test ./engine/sim/streamsim -run TestSim -seed=11829 -simlog", err)
	}
}

// TestRegressionSeeds replays the seeds that once found a violation, each named with its finding.
func TestRegressionSeeds(t *testing.T) {
	for _, c := range []struct {
		seed    uint64
		finding string
	}{
		{322682, "an accept-loss without a history start let a copy returning from epoch 1 follow at epoch 4 " +
			"with a suffix the epoch 3 owner overwrote; the next recovery promoted it (control refuses such an accept)"},
		{8182, "an owner paused right after it applied its assignment woke with a fresh R24 window and served a " +
			"read below its successor's confirm (the window opens when the copy takes the role: quorum.go)"},
		{10593, "an owner paused after it lost its quorum heard it back on waking from replies to Commits sent " +
			"before the pause, and served a read below its successor's confirm (replies count only within the window)"},
	} {
		if _, err := runSeed(t, c.seed, Correct); err != nil {
			t.Errorf("seed %d (%s): %v", c.seed, c.finding, err)
		}
	}
}

// Every variant parses back from its name (ringstream streamsim --variant).
func TestParseVariant_EveryVariantByName(t *testing.T) {
	for v := Correct; v <= BatchCommitsAll; v++ {
		if got, err := ParseVariant(v.String()); err != nil || got != v {
			t.Fatalf("%s: %v %v", v, got, err)
		}
	}
}
