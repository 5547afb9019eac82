package admin

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringstream/ringstream/engine/streamhost"
)

// nodeMetrics are the node's own metrics, beside the shards' (shard's collector): the client request
// handler's (engine/clientreq: requests, errors, latencies, forwards), storage and recovery timings,
// and gauges read from the metadata replica and the controller host when /metrics is scraped.
type nodeMetrics struct {
	all []prometheus.Collector

	storage    *StorageMetrics  // made before the groups that feed it (Node.compose)
	recoveries *RecoveryMetrics // nil without a metadata replica
}

func newNodeMetrics(n *node, storage *StorageMetrics, recoveries *RecoveryMetrics) *nodeMetrics {
	m := &nodeMetrics{storage: storage, recoveries: recoveries}
	labels := n.metricLabels()
	m.all = append(m.all, n.clients.Metrics().Collectors()...)
	m.all = append(m.all, storage.collectors()...)
	if recoveries != nil {
		m.all = append(m.all, recoveries.collectors()...)
	}
	m.all = append(m.all, n.statusGauges(labels)...)
	return m
}

// statusGauges read the metadata replica and the controller host at scrape time.
func (n *node) statusGauges(labels prometheus.Labels) []prometheus.Collector {
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels}, f)
	}
	counter := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels}, f)
	}
	b2f := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	out := []prometheus.Collector{
		counter("ringstream_node_heartbeats_sent_total", "Node heartbeats sent to the metadata members.",
			func() float64 { return float64(n.beat.Sent()) }),
		counter("ringstream_node_heartbeat_failures_total", "Node heartbeats a link refused.",
			func() float64 { return float64(n.beat.Failures()) }),
		gauge("ringstream_stream_copy_failures", "Stream copies that did not open or whose log failed.",
			func() float64 { return float64(len(n.streams.Status())) }),
		gauge("ringstream_stream_copies_parked", "Stream copies holding no open file (unused for "+
			"storage.idle_close_after, or not used since they opened).",
			func() float64 { parked, _ := n.streams.ParkedCopies(); return float64(parked) }),
		counter("ringstream_stream_copy_parks_total", "Times a stream copy closed its files for being unused.",
			func() float64 { _, parks := n.streams.ParkedCopies(); return float64(parks) }),
	}
	out = append(out, n.healCounters(labels)...)
	if n.meta == nil {
		return out
	}
	return append(out,
		gauge("ringstream_meta_view", "The metadata replica's view.", func() float64 { return float64(n.meta.Status().View) }),
		gauge("ringstream_meta_commit", "The metadata replica's commit number.", func() float64 { return float64(n.meta.Status().Commit) }),
		gauge("ringstream_meta_primary", "1 on the metadata primary.", func() float64 { return b2f(n.meta.Status().Primary) }),
		gauge("ringstream_meta_recovering", "1 while the replica recovers its state from the group.",
			func() float64 { return b2f(n.meta.Status().Recovering) }),
		gauge("ringstream_meta_checkpoint_bytes", "Size of the metadata replica's checkpoint in force: what a "+
			"state transfer to a replica behind the log moves, in chunks.",
			func() float64 { return float64(n.meta.Status().CheckpointBytes) }),
		counter("ringstream_meta_state_transfers_sent_total", "State transfers this replica began to a peer (first chunks sent).",
			func() float64 { return float64(n.meta.Status().Transfer.Sent) }),
		counter("ringstream_meta_state_transfers_installed_total", "Checkpoints this replica installed from a peer.",
			func() float64 { return float64(n.meta.Status().Transfer.Installed) }),
		counter("ringstream_meta_state_transfer_chunks_out_total", "Checkpoint chunks sent to peers.",
			func() float64 { return float64(n.meta.Status().Transfer.ChunksOut) }),
		counter("ringstream_meta_state_transfer_chunks_in_total", "Checkpoint chunks taken from peers.",
			func() float64 { return float64(n.meta.Status().Transfer.ChunksIn) }),
		counter("ringstream_meta_state_transfer_chunks_reasked_total", "Checkpoint chunks asked again after a "+
			"repair timeout without one.", func() float64 { return float64(n.meta.Status().Transfer.ChunksReasked) }),
		counter("ringstream_meta_state_transfers_restarted_total", "State transfers begun again because the "+
			"sender took a newer checkpoint.", func() float64 { return float64(n.meta.Status().Transfer.Restarted) }),
		counter("ringstream_meta_state_transfers_abandoned_total", "State transfers given up after repair "+
			"timeouts without a chunk (asked again from the primary).",
			func() float64 { return float64(n.meta.Status().Transfer.Abandoned) }),
		counter("ringstream_meta_state_transfers_refused_total", "Checkpoints refused: announced past "+
			"snapshot_bytes_max, or assembled and failing the checksum, decode or restore. The replica stays behind.",
			func() float64 { return float64(n.meta.Status().Transfer.Refused) }),
		counter("ringstream_meta_eager_failovers_total", "View changes started because the primary's link stayed down.",
			func() float64 { return float64(n.meta.Status().EagerFailovers) }),
		gauge("ringstream_meta_recoveries", "Recoveries recorded in this replica's metadata state (pending or "+
			"withdrawn): streams whose owner was lost and that wait for their seal, a decision or an operator.",
			n.recordedRecoveries),
		gauge("ringstream_controller_attention", "Attention entries (the active controller only).",
			func() float64 { return float64(len(n.ctl.Status().Attention)) }),
		counter("ringstream_controller_nodes_lost_total", "Nodes the controller declared lost (recoveries started).",
			func() float64 { return float64(n.ctl.Status().Stats.NodesLost) }),
		counter("ringstream_controller_seals_total", "Seals the controller sent (recovery work).",
			func() float64 { return float64(n.ctl.Status().Stats.Seals) }),
		counter("ringstream_controller_proposals_total", "Ops the controller proposed.",
			func() float64 { return float64(n.ctl.Status().Stats.Proposals) }),
	)
}

// healCounters count the stream copies whose storage failed, by cause, and their reopens and heals
// (streamhost.Host.HealStats, read at scrape time).
func (n *node) healCounters(labels prometheus.Labels) []prometheus.Collector {
	var out []prometheus.Collector
	for c := range streamhost.CauseCount {
		l := prometheus.Labels{"cause": c.String()}
		for k, v := range labels {
			l[k] = v
		}
		out = append(out, prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "ringstream_stream_copy_log_failures_total",
			Help: "Stream copies whose storage failed (closed, then reopened through recovery), by cause.", ConstLabels: l},
			func() float64 { return float64(n.streams.HealStats().Failures[c]) }))
	}
	counter := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels}, f)
	}
	return append(out,
		counter("ringstream_stream_copy_heal_attempts_total", "Reopens of failed stream copies tried (with a backoff, or an operator's retry).",
			func() float64 { return float64(n.streams.HealStats().Attempts) }),
		counter("ringstream_stream_copy_heals_total", "Failed stream copies that reopened and serve again.",
			func() float64 { return float64(n.streams.HealStats().Healed) }))
}

// Describe implements prometheus.Collector.
func (m *nodeMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.all {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (m *nodeMetrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.all {
		c.Collect(ch)
	}
}

// recordedRecoveries counts the recoveries of the applied metadata state, read on shard 0 (at most a
// second's wait; -1 when the shard did not answer, as when the node is not serving).
func (n *node) recordedRecoveries() float64 {
	if n.state() != StateServing {
		return -1
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	count := -1
	if err := n.metaSvc.OnShard0(ctx, func() { count = len(n.meta.State().Recoveries()) }); err != nil {
		return -1
	}
	return float64(count)
}
