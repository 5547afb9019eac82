package streamsim

import (
	"flag"
	"testing"
)

var (
	seedFlag  = flag.Uint64("seed", 0, "run only this seed of TestSim (a failing seed's one-line repro)")
	seedsFlag = flag.Int("seeds", 200, "seeds TestSim runs")
	verbose   = flag.Bool("simlog", false, "log the run's events")
)

func options(t *testing.T, seed uint64, v Variant) Options {
	o := Options{Seed: seed, Variant: v}
	if *verbose {
		o.Log = t.Logf
	}
	return o
}

// TestSim runs the simulator over many seeds with every fault and the real protocol; every check
// must hold after every step.
func TestSim(t *testing.T) {
	first, last := uint64(1), uint64(*seedsFlag)
	if *seedFlag != 0 {
		first, last = *seedFlag, *seedFlag
	}
	var sum Stats
	failovers := 0
	for seed := first; seed <= last; seed++ {
		st, err := runSeed(t, seed, Correct)
		if err != nil {
			t.Fatalf("%v\nrepro: go test ./engine/sim/streamsim -run TestSim -seed=%d -simlog", err, seed)
		}
		sum.Acked += st.Acked
		sum.Confirmed += st.Confirmed
		sum.Accepted += st.Accepted
		sum.Gaps += st.Gaps
		sum.Diverged += st.Diverged
		if st.MaxEpoch > 1 {
			failovers++
		}
	}
	n := int(last - first + 1)
	t.Logf("%d seeds: %d batches acknowledged, %d confirmed, %d runs with a failover, %d accepted losses, "+
		"%d streams hit the known gap (%d with a divergent follower)", n, sum.Acked, sum.Confirmed, failovers,
		sum.Accepted, sum.Gaps, sum.Diverged)
	if n >= 20 && (sum.Acked < 10*n || failovers < n/3) {
		t.Fatalf("the runs did too little to prove anything")
	}
}

func runSeed(t *testing.T, seed uint64, v Variant) (Stats, error) {
	s, err := New(options(t, seed, v))
	if err != nil {
		t.Fatal(err)
	}
	err = s.RunTicks(s.opt.Ticks + s.opt.Ticks/4)
	return s.Stats(), err
}
