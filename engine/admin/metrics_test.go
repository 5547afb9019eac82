package admin

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/ringstream/ringstream/engine/controlhost"
	"github.com/ringstream/ringstream/engine/meta"
)

func histogramCount(t *testing.T, h prometheus.Histogram) uint64 {
	t.Helper()
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// The controller events time a recovery from its record to its commit and from the node loss before
// it; a commit whose record another controller saw counts but is not timed, and a new term forgets
// the recoveries it did not see committed.
func TestRecoveryMetrics_TimeRecordToCommit(t *testing.T) {
	m := NewRecoveryMetrics(prometheus.Labels{"node": "1"})
	committed := func(op meta.OpKind, stream uint64) {
		m.Observe(controlhost.Event{Kind: controlhost.Committed, Stream: stream, Op: op, OK: true})
	}
	m.Observe(controlhost.Event{Kind: controlhost.BecamePrimary})
	m.Observe(controlhost.Event{Kind: controlhost.NodeLost, Node: 2})
	committed(meta.OpRecordRecovery, 5)
	m.Observe(controlhost.Event{Kind: controlhost.Committed, Stream: 5, Op: meta.OpCommitRecovery}) // refused: not OK
	committed(meta.OpCommitRecovery, 5)
	committed(meta.OpCommitRecovery, 6) // recorded under an earlier controller
	committed(meta.OpRecordRecovery, 7)
	m.Observe(controlhost.Event{Kind: controlhost.BecamePrimary})
	committed(meta.OpCommitRecovery, 7)
	if got := counterValue(t, m.outcomes[recoveryRecorded]); got != 2 {
		t.Errorf("recorded %v, want 2", got)
	}
	if got := counterValue(t, m.outcomes[recoveryCommitted]); got != 3 {
		t.Errorf("committed %v, want 3", got)
	}
	if got := histogramCount(t, m.toCommit); got != 1 {
		t.Errorf("record to commit timed %d times, want 1 (stream 5)", got)
	}
	if got := histogramCount(t, m.fromLoss); got != 1 {
		t.Errorf("loss to commit timed %d times, want 1 (stream 5)", got)
	}
	var h dto.Metric
	_ = m.toCommit.Write(&h)
	if s := h.GetHistogram().GetSampleSum(); s <= 0 {
		t.Errorf("record to commit sum %v, want above 0", s)
	}
}
