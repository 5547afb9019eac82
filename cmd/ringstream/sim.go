package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/ringstream/ringstream/engine/sim"
)

// errSimFailed: at least one seed of a --keep-going run ended in a violation.
var errSimFailed = errors.New("sim: seeds failed")

// newSimCommand is `ringstream sim --seed N [--seeds K] [--keep-going]`: it runs the deterministic
// simulator of the metadata group (engine/sim) for seeds N .. N+K-1, the same runs as
// `go test ./engine/sim -run TestSim -seed=N`, one line per seed. It exits non-zero on the first
// violation, or with --keep-going after the last seed, having printed a FAIL line for each.
func newSimCommand() *cobra.Command {
	var seed uint64
	var seeds int
	var keepGoing bool
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "Run the metadata group simulator for one seed or a range of seeds",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if seeds < 1 {
				return usageErr(errors.New("sim: --seeds must be at least 1"))
			}
			return runSims(cmd.OutOrStdout(), seed, seeds, keepGoing)
		},
	}
	cmd.Flags().Uint64Var(&seed, "seed", 0, "first seed to run")
	cmd.Flags().IntVar(&seeds, "seeds", 1, "number of seeds to run from --seed")
	cmd.Flags().BoolVar(&keepGoing, "keep-going", false, "run every seed and report each failure, instead of stopping at the first")
	return cmd
}

// runSims runs the seeds and prints one line each: "seed=N ...: ok", or "seed=N FAIL: ..." with the
// line that replays it.
func runSims(out io.Writer, first uint64, seeds int, keepGoing bool) error {
	failed := 0
	for s := first; s < first+uint64(seeds); s++ {
		opts := sim.Draw(s)
		st, err := sim.Run(opts)
		if err != nil {
			if !keepGoing {
				return fmt.Errorf("%w\nreplay: ringstream sim --seed %d", err, s)
			}
			failed++
			fmt.Fprintf(out, "seed=%d FAIL: %v\nreplay: ringstream sim --seed %d\n", s, err, s)
			continue
		}
		fmt.Fprintf(out, "seed=%d replicas=%d ticks=%d committed=%d replies=%d view_changes=%d crashes=%d "+
			"wipes=%d sector_faults=%d persist_failures=%d recoveries=%d snapshots=%d snapshot_chunks=%d "+
			"transfer_restarts=%d core_ticks=%d liveness_ticks=%d: ok\n", s, opts.Replicas, st.Ticks, st.Committed,
			st.Replies, st.ViewChanges, st.Crashes, st.Wipes, st.SectorFaults, st.PersistFailures, st.Recoveries,
			st.SnapshotsInstalled, st.SnapshotChunks, st.TransferRestarts, st.CoreTicks, st.LivenessTicks)
	}
	fmt.Fprintf(out, "seeds %d..%d: %d failed\n", first, first+uint64(seeds)-1, failed)
	if failed > 0 {
		return fmt.Errorf("%w: %d of %d", errSimFailed, failed, seeds)
	}
	return nil
}
