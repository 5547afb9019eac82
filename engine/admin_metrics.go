package engine

import (
	"context"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringstream/ringstream/engine/streamhost"
	"github.com/ringstream/ringstream/wire"
)

// nodeMetrics are the node's own metrics, beside the shards' (shard's collector): client requests and
// their errors, latency histograms, the metadata service's forwards, and gauges read from the metadata
// replica and the controller host when /metrics is scraped. The hot path touches only counters and
// histograms resolved at start (no label lookup per request).
type nodeMetrics struct {
	all []prometheus.Collector

	byCommand [128]prometheus.Counter // client requests by command number
	byCode    [64]prometheus.Counter  // error replies by wire.ErrorCode

	produce, fetch, cursor prometheus.Histogram
	storage                *storageMetrics  // made before the groups that feed it (Node.compose)
	recoveries             *recoveryMetrics // nil without a metadata replica

	orphanReplies     prometheus.Counter
	repliesLost       prometheus.Counter
	forwards          prometheus.Counter
	forwardsLost      prometheus.Counter
	forwardsLate      prometheus.Counter
	nodeFramesDropped prometheus.Counter
}

// metricLabels are the constant labels of every node metric.
func (n *Node) metricLabels() prometheus.Labels {
	return prometheus.Labels{"node": strconv.Itoa(int(n.id))}
}

// latencyBuckets are the buckets of the request and fsync histograms: 50 us to about 6.5 s.
func latencyBuckets() []float64 { return prometheus.ExponentialBuckets(50e-6, 2, 18) }

func newNodeMetrics(n *Node, storage *storageMetrics, recoveries *recoveryMetrics) *nodeMetrics {
	m := &nodeMetrics{storage: storage, recoveries: recoveries}
	labels := n.metricLabels()
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ringstream_client_requests_total",
		Help: "Client requests received, by command.", ConstLabels: labels}, []string{"command"})
	errs := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ringstream_client_errors_total",
		Help: "Client requests answered with an error reply, by code.", ConstLabels: labels}, []string{"code"})
	for _, c := range []wire.Command{wire.CommandCreateStream, wire.CommandDeleteStream, wire.CommandListStreams,
		wire.CommandLookupStream, wire.CommandProduce, wire.CommandFetch, wire.CommandCommitCursor, wire.CommandGetCursor} {
		m.byCommand[c] = requests.WithLabelValues(c.String())
	}
	for c := wire.CodeNotOwner; c <= wire.CodeLogFailed; c++ {
		m.byCode[c] = errs.WithLabelValues(errorCodeName(c))
	}
	buckets := latencyBuckets()
	hist := func(name, help string) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, ConstLabels: labels,
			Buckets: buckets})
	}
	m.produce = hist("ringstream_produce_confirm_latency_seconds", "From a produce reaching its copy "+
		"to its confirmed reply (appended on W copies durably).")
	m.fetch = hist("ringstream_fetch_latency_seconds", "From a fetch reaching its copy to its reply, long "+
		"poll wait included.")
	m.cursor = hist("ringstream_cursor_latency_seconds", "From a cursor commit or read reaching its copy "+
		"to its reply.")
	counter := func(name, help string) prometheus.Counter {
		c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels})
		m.all = append(m.all, c)
		return c
	}
	m.orphanReplies = counter("ringstream_client_orphan_replies_total", "Copy replies for no request in flight (a bug if not 0).")
	m.repliesLost = counter("ringstream_client_replies_lost_total", "Replies the shard refused for another reason than a full queue.")
	m.forwards = counter("ringstream_meta_forwards_total", "Metadata requests forwarded to the metadata primary's node.")
	m.forwardsLost = counter("ringstream_meta_forward_replies_lost_total", "Answers to forwarded requests the link refused.")
	m.forwardsLate = counter("ringstream_meta_forward_replies_late_total", "Answers to forwarded requests that came after the wait ended.")
	m.nodeFramesDropped = counter("ringstream_node_frames_dropped_total", "Node-level frames this node has no handler for.")
	m.all = append(m.all, requests, errs, m.produce, m.fetch, m.cursor)
	m.all = append(m.all, storage.collectors()...)
	if recoveries != nil {
		m.all = append(m.all, recoveries.collectors()...)
	}
	m.all = append(m.all, n.statusGauges(labels)...)
	return m
}

// statusGauges read the metadata replica and the controller host at scrape time.
func (n *Node) statusGauges(labels prometheus.Labels) []prometheus.Collector {
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
func (n *Node) healCounters(labels prometheus.Labels) []prometheus.Collector {
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

func (m *nodeMetrics) countRequest(c wire.Command) {
	if int(c) < len(m.byCommand) && m.byCommand[c] != nil {
		m.byCommand[c].Inc()
	}
}

func (m *nodeMetrics) countError(c wire.ErrorCode) {
	if int(c) < len(m.byCode) && m.byCode[c] != nil {
		m.byCode[c].Inc()
	}
}

// observe records a data request's latency from start (UnixNano).
func (m *nodeMetrics) observe(c wire.Command, start int64) {
	d := time.Duration(time.Now().UnixNano() - start).Seconds()
	switch c {
	case wire.CommandProduce:
		m.produce.Observe(d)
	case wire.CommandFetch:
		m.fetch.Observe(d)
	default:
		m.cursor.Observe(d)
	}
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
func (n *Node) recordedRecoveries() float64 {
	if n.state.Load() != nodeServing {
		return -1
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	count := -1
	if err := n.metaSvc.onShard0(ctx, func() { count = len(n.meta.State().Recoveries()) }); err != nil {
		return -1
	}
	return float64(count)
}
