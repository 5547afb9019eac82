package kafka

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// groupMetrics are the group coordinator's gauges and counters.
type groupMetrics struct {
	groups             prometheus.Gauge
	members            prometheus.Gauge
	rebalances         prometheus.Counter
	membersRemoved     *prometheus.CounterVec
	offsetCommits      prometheus.Counter
	groupLoads         prometheus.Counter
	groupBadRecords    prometheus.Counter
	groupWriteFailures prometheus.Counter
	loadFailures       *prometheus.CounterVec
}

func newGroupMetrics(reg prometheus.Registerer, labels prometheus.Labels) (*groupMetrics, error) {
	m := &groupMetrics{
		groups: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ringstream_kafka_groups",
			Help: "Consumer groups held in memory by this node's group coordinators.", ConstLabels: labels}),
		members: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ringstream_kafka_group_members",
			Help: "Members of the consumer groups this node coordinates.", ConstLabels: labels}),
		rebalances: prometheus.NewCounter(prometheus.CounterOpts{Name: "ringstream_kafka_group_rebalances_total",
			Help: "Consumer group generations completed (a join phase ended).", ConstLabels: labels}),
		membersRemoved: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ringstream_kafka_group_members_removed_total",
			Help: "Consumer group members removed, by reason.", ConstLabels: labels}, []string{"reason"}),
		offsetCommits: prometheus.NewCounter(prometheus.CounterOpts{Name: "ringstream_kafka_offset_commits_total",
			Help: "Partition offsets committed (confirmed in the group's internal stream).", ConstLabels: labels}),
		groupLoads: prometheus.NewCounter(prometheus.CounterOpts{Name: "ringstream_kafka_group_coordinator_loads_total",
			Help: "Group coordinators started (each reads its internal stream, or learns it is not the owner).", ConstLabels: labels}),
		groupBadRecords: prometheus.NewCounter(prometheus.CounterOpts{Name: "ringstream_kafka_group_bad_records_total",
			Help: "Records of an internal group stream that are no offset record, skipped.", ConstLabels: labels}),
		groupWriteFailures: prometheus.NewCounter(prometheus.CounterOpts{Name: "ringstream_kafka_group_record_failures_total",
			Help: "Group records (membership after a rebalance) not written: members rejoin after a coordinator move.", ConstLabels: labels}),
		loadFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ringstream_kafka_group_coordinator_load_failures_total",
			Help:        "Group coordinator loads that ended without serving, by the Kafka error answered (16: this node does not own the group's stream, 15: its owner is not serving yet).",
			ConstLabels: labels}, []string{"code"}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.groups, m.members, m.rebalances, m.membersRemoved, m.offsetCommits,
		m.groupLoads, m.groupBadRecords, m.groupWriteFailures, m.loadFailures} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("kafka: group metrics: %w", err)
		}
	}
	return m, nil
}

// groupHost is the handler's part for the group coordinators: their metrics, and the one goroutine
// that runs their timers on the shards that hold one.
type groupHost struct {
	gm          *groupMetrics
	tickerOnce  sync.Once
	groupShards []atomic.Bool // shard i holds a coordinator
}

// init sets up the group host of a handler with shards shards.
func (g *groupHost) init(shards int, reg prometheus.Registerer, labels prometheus.Labels) error {
	gm, err := newGroupMetrics(reg, labels)
	g.gm, g.groupShards = gm, make([]atomic.Bool, shards)
	return err
}
