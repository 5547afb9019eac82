package clientreq

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringstream/ringstream/wire"
)

// Metrics are the client request handler's metrics: client requests and their errors, latency
// histograms, the metadata service's forwards and the node-level frames dropped. The hot path touches
// only counters and histograms resolved at start (no label lookup per request). The node's metrics
// (engine/admin) serve them among its own (Collectors).
type Metrics struct {
	all []prometheus.Collector

	byCommand [128]prometheus.Counter // client requests by command number
	byCode    [64]prometheus.Counter  // error replies by wire.ErrorCode

	produce, fetch, cursor prometheus.Histogram

	orphanReplies         prometheus.Counter
	repliesLost           prometheus.Counter
	forwards              prometheus.Counter
	forwardsLost          prometheus.Counter
	forwardAnswersRetried prometheus.Counter
	forwardsLate          prometheus.Counter
	nodeFramesDropped     prometheus.Counter
}

// LatencyBuckets are the buckets of the request and fsync histograms: 50 us to about 6.5 s.
func LatencyBuckets() []float64 { return prometheus.ExponentialBuckets(50e-6, 2, 18) }

func newMetrics(labels prometheus.Labels) *Metrics {
	m := &Metrics{}
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ringstream_client_requests_total",
		Help: "Client requests received, by command.", ConstLabels: labels}, []string{"command"})
	errs := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ringstream_client_errors_total",
		Help: "Client requests answered with an error reply, by code.", ConstLabels: labels}, []string{"code"})
	for _, c := range []wire.Command{wire.CommandCreateStream, wire.CommandDeleteStream, wire.CommandListStreams,
		wire.CommandLookupStream, wire.CommandProduce, wire.CommandFetch, wire.CommandCommitCursor, wire.CommandGetCursor,
		wire.CommandListCursors, wire.CommandDeleteCursor, wire.CommandCreateStreams, wire.CommandDeleteStreams} {
		m.byCommand[c] = requests.WithLabelValues(c.String())
	}
	for c := wire.CodeNotOwner; c <= wire.CodeLogFailed; c++ {
		m.byCode[c] = errs.WithLabelValues(errorCodeName(c))
	}
	buckets := LatencyBuckets()
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
	m.forwardsLost = counter("ringstream_meta_forward_replies_lost_total", "Answers to forwarded requests the link "+
		"refused until the request's time ended.")
	m.forwardAnswersRetried = counter("ringstream_meta_forward_replies_retried_total", "Answers to forwarded requests "+
		"sent again because the link back to the forwarder was not up.")
	m.forwardsLate = counter("ringstream_meta_forward_replies_late_total", "Answers to forwarded requests that came after the wait ended.")
	m.nodeFramesDropped = counter("ringstream_node_frames_dropped_total", "Node-level frames this node has no handler for.")
	m.all = append(m.all, requests, errs, m.produce, m.fetch, m.cursor)
	return m
}

// Collectors are the metrics, for the node's collector.
func (m *Metrics) Collectors() []prometheus.Collector { return m.all }

// Forwards is the counter of metadata requests forwarded to the primary's node.
func (m *Metrics) Forwards() prometheus.Counter { return m.forwards }

func (m *Metrics) countRequest(c wire.Command) {
	if int(c) < len(m.byCommand) && m.byCommand[c] != nil {
		m.byCommand[c].Inc()
	}
}

func (m *Metrics) countError(c wire.ErrorCode) {
	if int(c) < len(m.byCode) && m.byCode[c] != nil {
		m.byCode[c].Inc()
	}
}

// observe records a data request's latency from start (UnixNano).
func (m *Metrics) observe(c wire.Command, start int64) {
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
