package admin

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringstream/ringstream/engine/controlhost"
	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/segment"
)

// Recovery outcomes the controller's metrics count (RecoveryMetrics.outcomes).
const (
	recoveryRecorded = iota
	recoveryCommitted
	recoveryWithdrawn
	recoveryAcceptedLoss
	recoveryOutcomes
)

// StorageMetrics time the node's fsyncs: each group commit of the stream copies' logs (segment's
// Config.CommitObserver, on every shard's goroutine) and each persist of the metadata replica
// (metahost.Group.SetPersistObserver, on shard 0's). Observing is a histogram's atomic adds: nothing is
// allocated per commit.
type StorageMetrics struct {
	commitVec   *prometheus.HistogramVec
	commit      [3]prometheus.Observer // by segment.LogKind (RecordLog, CursorLog), resolved at start
	metaPersist prometheus.Histogram
}

// RecoveryMetrics count the recoveries the active controller on this node carried through the
// metadata group, and time them, from the controller host's events (controlhost.Host.SetObserver, on shard
// 0's goroutine, the only one that touches started and lostAt).
type RecoveryMetrics struct {
	outcomes [recoveryOutcomes]prometheus.Counter
	// toCommit: from a stream's RecordRecovery committing to its CommitRecovery committing (the seal
	// round and the decision). fromLoss: from the node loss the controller
	// declared before the RecordRecovery to the same commit: the controller's part of the failover
	// gap (the new owner still has to hear its assignment and open).
	toCommit, fromLoss prometheus.Histogram

	started map[uint64]recoveryStart // by stream: a recovery recorded and not yet committed
	lostAt  time.Time                // the controller's last node loss in its current term
}

type recoveryStart struct{ recorded, lost time.Time }

// recoveriesStartedMax bounds RecoveryMetrics.started: a recovery withdrawn or deleted without a
// commit leaves its entry until the stream records another or the controller's term ends.
const recoveriesStartedMax = 1 << 16

// NewStorageMetrics makes the fsync histograms (before the groups that feed them).
func NewStorageMetrics(labels prometheus.Labels, buckets []float64) *StorageMetrics {
	commit := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "ringstream_log_group_commit_seconds",
		Help: "Group commits of the stream copies' logs, from queueing the writes to the last completion " +
			"(writev and linked fdatasync per file, the directory fsync of a group that created a file).",
		ConstLabels: labels, Buckets: buckets}, []string{"log"})
	m := &StorageMetrics{commitVec: commit, metaPersist: prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "ringstream_meta_persist_seconds", Help: "Persists of the metadata replica, from queueing the " +
			"chain to its last completion (log and superblock copies written, one fdatasync).",
		ConstLabels: labels, Buckets: buckets})}
	m.commit[segment.RecordLog] = commit.WithLabelValues("records")
	m.commit[segment.CursorLog] = commit.WithLabelValues("cursors")
	return m
}

// collectors are the histograms to register.
func (m *StorageMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.commitVec, m.metaPersist}
}

// ObserveCommit is segment.Config.CommitObserver.
func (m *StorageMetrics) ObserveCommit(log segment.LogKind, d time.Duration) {
	if int(log) < len(m.commit) && m.commit[log] != nil {
		m.commit[log].Observe(d.Seconds())
	}
}

// ObservePersist is metahost.Group.SetPersistObserver's function.
func (m *StorageMetrics) ObservePersist(d time.Duration) { m.metaPersist.Observe(d.Seconds()) }

// NewRecoveryMetrics makes the recovery counters and timings of a node holding a metadata replica.
func NewRecoveryMetrics(labels prometheus.Labels) *RecoveryMetrics {
	outcomes := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ringstream_controller_recoveries_total",
		Help: "Recovery ops committed: recorded and committed by the active controller on this node, " +
			"withdrawn and accepted_loss by an operator's request to this node.",
		ConstLabels: labels}, []string{"outcome"})
	m := &RecoveryMetrics{started: map[uint64]recoveryStart{}}
	for i, name := range [recoveryOutcomes]string{"recorded", "committed", "withdrawn", "accepted_loss"} {
		m.outcomes[i] = outcomes.WithLabelValues(name)
	}
	buckets := prometheus.ExponentialBuckets(1e-3, 2, 16) // 1 ms to about 33 s
	m.toCommit = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "ringstream_controller_recovery_seconds",
		Help: "From a recovery's RecordRecovery committing to its CommitRecovery committing, on the active " +
			"controller.", ConstLabels: labels, Buckets: buckets})
	m.fromLoss = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "ringstream_controller_failover_seconds",
		Help: "From the controller declaring a node lost to the commit of each recovery that loss started: " +
			"the controller's part of the failover gap.", ConstLabels: labels, Buckets: buckets})
	return m
}

func (m *RecoveryMetrics) collectors() []prometheus.Collector {
	out := []prometheus.Collector{m.toCommit, m.fromLoss}
	for _, c := range m.outcomes {
		out = append(out, c)
	}
	return out
}

// Observe is the controller host's observer (shard 0's goroutine).
func (m *RecoveryMetrics) Observe(e controlhost.Event) {
	now := time.Now()
	switch e.Kind {
	case controlhost.BecamePrimary:
		clear(m.started)
		m.lostAt = time.Time{}
	case controlhost.NodeLost:
		m.lostAt = now
	case controlhost.Committed:
		if e.OK {
			m.committed(e, now)
		}
	}
}

func (m *RecoveryMetrics) committed(e controlhost.Event, now time.Time) {
	switch e.Op {
	case meta.OpRecordRecovery:
		m.outcomes[recoveryRecorded].Inc()
		if len(m.started) >= recoveriesStartedMax {
			clear(m.started)
		}
		m.started[e.Stream] = recoveryStart{recorded: now, lost: m.lostAt}
	case meta.OpCommitRecovery:
		m.outcomes[recoveryCommitted].Inc()
		st, ok := m.started[e.Stream]
		if !ok {
			return // recorded under another controller: its start is not known here
		}
		delete(m.started, e.Stream)
		m.toCommit.Observe(now.Sub(st.recorded).Seconds())
		if !st.lost.IsZero() {
			m.fromLoss.Observe(now.Sub(st.lost).Seconds())
		}
	}
}

// operator counts a withdraw or an accepted loss the operator's request committed through this
// node (recovery.go; those ops do not go through the controller host). Safe from any goroutine.
func (m *RecoveryMetrics) operator(action string) {
	if action == "withdraw" {
		m.outcomes[recoveryWithdrawn].Inc()
		return
	}
	m.outcomes[recoveryAcceptedLoss].Inc()
}
