package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/ringstream/ringstream/engine/sim"
)

// newSimCommand is `ringstream sim --seed N [--seeds K]`: it runs the deterministic simulator of the
// metadata group (engine/sim) for seeds N .. N+K-1, the same runs as
// `go test ./engine/sim -run TestSim -seed=N`, and exits non-zero on the first violation.
func newSimCommand() *cobra.Command {
	var seed uint64
	var seeds int
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "Run the metadata group simulator for one seed or a range of seeds",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if seeds < 1 {
				return errors.New("sim: --seeds must be at least 1")
			}
			out := cmd.OutOrStdout()
			for s := seed; s < seed+uint64(seeds); s++ {
				opts := sim.Draw(s)
				st, err := sim.Run(opts)
				if err != nil {
					return fmt.Errorf("%w\nreplay: ringstream sim --seed %d", err, s)
				}
				fmt.Fprintf(out, "seed=%d replicas=%d ticks=%d committed=%d replies=%d view_changes=%d "+
					"crashes=%d snapshots=%d liveness_ticks=%d: ok\n", s, opts.Replicas, st.Ticks, st.Committed,
					st.Replies, st.ViewChanges, st.Crashes, st.SnapshotsInstalled, st.LivenessTicks)
			}
			return nil
		},
	}
	cmd.Flags().Uint64Var(&seed, "seed", 0, "first seed to run")
	cmd.Flags().IntVar(&seeds, "seeds", 1, "number of seeds to run from --seed")
	return cmd
}
