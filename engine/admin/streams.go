package admin

import (
	"fmt"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringstream/ringstream/engine/stream"
	"github.com/ringstream/ringstream/engine/streamhost"
	"github.com/ringstream/ringstream/shard"
	"github.com/ringstream/ringstream/wire"
)

// registerObservability registers what streams.go and buildinfo.go add to the node's
// metrics: the data counters, the per-stream series (metrics.per_stream_max) and, on a registry the
// node made itself, the process's collectors.
func (n *node) registerObservability(data *DataMetrics) error {
	labels := n.metricLabels()
	cs := data.collectors()
	cs = append(cs, newStreamCollector(n, n.cfg.File.Metrics.PerStreamMax, labels))
	if n.ownReg {
		cs = append(cs, processCollectors(labels)...)
	}
	for _, c := range cs {
		if err := n.reg.Register(c); err != nil {
			return fmt.Errorf("engine: register node metrics: %w", err)
		}
	}
	return nil
}

// streamSeriesWait bounds how long one scrape waits for a shard to read its copies' states.
const streamSeriesWait = time.Second

// DataMetrics count the records this node's copies confirmed to producers and the records and
// bytes they sent to fetchers. They are counted where a copy's reply reaches the node
// (streamhost.Config.Replies, on the copy's shard goroutine): one atomic add per reply, never per
// record, and nothing allocated.
type DataMetrics struct {
	recordsAppended, bytesAppended, recordsFetched, bytesFetched prometheus.Counter
}

// NewDataMetrics makes the data counters (before the stream host that feeds them).
func NewDataMetrics(labels prometheus.Labels) *DataMetrics {
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels})
	}
	return &DataMetrics{
		recordsAppended: counter("ringstream_records_appended_total", "Records this node's owner copies "+
			"confirmed to producers (a produce answered as a duplicate is not counted again)."),
		bytesAppended: counter("ringstream_bytes_appended_total", "Bytes of encoded record batches "+
			"(batch headers included) this node's owner copies confirmed to producers (duplicates not again)."),
		recordsFetched: counter("ringstream_records_fetched_total", "Records this node's owner copies "+
			"sent in fetch replies."),
		bytesFetched: counter("ringstream_bytes_fetched_total", "Bytes of encoded record batches "+
			"(batch headers included) this node's owner copies sent in fetch replies."),
	}
}

func (m *DataMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.recordsAppended, m.bytesAppended, m.recordsFetched, m.bytesFetched}
}

// Count counts one copy reply.
func (m *DataMetrics) Count(r *stream.Reply) {
	switch r.Kind {
	case stream.ReplyProduce:
		if !r.Produce.Duplicate {
			m.recordsAppended.Add(float64(r.Produce.Count))
			m.bytesAppended.Add(float64(r.ProduceBytes))
		}
	case stream.ReplyFetch:
		m.recordsFetched.Add(float64(r.Fetch.Count))
		m.bytesFetched.Add(float64(len(r.Fetch.Batches)))
	}
}

// streamCollector exposes per-stream series of this node's copies, read at scrape time from the
// stream host (the tails it publishes for the node heartbeats, then each copy's state on its shard),
// for at most max copies, the lowest stream ids first. It never runs on the record path.
type streamCollector struct {
	n   *node
	max int

	end, durable, confirmed, inSync, owner, omitted *prometheus.Desc
}

func newStreamCollector(n *node, max int, labels prometheus.Labels) *streamCollector {
	desc := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, []string{"stream"}, labels)
	}
	return &streamCollector{n: n, max: max,
		end: desc("ringstream_stream_end_offset", "The offset after the last record appended to this "+
			"node's copy of the stream (durable or not)."),
		durable: desc("ringstream_stream_durable_offset", "The offset after the last record of this "+
			"node's copy that is durable on its disk."),
		confirmed: desc("ringstream_stream_confirmed_offset", "The stream's confirmed tail, as its owner "+
			"copy on this node knows it (owner copies only)."),
		inSync: desc("ringstream_stream_copies_in_sync", "Copies of the stream, the owner's included, "+
			"whose durable tail reached the confirmed tail, as the owner copy on this node knows them "+
			"(owner copies only; below the stream's copies, one is catching up or down)."),
		owner: desc("ringstream_stream_owner", "1 when this node's copy of the stream is its owner, 0 "+
			"for a follower or sealed copy."),
		omitted: prometheus.NewDesc("ringstream_stream_series_omitted", "Copies of this node left "+
			"without per-stream series by metrics.per_stream_max.", nil, labels),
	}
}

// Describe implements prometheus.Collector.
func (c *streamCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.end, c.durable, c.confirmed, c.inSync, c.owner, c.omitted} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *streamCollector) Collect(ch chan<- prometheus.Metric) {
	if c.n.state() != StateServing {
		return
	}
	tails := c.n.streams.AppendCopyTails(nil)
	kept := min(len(tails), c.max)
	ch <- prometheus.MustNewConstMetric(c.omitted, prometheus.GaugeValue, float64(len(tails)-kept))
	if kept == 0 {
		return
	}
	states := c.copyStates(tails[:kept])
	for i, st := range states {
		if !st.Open {
			continue // closed since it was published, or its shard did not answer
		}
		id := strconv.FormatUint(tails[i].Stream, 10)
		ch <- prometheus.MustNewConstMetric(c.end, prometheus.GaugeValue, float64(st.Appended), id)
		ch <- prometheus.MustNewConstMetric(c.durable, prometheus.GaugeValue, float64(st.Durable), id)
		isOwner := 0.0
		if st.Role == stream.RoleOwner {
			isOwner = 1
			ch <- prometheus.MustNewConstMetric(c.confirmed, prometheus.GaugeValue, float64(st.Confirmed), id)
			ch <- prometheus.MustNewConstMetric(c.inSync, prometheus.GaugeValue, float64(st.InSync), id)
		}
		ch <- prometheus.MustNewConstMetric(c.owner, prometheus.GaugeValue, isOwner, id)
	}
}

// copyStates reads the state of each copy of tails on its shard: one call per shard, each reading
// all of that shard's copies into a slice of its own. A shard that does not answer within
// streamSeriesWait leaves its copies' states empty (its late answer goes into the buffered channel
// and is dropped).
func (c *streamCollector) copyStates(tails []wire.CopyTail) []streamhost.CopyState {
	type part struct {
		idx    []int
		states []streamhost.CopyState
	}
	out := make([]streamhost.CopyState, len(tails))
	shards := c.n.shard.Shards()
	byShard := make([][]int, len(shards))
	for i, t := range tails {
		s := shard.ShardOf(t.Stream, len(shards))
		byShard[s] = append(byShard[s], i)
	}
	done := make(chan part, len(shards))
	asked := 0
	for s, idx := range byShard {
		if len(idx) == 0 {
			continue
		}
		err := c.n.shard.Run(s, func(sh *shard.Shard) {
			p := part{idx: idx, states: make([]streamhost.CopyState, len(idx))}
			for k, i := range idx {
				p.states[k] = c.n.streams.State(sh, tails[i].Stream)
			}
			done <- p
		})
		if err == nil {
			asked++
		}
	}
	timeout := time.NewTimer(streamSeriesWait)
	defer timeout.Stop()
	for ; asked > 0; asked-- {
		select {
		case p := <-done:
			for k, i := range p.idx {
				out[i] = p.states[k]
			}
		case <-timeout.C:
			return out
		}
	}
	return out
}
