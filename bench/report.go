package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Report is every figure of one run and its configuration; --json writes it as it is.
type Report struct {
	Config Config `json:"config"`

	DurationS  float64 `json:"duration_s"`
	Confirmed  int64   `json:"confirmed"`
	ReadBack   int64   `json:"read_back"`
	Missing    int64   `json:"missing"`
	Misplaced  int64   `json:"misplaced"`
	Duplicated int64   `json:"duplicated"`
	// ProduceErrors counts batches whose produce returned an error (not confirmed; their records may
	// or may not be in the stream, and are never counted missing).
	ProduceErrors int64 `json:"produce_errors"`
	Consumed      int64 `json:"consumed"`

	ThroughputRecordsPerS float64 `json:"throughput_records_per_s"`
	ThroughputMiBPerS     float64 `json:"throughput_mib_per_s"`
	LatencyMs             Latency `json:"latency_ms"`

	// FailoverGapMs: from the owner's SIGKILL to the first confirmed produce after it; null without
	// an owner kill, or when no produce was confirmed after it.
	FailoverGapMs *float64 `json:"failover_gap_ms"`
	// FailoverGapPartsMs: the parts of the gap from the nodes' metrics, where they have them.
	FailoverGapPartsMs map[string]float64 `json:"failover_gap_parts_ms,omitempty"`
	// NewAssignmentMs: from the owner's kill (or SIGSTOP) to the first status showing another owner.
	NewAssignmentMs *float64 `json:"new_assignment_ms"`
	// CatchUpMs: from the restart (or SIGCONT) to the old owner's copy's durable tail reaching the
	// confirmed tail the new owner had then.
	CatchUpMs *float64 `json:"catch_up_ms"`
	// RejoinedWithoutRecovery: the old owner, restarted after its kill or resumed after a pause that
	// failed it over, is a follower at the stream's epoch and no other recovery ran; null when no old
	// owner came back after a failover.
	RejoinedWithoutRecovery *bool `json:"rejoined_without_recovery"`
	// StallMs: with --pause-owner-at-secs, from the SIGSTOP to the first confirmed produce after it.
	StallMs *float64 `json:"stall_ms"`

	// CPUUsPerRecord: the CPU time (user + system) of the nodes' processes (/proc/PID/stat) and of the
	// bench's own (getrusage: its client, consumers and fault driver) from the start of the load to its
	// end, in microseconds per confirmed record; null when not measured (CPUNotMeasured says why: a node
	// killed or restarted during the load, or nodes that are not local processes).
	CPUUsPerRecord      *float64  `json:"cpu_us_per_record"`
	CPUUsPerRecordParts *CPUParts `json:"cpu_us_per_record_parts,omitempty"`
	CPUNotMeasured      string    `json:"cpu_not_measured,omitempty"`

	// StageBudget: with --trace-stages, the latency budget of one batch, stage by stage (stages.go).
	StageBudget *StageBudget `json:"stage_budget,omitempty"`

	Verification Verification `json:"verification"`
	Nodes        []NodeUsage  `json:"nodes,omitempty"`
	Events       []Event      `json:"events"`
	Timeline     []Point      `json:"timeline"`
	// Failures lists why the run failed (exit status non-zero); empty when it passed.
	Failures []string `json:"failures"`
}

// NodeUsage is one node's process over the run: CPU seconds (user + system) and peak RSS.
type NodeUsage struct {
	Node       uint16  `json:"node"`
	CPUSeconds float64 `json:"cpu_s"`
	RSSMaxMiB  float64 `json:"rss_max_mib"`
	Restarts   int     `json:"restarts"`
}

// CPUParts is the CPU time per confirmed record, in microseconds: all of it, the nodes' (summed over
// them) and the bench process's.
type CPUParts struct {
	TotalUs float64 `json:"total"`
	NodesUs float64 `json:"nodes"`
	BenchUs float64 `json:"bench"`
}

// setCPU fills in the CPU figures from cpuPerRecord's answer.
func (r *Report) setCPU(parts CPUParts, why string) {
	if why != "" {
		r.CPUUsPerRecord, r.CPUUsPerRecordParts, r.CPUNotMeasured = nil, nil, why
		return
	}
	r.CPUUsPerRecord, r.CPUUsPerRecordParts, r.CPUNotMeasured = ptr(parts.TotalUs), &parts, ""
}

// OK is whether the run passed.
func (r *Report) OK() bool { return len(r.Failures) == 0 }

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("bench: json: %w", err)
	}
	return nil
}

// WriteTable writes the end-of-run table.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	c := r.Config
	row := func(k, format string, args ...any) { fmt.Fprintf(tw, "%s\t%s\n", k, fmt.Sprintf(format, args...)) }
	row("scenario", "%d nodes x %d shards, %d stream(s) %s (%d copies, %s), %d producers, %d B records, batch %d, in flight %d",
		c.Nodes, c.Shards, c.Streams, c.Stream, c.Copies, c.Policy, c.Producers, c.RecordSize, c.Batch, c.InFlight)
	if c.Client == ClientKafka {
		row("client", "kafka: franz-go's idempotent producer and consumer, on the nodes' Kafka listeners")
	}
	row("load", "%.1f s (warmup %.1f s excluded from latency)", r.DurationS, c.Warmup.Seconds())
	row("throughput", "%.0f records/s, %.2f MiB/s", r.ThroughputRecordsPerS, r.ThroughputMiBPerS)
	row("latency (ms)", "p50 %.2f  p99 %.2f  p99.9 %.2f  max %.2f", r.LatencyMs.P50, r.LatencyMs.P99,
		r.LatencyMs.P999, r.LatencyMs.Max)
	if r.StageBudget != nil {
		r.writeStages(row)
	}
	row("failover gap", "%s", msOrDash(r.FailoverGapMs))
	for _, k := range sortedKeys(r.FailoverGapPartsMs) {
		row("  "+k, "%.1f ms", r.FailoverGapPartsMs[k])
	}
	fault, back := "kill", "restart"
	if c.PauseOwnerAt > 0 && c.KillOwnerAt == 0 {
		fault, back = "pause", "resume"
	}
	row("new assignment", "%s after the %s", msOrDash(r.NewAssignmentMs), fault)
	row("catch-up", "%s after the %s", msOrDash(r.CatchUpMs), back)
	rejoined := boolOrDash(r.RejoinedWithoutRecovery)
	if fault == "pause" && r.RejoinedWithoutRecovery == nil && r.NewAssignmentMs == nil {
		rejoined = "- (no failover during the pause: the owner kept the stream)"
	}
	row("rejoined w/o recovery", "%s", rejoined)
	if c.PauseOwnerAt > 0 {
		row("stall (SIGSTOP)", "%s", msOrDash(r.StallMs))
	}
	row("confirmed", "%d records (%d produce errors, not confirmed)", r.Confirmed, r.ProduceErrors)
	row("read back", "%d records", r.ReadBack)
	row("missing", "%d", r.Missing)
	row("misplaced", "%d", r.Misplaced)
	row("duplicated", "%d", r.Duplicated)
	if c.Consumers > 0 {
		row("consumed", "%d records", r.Consumed)
	}
	if p := r.CPUUsPerRecordParts; p != nil {
		row("cpu per record", "%.1f us (nodes %.1f, bench client %.1f)", p.TotalUs, p.NodesUs, p.BenchUs)
	} else {
		row("cpu per record", "- (%s)", r.CPUNotMeasured)
	}
	for _, n := range r.Nodes {
		row(fmt.Sprintf("node %d", n.Node), "cpu %.2f s, rss max %.1f MiB, restarts %d", n.CPUSeconds, n.RSSMaxMiB,
			n.Restarts)
	}
	for _, e := range r.Events {
		node := ""
		if e.Node != 0 {
			node = fmt.Sprintf(" node %d", e.Node)
		}
		row("event", "%8.1f ms  %s%s %s", e.AtMs, e.Name, node, e.Note)
	}
	result := "PASS"
	if !r.OK() {
		result = "FAIL: " + strings.Join(r.Failures, "; ")
	}
	row("result", "%s", result)
	return tw.Flush()
}

func msOrDash(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.1f ms", *v)
}

func boolOrDash(v *bool) string {
	if v == nil {
		return "-"
	}
	if *v {
		return "yes"
	}
	return "no"
}

func ptr[T any](v T) *T { return &v }
