package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/ringstream/ringstream/bench"
)

// benchFlags are the flags shared by `bench` and `bench sweep`.
type benchFlags struct {
	cfg      bench.Config
	addrs    string
	admins   string
	progress string
}

// newBenchCommand is `ringstream bench`, with `traffic` and `sweep` under it.
func newBenchCommand() *cobra.Command {
	bf := &benchFlags{cfg: bench.DefaultConfig()}
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Run a local cluster under load, kill owners, verify every confirmed record, report",
		Long: "Start a local cluster of real `ringstream serve` processes on 127.0.0.1 (or use --cluster), drive " +
			"load with the Go client, carry out the faults, read every stream back and report. With no flags it " +
			"runs the owner-kill case on 3 nodes: a durable stream (3 copies, majority_durable), producers for " +
			"20 s, the owner SIGKILLed at 8 s and restarted at 14 s (by default the kill is at 40% of --duration " +
			"and the restart 30% of it later).\n\n" +
			"Verification is always on: every record whose produce was confirmed is read back; one missing, at " +
			"another offset, or at two offsets fails the run.\n\n" +
			"Exit status: 0 the run passed; 1 it could not be carried out (the cluster did not start); 2 bad " +
			"flags; 10 it was carried out and failed (a confirmed record missing or duplicated, the owner kill " +
			"did not fail over, the restarted owner did not rejoin).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := bf.resolve(cmd.Flags())
			if err != nil {
				return usageErr(err)
			}
			return runBench(cmd, cfg, bf.progressWriter(cmd))
		},
	}
	bf.register(cmd.Flags(), nil)
	cmd.AddCommand(newBenchTrafficCommand(), newBenchSweepCommand())
	return cmd
}

// register adds the load, fault and output flags.
// With shardList set (bench sweep), --shards is a list of shard counts.
func (bf *benchFlags) register(fs *pflag.FlagSet, shardList *string) {
	c := &bf.cfg
	fs.IntVar(&c.Nodes, "nodes", c.Nodes, "nodes of the local cluster")
	if shardList != nil {
		fs.StringVar(shardList, "shards", "1,2,4", "shard counts per node, comma-separated: one run each")
	} else {
		fs.IntVar(&c.Shards, "shards", c.Shards, "shards per node")
	}
	fs.IntVar(&c.Streams, "streams", c.Streams, "streams produced to (the faults aim at the first)")
	fs.StringVar(&c.Stream, "stream", c.Stream, "stream kind: durable (3 copies, majority_durable) or local "+
		"(1 copy, local_durable); --copies and --policy override it")
	fs.IntVar(&c.Copies, "copies", c.Copies, "copies of each stream (E)")
	fs.StringVar(&c.Policy, "policy", c.Policy, "confirm policy: majority_durable, local_durable or count_durable(N)")
	fs.IntVar(&c.Producers, "producers", c.Producers, "producers")
	fs.IntVar(&c.Consumers, "consumers", c.Consumers, "consumers reading the streams while they are produced to")
	fs.IntVar(&c.RecordSize, "record-size", c.RecordSize, "bytes per record")
	fs.IntVar(&c.Batch, "batch", c.Batch, "records per batch")
	fs.IntVar(&c.InFlight, "in-flight", c.InFlight, "batches in flight per producer")
	fs.StringVar(&c.Compression, "compression", c.Compression, "batch compression: none, s2 or zstd")
	fs.StringVar(&c.Client, "client", bench.ClientRingstream, "the producers' and the read-back's client: ringstream "+
		"(the Go client) or kafka (franz-go's idempotent producer and consumer on the nodes' Kafka listeners)")
	fs.Float64Var(&c.Rate, "rate", 0, "records/s over all producers, open loop (0: closed loop, as fast as confirmed)")
	fs.DurationVar(&c.Duration, "duration", c.Duration, "how long the producers run")
	fs.DurationVar(&c.Warmup, "warmup", c.Warmup, "first part of the load left out of the latency figures")
	fs.Float64Var(&c.KillOwnerAt, "kill-owner-at-secs", 0, "SIGKILL the first stream's owner this many seconds "+
		"into the load (0: off; default 40% of --duration when no fault flag is given)")
	fs.BoolVar(&c.OwnerOnMetaPrimary, "owner-on-metadata-primary", false, "place the first stream on the "+
		"metadata primary's node, so that the owner kill costs a view change too")
	fs.BoolVar(&c.OwnerOffMetaPrimary, "owner-off-metadata-primary", false, "place the first stream on a node "+
		"without the metadata primary, so that a fault of the owner leaves the controller running")
	fs.Float64Var(&c.RestartAfter, "restart-after-secs", 0, "restart a killed node this many seconds after the "+
		"kill (-1: never; default 30% of --duration)")
	fs.Float64Var(&c.KillFollowerAt, "kill-follower-at-secs", 0, "SIGKILL a follower of the first stream (0: off)")
	fs.Float64Var(&c.KillNodeAt, "kill-node-at-secs", 0, "SIGKILL node --kill-node (0: off)")
	fs.Uint16Var(&c.KillNode, "kill-node", 0, "the node id --kill-node-at-secs kills")
	fs.Float64Var(&c.PauseOwnerAt, "pause-owner-at-secs", 0, "SIGSTOP the first stream's owner (0: off)")
	fs.Float64Var(&c.PauseFor, "pause-for-secs", c.PauseFor, "how long the owner stays stopped before SIGCONT")
	fs.StringVar(&c.JSONPath, "json", "", "write every figure and the configuration to this JSON file "+
		"(-: to stdout, and the table to stderr)")
	fs.StringVar(&c.PlotPath, "plot", "", "chart throughput and p99 over time to this file (.png or .svg)")
	fs.StringVar(&c.ProfileDir, "profile", "", "save every node's CPU and heap profiles (pprof) to this directory, and the "+
		"bench process's own CPU profile (bench-cpu.pprof: the client side)")
	fs.BoolVar(&c.TraceStages, "trace-stages", false, "trace every node's and the client's stages of each batch "+
		"(CLOCK_MONOTONIC marks) and print the latency budget of one batch: stage, p50, p99, share of the "+
		"end-to-end p50; with --cluster, the nodes must run on this machine (one clock)")
	fs.StringVar(&bf.addrs, "cluster", "", "client addresses of a running cluster, comma-separated (no faults); "+
		"each run creates streams of its own, bench-<UTC start>-<4 hex digits>-N, and deletes them once verified")
	fs.StringVar(&c.StreamPrefix, "stream-prefix", "", "name the streams PREFIX-0 .. PREFIX-N (default bench on a "+
		"local cluster; a new bench-<UTC start>-<hex> per run with --cluster)")
	fs.BoolVar(&c.KeepStreams, "keep-streams", false, "with --cluster: leave the run's streams on the cluster")
	fs.StringVar(&bf.admins, "admin", "", "with --cluster: the nodes' admin addresses, comma-separated")
	fs.StringVar(&c.Secret, "secret", os.Getenv("RINGSTREAM_SECRET"), "with --cluster: the cluster secret "+
		"(default $RINGSTREAM_SECRET)")
	fs.StringVar(&c.Binary, "binary", "", "the ringstream binary the nodes run (default: this one)")
	fs.StringVar(&c.Dir, "dir", "", "the local cluster's directory, kept (default: a temporary one, removed)")
	fs.StringVar(&bf.progress, "progress", progressAuto, "progress on stderr (phase, elapsed and remaining time, "+
		"records/s, p99 of the last interval): auto (one redrawn line on a terminal, a plain line a second "+
		"otherwise), bar, lines or off")
}

// resolve applies the flags' rules: --stream, and the default fault times from --duration.
func (bf *benchFlags) resolve(fs *pflag.FlagSet) (bench.Config, error) {
	c := bf.cfg
	if err := c.ApplyStream(); err != nil {
		return c, err
	}
	if fs.Changed("copies") {
		c.Copies = bf.cfg.Copies
	}
	if fs.Changed("policy") {
		c.Policy = bf.cfg.Policy
	}
	anyFault := false
	for _, f := range []string{"kill-owner-at-secs", "kill-follower-at-secs", "kill-node-at-secs", "pause-owner-at-secs"} {
		anyFault = anyFault || fs.Changed(f)
	}
	if bf.addrs == "" && !anyFault {
		c.KillOwnerAt = 0.4 * c.Duration.Seconds()
	}
	if !fs.Changed("restart-after-secs") {
		c.RestartAfter = 0.3 * c.Duration.Seconds()
	}
	if bf.addrs != "" {
		c.Addrs = splitList(bf.addrs)
		c.Admins = splitList(bf.admins)
	}
	switch bf.progress {
	case progressAuto:
		c.ProgressBar = term.IsTerminal(int(os.Stderr.Fd()))
	case progressBar:
		c.ProgressBar = true
	case progressLines, progressOff:
	default:
		return c, fmt.Errorf("%w: --progress %q: want %s, %s, %s or %s", bench.ErrConfig, bf.progress, progressAuto,
			progressBar, progressLines, progressOff)
	}
	return c, c.Validate()
}

// --progress values.
const (
	progressAuto  = "auto"
	progressBar   = "bar"
	progressLines = "lines"
	progressOff   = "off"
)

// progressWriter is stderr unless --progress is off.
func (bf *benchFlags) progressWriter(cmd *cobra.Command) io.Writer {
	if bf.progress == progressOff {
		return nil
	}
	return cmd.ErrOrStderr()
}

// splitList splits a comma-separated list, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

// benchContext ends on Ctrl-C or SIGTERM, so that the cluster is stopped.
func benchContext(cmd *cobra.Command) (context.Context, context.CancelFunc) {
	return signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
}

// runBench runs one bench and writes its outputs.
func runBench(cmd *cobra.Command, cfg bench.Config, progress io.Writer) error {
	ctx, stop := benchContext(cmd)
	defer stop()
	rep, err := bench.Run(ctx, cfg, progress, slog.Default())
	if err != nil {
		return err
	}
	if err := writeOutputs(cmd, cfg.JSONPath, rep.WriteTable, rep.WriteJSON); err != nil {
		return err
	}
	if cfg.PlotPath != "" {
		if err := rep.WritePlot(cfg.PlotPath); err != nil {
			return err
		}
	}
	if !rep.OK() {
		return &exitError{code: exitBenchFailed, err: fmt.Errorf("bench failed: %s", strings.Join(rep.Failures, "; "))}
	}
	return nil
}

// jsonToStdout is the --json value that sends the JSON document to stdout.
const jsonToStdout = "-"

// writeOutputs writes a run's table and, with --json, its JSON document. With `--json -` the JSON is
// all of stdout (a script pipes it to jq) and the table goes to stderr; otherwise the table is on
// stdout and the JSON in the file named.
func writeOutputs(cmd *cobra.Command, jsonPath string, table, doc func(io.Writer) error) error {
	if jsonPath == jsonToStdout {
		if err := table(cmd.ErrOrStderr()); err != nil {
			return err
		}
		return doc(cmd.OutOrStdout())
	}
	if err := table(cmd.OutOrStdout()); err != nil {
		return err
	}
	if jsonPath != "" {
		return writeWith(jsonPath, doc)
	}
	return nil
}

// writeWith creates path and writes it with write.
func writeWith(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// newBenchTrafficCommand is `ringstream bench traffic --groups 1000 [--idle|--busy]`.
func newBenchTrafficCommand() *cobra.Command {
	tc := bench.DefaultTrafficConfig()
	var idle, busy bool
	var jsonPath string
	cmd := &cobra.Command{
		Use:   "traffic",
		Short: "Count Commit and reply frames, entries and bytes per 5 s for many groups, beside the unbatched baseline",
		Long: "Start a local cluster, create --groups streams, let them settle, and count from the nodes' metrics " +
			"the Commit and CommitReply frames, their entries and the peer bytes per 5 s, beside what the same " +
			"entries would cost sent one frame each (the unbatched baseline). --idle produces nothing; --busy " +
			"produces to every group.\n\nExit status: 0, 2 bad flags, or 1 if the run could not be carried out.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if idle && busy {
				return usageErr(errors.New("bench traffic: give --idle or --busy, not both"))
			}
			tc.Busy = busy
			ctx, stop := benchContext(cmd)
			defer stop()
			rep, err := bench.RunTraffic(ctx, tc, slog.Default())
			if err != nil {
				return err
			}
			return writeOutputs(cmd, jsonPath, rep.WriteTable, rep.WriteJSON)
		},
	}
	fs := cmd.Flags()
	fs.IntVar(&tc.Groups, "groups", tc.Groups, "streams (groups) to create")
	fs.IntVar(&tc.Nodes, "nodes", tc.Nodes, "nodes of the local cluster")
	fs.IntVar(&tc.Shards, "shards", tc.Shards, "shards per node")
	fs.IntVar(&tc.Copies, "copies", tc.Copies, "copies of each stream")
	fs.BoolVar(&idle, "idle", false, "produce nothing (the default)")
	fs.BoolVar(&busy, "busy", false, "produce to every group")
	fs.Float64Var(&tc.RatePerGroup, "rate-per-group", tc.RatePerGroup, "with --busy: records/s to each group")
	fs.DurationVar(&tc.Settle, "settle", tc.Settle, "wait after the groups exist, before measuring")
	fs.DurationVar(&tc.Window, "window", tc.Window, "how long to measure (figures are per 5 s)")
	fs.StringVar(&tc.Binary, "binary", "", "the ringstream binary the nodes run (default: this one)")
	fs.StringVar(&jsonPath, "json", "", "write the figures to this JSON file (-: to stdout, and the table to stderr)")
	return cmd
}

// newBenchSweepCommand is `ringstream bench sweep --shards 1,2,4`.
func newBenchSweepCommand() *cobra.Command {
	bf := &benchFlags{cfg: bench.DefaultConfig()}
	var shards string
	cmd := &cobra.Command{
		Use:   "sweep",
		Short: "Run the same load once per shard count and tabulate the scaling",
		Long: "Run the bench's load (no faults unless given) on a new local cluster per shard count in " +
			"--shards, and tabulate throughput and latency per count.\n\nExit status: 0 every run passed; 1 a " +
			"run could not be carried out; 2 bad flags; 10 a run failed its verification.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			counts, err := parseInts(shards)
			if err != nil {
				return usageErr(fmt.Errorf("bench sweep: --shards %q: %w", shards, err))
			}
			fs := cmd.Flags()
			cfg, err := bf.resolve(fs)
			if err != nil {
				return usageErr(err)
			}
			anyFault := fs.Changed("kill-owner-at-secs") || fs.Changed("kill-follower-at-secs") ||
				fs.Changed("kill-node-at-secs") || fs.Changed("pause-owner-at-secs")
			if !anyFault {
				cfg.KillOwnerAt = 0
			}
			ctx, stop := benchContext(cmd)
			defer stop()
			rep, err := bench.RunSweep(ctx, cfg, counts, bf.progressWriter(cmd), slog.Default())
			if err != nil {
				return err
			}
			if err := writeOutputs(cmd, cfg.JSONPath, rep.WriteTable, rep.WriteJSON); err != nil {
				return err
			}
			if !rep.OK() {
				return &exitError{code: exitBenchFailed, err: errors.New("bench sweep: a run failed its verification")}
			}
			return nil
		},
	}
	bf.register(cmd.Flags(), &shards)
	return cmd
}

// parseInts reads a comma-separated list of positive integers.
func parseInts(s string) ([]int, error) {
	var out []int
	for _, part := range splitList(s) {
		n, err := strconv.Atoi(part)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive integer", part)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, errors.New("no shard count")
	}
	return out, nil
}
