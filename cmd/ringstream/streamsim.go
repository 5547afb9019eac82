package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/ringstream/ringstream/engine/sim/streamsim"
)

// newStreamSimCommand is `ringstream streamsim --seed N [--seeds K] [--variant V]`: it runs the
// stream and failover simulator (engine/sim/streamsim) for seeds N .. N+K-1, the same runs as
// `go test ./engine/sim/streamsim -run TestSim -seed=N`, and exits non-zero on the first violation.
// With --recovery it measures the failover of that many streams losing their owner at once instead.
func newStreamSimCommand() *cobra.Command {
	var seed uint64
	var seeds, recovery int
	var variant string
	var withPrimary bool
	cmd := &cobra.Command{
		Use:   "streamsim",
		Short: "Run the stream failover simulator for one seed or a range of seeds",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out := cmd.OutOrStdout()
			if recovery > 0 {
				r, err := streamsim.MeasureRecovery(recovery, 2, withPrimary)
				if err != nil {
					return err
				}
				fmt.Fprintln(out, r)
				return nil
			}
			if seeds < 1 {
				return usageErr(errors.New("streamsim: --seeds must be at least 1"))
			}
			v, err := streamsim.ParseVariant(variant)
			if err != nil {
				return usageErr(err)
			}
			for s := seed; s < seed+uint64(seeds); s++ {
				st, err := streamsim.Run(streamsim.Options{Seed: s, Variant: v})
				if err != nil {
					return fmt.Errorf("%w\nreplay: ringstream streamsim --seed %d --variant %q", err, s, variant)
				}
				fmt.Fprintf(out, "seed=%d acked=%d confirmed=%d max_epoch=%d shrunken=%d empty=%d "+
					"woken_owners=%d accepted_losses=%d stuck=%d: ok\n", s, st.Acked, st.Confirmed, st.MaxEpoch,
					st.Shrunken, st.Empty, st.Pauses, st.Accepted, st.Stuck)
			}
			return nil
		},
	}
	cmd.Flags().Uint64Var(&seed, "seed", 1, "first seed to run")
	cmd.Flags().IntVar(&seeds, "seeds", 1, "number of seeds to run from --seed")
	cmd.Flags().StringVar(&variant, "variant", "correct", "protocol variant: correct, or a broken one "+
		"(\"raw-tail seal\", \"no prefix guard\", \"seal R-1\", \"confirm W-1\", \"ack before fsync\", "+
		"\"restarted owner kept\")")
	cmd.Flags().IntVar(&recovery, "recovery", 0, "measure the failover of this many streams instead")
	cmd.Flags().BoolVar(&withPrimary, "with-primary", false, "with --recovery: the lost node also holds the metadata primary")
	return cmd
}
