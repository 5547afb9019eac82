package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/ringstream/ringstream/engine/config"
	"github.com/ringstream/ringstream/localcluster"
	"github.com/ringstream/ringstream/wire"
)

// ErrConfig: the bench's options are invalid; the message names the flag and the rule.
var ErrConfig = errors.New("bench: invalid options")

// Stream kinds for --stream.
const (
	// StreamDurable is the spec's durable stream: 3 copies on majority_durable.
	StreamDurable = "durable"
	// StreamLocal is a stream confirmed on the owner's disk alone: 1 copy on local_durable.
	StreamLocal = "local"
)

// Config is one bench run: the cluster, the load, the faults and the outputs. DefaultConfig is the
// spec's owner-kill case.
type Config struct {
	// Cluster: a local cluster of Nodes processes with Shards shards each, run by Binary (empty: this
	// executable); or, with Addrs set, a running cluster reached at those client addresses (no faults).
	Nodes  int      `json:"nodes"`
	Shards int      `json:"shards"`
	Binary string   `json:"-"`
	Dir    string   `json:"-"`
	Addrs  []string `json:"cluster,omitempty"`
	Admins []string `json:"admin,omitempty"`
	Secret string   `json:"-"`

	// Load. The streams are StreamPrefix-0 .. StreamPrefix-(Streams-1); an empty StreamPrefix is
	// "bench" on a local cluster and, with Addrs, "bench-" and the run's start (UTC) and 4 random hex
	// digits, so that each run on a running cluster creates streams of its own (RunPrefix).
	StreamPrefix string `json:"stream_prefix"`
	// KeepStreams leaves a running cluster's streams after the run; by default the bench deletes the
	// streams it created there once they are verified (a local cluster goes away whole).
	KeepStreams bool          `json:"keep_streams,omitempty"`
	Stream      string        `json:"stream"`
	Streams     int           `json:"streams"`
	Copies      int           `json:"copies"`
	Policy      string        `json:"policy"`
	Producers   int           `json:"producers"`
	Consumers   int           `json:"consumers"`
	RecordSize  int           `json:"record_size"`
	Batch       int           `json:"batch"`
	InFlight    int           `json:"in_flight"`
	Compression string        `json:"compression"`
	Rate        float64       `json:"rate_records_per_s"`
	Duration    time.Duration `json:"duration_ns"`
	Warmup      time.Duration `json:"warmup_ns"`

	// Client is the producers' and the read-back's client: ClientRingstream (the Go client; empty
	// means it) or ClientKafka (franz-go on the nodes' Kafka listeners, kafka.go).
	Client string `json:"client,omitempty"`

	// Faults, in seconds since the start of load; 0 is off (RestartAfter: -1 is never).
	KillOwnerAt        float64 `json:"kill_owner_at_secs"`
	OwnerOnMetaPrimary bool    `json:"owner_on_metadata_primary"`
	// OwnerOffMetaPrimary places the first stream's owner on a node without the metadata primary, so
	// that a fault of the owner leaves the controller running.
	OwnerOffMetaPrimary bool    `json:"owner_off_metadata_primary"`
	RestartAfter        float64 `json:"restart_after_secs"`
	KillFollowerAt      float64 `json:"kill_follower_at_secs"`
	KillNodeAt          float64 `json:"kill_node_at_secs"`
	KillNode            uint16  `json:"kill_node,omitempty"`
	PauseOwnerAt        float64 `json:"pause_owner_at_secs"`
	PauseFor            float64 `json:"pause_for_secs"`

	// Launch, if set, changes the local cluster's options before it starts (cluster tests put the
	// nodes in network namespaces with it).
	Launch func(o *localcluster.Options) `json:"-"`

	// Script, if set, runs beside the load from its start (cluster tests script their faults with
	// it); the load stops at Duration whatever it does, and the run waits for it before verifying.
	Script func(ctx context.Context, c Controls) `json:"-"`

	// Outputs.
	JSONPath   string `json:"-"`
	PlotPath   string `json:"-"`
	ProfileDir string `json:"-"`
	// TraceStages switches the nodes' stage traces on for the load and reports the latency budget of
	// one batch, stage by stage (stages.go): Report.StageBudget. The marks of the nodes and the client
	// are compared on CLOCK_MONOTONIC, so with --cluster the nodes must run on the bench's machine.
	TraceStages bool `json:"trace_stages,omitempty"`
	// ProgressBar draws the progress (Run's writer) as one terminal line, redrawn; false writes a
	// plain line a second.
	ProgressBar bool `json:"-"`
}

// DefaultConfig is the spec's owner-kill case on 3 nodes: a durable stream (3 copies on
// majority_durable), producers for 20 s, the owner killed with SIGKILL at 8 s and restarted at 14 s.
func DefaultConfig() Config {
	return Config{
		Nodes: 3, Shards: 1,
		Stream: StreamDurable, Streams: 1, Copies: 3, Policy: "majority_durable",
		Producers: 4, RecordSize: 1024, Batch: 16, InFlight: 4, Compression: "none",
		Duration: 20 * time.Second, Warmup: time.Second,
		KillOwnerAt: 8, RestartAfter: 6, PauseFor: 2,
	}
}

// ApplyStream sets Copies and Policy from the --stream kind.
func (c *Config) ApplyStream() error {
	switch c.Stream {
	case StreamDurable:
		c.Copies, c.Policy = 3, "majority_durable"
	case StreamLocal:
		c.Copies, c.Policy = 1, "local_durable"
	default:
		return fmt.Errorf("%w: --stream %q: want %s (3 copies, majority_durable) or %s (1 copy, local_durable)",
			ErrConfig, c.Stream, StreamDurable, StreamLocal)
	}
	return nil
}

// Validate checks every option and the faults against the load's duration.
func (c *Config) Validate() error {
	durS := c.Duration.Seconds()
	checks := []struct {
		bad  bool
		flag string
		rule string
	}{
		{c.Addrs == nil && c.Nodes < 3, "--nodes", "at least 3 (the metadata group has 3 replicas)"},
		{c.Shards < 1 || c.Shards > 64, "--shards", "1 to 64"},
		{c.Streams < 1 || c.Streams > 100000, "--streams", "1 to 100000"},
		{c.Copies < 1 || (c.Addrs == nil && c.Copies > c.Nodes), "--copies", "1 to the node count"},
		{c.Producers < 1 || c.Producers > 4096, "--producers", "1 to 4096"},
		{c.Consumers < 0 || c.Consumers > 4096, "--consumers", "0 to 4096"},
		{c.RecordSize < recordHeaderBytes || c.RecordSize > 4<<20, "--record-size",
			fmt.Sprintf("%d bytes (the record id) to 4 MiB", recordHeaderBytes)},
		{c.Batch < 1 || c.Batch > 65536, "--batch", "1 to 65536 records"},
		{c.Batch*c.RecordSize > 8<<20, "--batch", "batch x record size at most 8 MiB (the client frame limit)"},
		{c.InFlight < 1 || c.InFlight > 1024, "--in-flight", "1 to 1024 batches per producer"},
		{!slices.Contains([]string{"none", "s2", "zstd"}, c.Compression), "--compression", "none, s2 or zstd"},
		{c.Rate < 0, "--rate", "0 (closed loop) or records per second"},
		{c.Duration <= 0, "--duration", "above 0"},
		{c.Warmup < 0 || c.Warmup >= c.Duration, "--warmup", "0 up to below --duration"},
		{c.KillOwnerAt < 0 || c.KillOwnerAt >= durS, "--kill-owner-at-secs", "0 (off) or inside --duration"},
		{c.KillFollowerAt < 0 || c.KillFollowerAt >= durS, "--kill-follower-at-secs", "0 (off) or inside --duration"},
		{c.KillNodeAt < 0 || c.KillNodeAt >= durS, "--kill-node-at-secs", "0 (off) or inside --duration"},
		{c.KillNodeAt > 0 && (c.KillNode == 0 || int(c.KillNode) > c.Nodes), "--kill-node", "a node id of the cluster"},
		{c.PauseOwnerAt < 0 || c.PauseOwnerAt >= durS, "--pause-owner-at-secs", "0 (off) or inside --duration"},
		{c.PauseOwnerAt > 0 && c.PauseFor <= 0, "--pause-for-secs", "above 0"},
		{c.RestartAfter < 0 && c.RestartAfter != -1, "--restart-after-secs", "-1 (never) or 0 and up"},
		{c.OwnerOnMetaPrimary && c.KillOwnerAt == 0, "--owner-on-metadata-primary", "needs --kill-owner-at-secs"},
		{c.OwnerOnMetaPrimary && c.OwnerOffMetaPrimary, "--owner-off-metadata-primary",
			"not with --owner-on-metadata-primary"},
		{c.Addrs != nil && (c.faults() || c.Script != nil), "--cluster", "a running cluster takes no faults (the bench cannot kill its nodes)"},
		{c.Client != "" && c.Client != ClientRingstream && c.Client != ClientKafka, "--client", "ringstream or kafka"},
		{c.Client == ClientKafka && c.Addrs != nil, "--client kafka",
			"a local cluster only (the bench knows a running cluster's client addresses, not its Kafka ones)"},
		{c.Client == ClientKafka && (c.OwnerOnMetaPrimary || c.OwnerOffMetaPrimary), "--client kafka",
			"not with --owner-on-metadata-primary or --owner-off-metadata-primary (their streams are no topics)"},
		{c.Client == ClientKafka && c.Compression == "s2", "--client kafka", "--compression none or zstd"},
		{c.Client == ClientKafka && c.TraceStages, "--client kafka", "not with --trace-stages (franz-go has no stage marks)"},
		{c.TraceStages && c.Addrs != nil && len(c.Admins) == 0, "--trace-stages",
			"with --cluster, needs --admin (the traces are read from the nodes' admin listeners)"},
	}
	for _, ch := range checks {
		if ch.bad {
			return fmt.Errorf("%w: %s: %s", ErrConfig, ch.flag, ch.rule)
		}
	}
	if c.StreamPrefix != "" {
		if err := wire.ValidateStreamName(c.StreamPrefix + "-" + strconv.Itoa(c.Streams-1) + "-filler-99"); err != nil {
			return fmt.Errorf("%w: --stream-prefix %q: %w", ErrConfig, c.StreamPrefix, err)
		}
	}
	if _, err := config.ParsePolicy(c.Policy); err != nil {
		return fmt.Errorf("%w: --policy: %w", ErrConfig, err)
	}
	return nil
}

// faults is whether any fault is asked for.
func (c *Config) faults() bool {
	return c.KillOwnerAt > 0 || c.KillFollowerAt > 0 || c.KillNodeAt > 0 || c.PauseOwnerAt > 0
}

// secs is a time since the start of load.
func secs(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// RunPrefix is the stream prefix of a run on a running cluster started at now: "bench-", the UTC time
// to the second and 4 random hex digits (bench-20261202T153712-3fa9), so that a run never meets the
// streams an earlier one left.
func RunPrefix(now time.Time) string {
	var b [2]byte
	rand.Read(b[:])
	return "bench-" + now.UTC().Format("20060102T150405") + "-" + hex.EncodeToString(b[:])
}

// streamPrefix is c's prefix of stream names, its default filled in.
func (c *Config) streamPrefix(now time.Time) string {
	switch {
	case c.StreamPrefix != "":
		return c.StreamPrefix
	case c.Addrs != nil:
		return RunPrefix(now)
	}
	return "bench"
}
