package streamsim

import (
	"flag"
	"testing"
)

var (
	seedFlag  = flag.Uint64("seed", 0, "run only this seed of TestSim (a failing seed's one-line repro)")
	seedsFlag = flag.Int("seeds", 200, "seeds TestSim runs")
	verbose   = flag.Bool("simlog", false, "log the run's events")
	recOnly   = flag.Bool("recordonly", false, "TestBrokenVariants also hunts each variant with the record checks only")
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

// TestBrokenVariants: each test-only broken variant is caught within 1,000 seeds; the seed that
// caught it is logged.
func TestBrokenVariants(t *testing.T) {
	modes := []bool{false}
	if *recOnly {
		modes = append(modes, true)
	}
	for _, only := range modes {
		for _, v := range []Variant{NoPrefixGuard, SealRMinus1, RawTailSeal, ConfirmWMinus1, AckBeforeFsync} {
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
		if err := Run(o); err != nil {
			t.Logf("caught at seed %d: %v", seed, err)
			return
		}
	}
	t.Fatalf("%s survived 1,000 seeds", v)
}

// TestRecoveryTime measures, in ticks, the failover of 1, 100 and 1,000 streams losing their owner
// at once (control.DefaultConfig: eager failover grace 20 ticks).
func TestRecoveryTime(t *testing.T) {
	for _, n := range []int{1, 100, 1000} {
		if n == 1000 && testing.Short() {
			continue
		}
		r, err := MeasureRecovery(n, 2)
		if err != nil {
			t.Fatalf("%d streams: %v", n, err)
		}
		t.Log(r)
	}
}
