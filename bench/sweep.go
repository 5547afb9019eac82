package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"text/tabwriter"
)

// SweepReport is `bench sweep`: the same load once per shard count.
type SweepReport struct {
	Shards []int     `json:"shards"`
	Runs   []*Report `json:"runs"`
}

// RunSweep runs cfg once per shard count, each on a new cluster, and gathers the reports. A run
// that fails to start ends the sweep with its error; a run whose verification failed is kept (its
// Failures say why) and the sweep goes on.
func RunSweep(ctx context.Context, cfg Config, shards []int, progress io.Writer, log *slog.Logger) (*SweepReport, error) {
	if len(shards) == 0 {
		return nil, fmt.Errorf("%w: --shards: give at least one shard count", ErrConfig)
	}
	out := &SweepReport{Shards: shards}
	for _, s := range shards {
		c := cfg
		c.Shards = s
		rep, err := Run(ctx, c, progress, log)
		if err != nil {
			return nil, fmt.Errorf("bench: sweep at %d shards: %w", s, err)
		}
		out.Runs = append(out.Runs, rep)
	}
	return out, nil
}

// OK is whether every run passed.
func (s *SweepReport) OK() bool {
	for _, r := range s.Runs {
		if !r.OK() {
			return false
		}
	}
	return true
}

// WriteJSON writes the sweep as indented JSON.
func (s *SweepReport) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(s)
}

// WriteTable tabulates the scaling: throughput and latency per shard count, and the ratio to the
// first count's throughput.
func (s *SweepReport) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "shards\trecords/s\tMiB/s\tx first\tp50 ms\tp99 ms\tp99.9 ms\tnode cpu s\tresult\t\n")
	for i, r := range s.Runs {
		ratio := 0.0
		if base := s.Runs[0].ThroughputRecordsPerS; base > 0 {
			ratio = r.ThroughputRecordsPerS / base
		}
		var cpu float64
		for _, n := range r.Nodes {
			cpu += n.CPUSeconds
		}
		result := "PASS"
		if !r.OK() {
			result = "FAIL"
		}
		fmt.Fprintf(tw, "%d\t%.0f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.1f\t%s\t\n", s.Shards[i], r.ThroughputRecordsPerS,
			r.ThroughputMiBPerS, ratio, r.LatencyMs.P50, r.LatencyMs.P99, r.LatencyMs.P999, cpu, result)
	}
	return tw.Flush()
}
