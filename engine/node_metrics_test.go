package engine

import (
	"fmt"
	"net/netip"
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/ringstream/ringstream/wire"
)

// metricCount is the value of the sample whose line starts with prefix (name and labels, in the
// text format's label order) on n's /metrics, 0 when absent.
func metricCount(t *testing.T, n *Node, prefix string) float64 {
	t.Helper()
	v := metricLine(t, n, prefix)
	if v == "" {
		return 0
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		t.Fatalf("%s: %q: %v", prefix, v, err)
	}
	return f
}

// TestNode_MetricsTimeGroupCommitsAndPersists: a produce moves the count of the owner's record log
// group commit histogram, and the stream's creation the metadata persist histogram of the primary's
// node.
func TestNode_MetricsTimeGroupCommitsAndPersists(t *testing.T) {
	c := newTestCluster(t, "")
	c.waitRegistered()
	tc := dialNode(t, c.nodes[1].ClientAddr(), "")
	created, look := tc.createLooked("timed")
	var e *wire.ErrorReply
	owner := c.nodes[look.Owner]
	oc := dialNode(t, netip.MustParseAddrPort(string(look.OwnerAddr)), "")
	waitForTB(t, "the owner's copy serving", func() bool {
		_, e = oc.produce(created.Stream, 7, 1, 1, []byte("first"))
		return e == nil
	})
	commits := fmt.Sprintf(`ringstream_log_group_commit_seconds_count{log="records",node="%d"}`, owner.ID())
	before := metricCount(t, owner, commits)
	if before < 1 {
		t.Fatalf("%s = %v after a confirmed produce", commits, before)
	}
	if _, e := oc.produce(created.Stream, 7, 2, 1, []byte("second")); e != nil {
		t.Fatalf("produce: %+v", e)
	}
	waitForTB(t, "the second produce's group commit counted", func() bool { return metricCount(t, owner, commits) > before })
	primary := c.primaryNode(0)
	if primary == nil {
		t.Fatal("no metadata primary")
	}
	persists := fmt.Sprintf(`ringstream_meta_persist_seconds_count{node="%d"}`, primary.ID())
	if n := metricCount(t, primary, persists); n < 1 {
		t.Fatalf("%s = %v after the stream's creation committed", persists, n)
	}
}

// histogramCount is the number of observations of h.
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

// TestNode_MetricsCountParkedCopies: a stream's copies start parked on every node (no file open
// until used), the metrics say so, and a produce reopens the owner's copy, which the gauge shows.
func TestNode_MetricsCountParkedCopies(t *testing.T) {
	c := newTestCluster(t, "")
	c.waitRegistered()
	tc := dialNode(t, c.nodes[1].ClientAddr(), "")
	var e *wire.ErrorReply
	created, look := tc.createLooked("parked")
	owner := c.nodes[look.Owner]
	parked := func(n *Node) float64 {
		return metricCount(t, n, fmt.Sprintf(`ringstream_stream_copies_parked{node="%d"}`, n.ID()))
	}
	for _, n := range c.nodes {
		if n == nil {
			continue
		}
		waitForTB(t, fmt.Sprintf("node %d's copy parked", n.ID()), func() bool { return parked(n) == 1 })
		if parks := metricCount(t, n, fmt.Sprintf(`ringstream_stream_copy_parks_total{node="%d"}`, n.ID())); parks < 1 {
			t.Fatalf("node %d: %v parks counted with its copy parked", n.ID(), parks)
		}
	}
	oc := dialNode(t, netip.MustParseAddrPort(string(look.OwnerAddr)), "")
	waitForTB(t, "a produce to the parked copy confirmed", func() bool {
		_, e = oc.produce(created.Stream, 7, 1, 1, []byte("wake"))
		return e == nil
	})
	waitForTB(t, "the owner's copy reopened", func() bool { return parked(owner) == 0 })
}
