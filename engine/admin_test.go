package engine

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/ringstream/ringstream/engine/adminapi"
	"github.com/ringstream/ringstream/wire"
)

// adminPost posts to a node's admin path and decodes the recovery answer.
func adminPost(t *testing.T, n *Node, path string) (int, adminapi.RecoveryAction) {
	t.Helper()
	resp, err := http.Post("http://"+n.AdminAddr().String()+path, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out adminapi.RecoveryAction
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, out
}

func adminGet[T any](t *testing.T, n *Node, path string) T {
	t.Helper()
	resp, err := http.Get("http://" + n.AdminAddr().String() + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out T
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", path, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out
}

// primaryNode is the running node holding the metadata primary, or nil.
func (c *testCluster) primaryNode(skip uint16) *Node {
	for id, n := range c.nodes {
		if id != skip && n.Meta().Status().Primary {
			return n
		}
	}
	return nil
}

// TestNode_AcceptLossThroughAdminHTTP: a 3-copy stream under count_durable(1) (W = 1, so R = 3) loses
// its owner; the two survivors' seal answers are fewer than R and the recovery waits, listed by
// /v1/attention on the metadata primary as fewer_than_r. Accept-loss asked of another node is refused
// naming the primary; asked of the primary it commits, with the risk in its answer, a survivor
// becomes the owner and the stream takes produces again. Withdraw of a stream with no recovery is
// refused with the controller's reason.
func TestNode_AcceptLossThroughAdminHTTP(t *testing.T) {
	c := newTestClusterGrace(t, "", 50, `assignment_policy = "count_durable(1)"`)
	c.waitRegistered()
	tc := dialNode(t, c.nodes[1].ClientAddr(), "")
	created, look := tc.createLooked("fragile")
	var e *wire.ErrorReply
	oc := dialNode(t, c.nodes[look.Owner].ClientAddr(), "")
	waitForTB(t, "the owner's copy serving", func() bool {
		_, e = oc.produce(created.Stream, 1, 1, 1, []byte("before"))
		return e == nil
	})
	if code, res := adminPost(t, c.primaryNode(0), "/v1/recovery/withdraw?stream=fragile"); code != http.StatusConflict ||
		!strings.Contains(res.Error, "no pending recovery") {
		t.Fatalf("withdraw without a recovery: %d %+v", code, res)
	}
	c.nodes[look.Owner].Kill()
	var primary *Node
	waitForTB(t, "fewer_than_r on the metadata primary", func() bool {
		primary = c.primaryNode(look.Owner)
		if primary == nil {
			return false
		}
		a := adminGet[adminapi.Attention](t, primary, "/v1/attention")
		return a.Active && len(a.Entries) == 1 && a.Entries[0].Kind == "fewer_than_r" && a.Entries[0].Stream == created.Stream
	})
	if v := metricValue(t, primary, "ringstream_meta_recoveries"); v != "1" {
		t.Fatalf("ringstream_meta_recoveries %q while the recovery waits", v)
	}
	var other *Node
	for id, n := range c.nodes {
		if id != look.Owner && n != primary {
			other = n
		}
	}
	if code, res := adminPost(t, other, "/v1/recovery/accept-loss?stream=fragile"); code != http.StatusConflict ||
		res.Primary != primary.ID() {
		t.Fatalf("accept-loss on a backup: %d %+v", code, res)
	}
	code, res := adminPost(t, primary, "/v1/recovery/accept-loss?stream=fragile")
	if code != http.StatusOK || !res.Done || res.Owner == look.Owner || res.Owner == 0 || res.Warning == "" {
		t.Fatalf("accept-loss: %d %+v", code, res)
	}
	// The recovery was recorded by the controller of a surviving node (the primary's, or the next
	// primary's when the owner's node held the primary); the accepted loss is counted where it committed.
	outcome := func(n *Node, o string) float64 {
		return metricCount(t, n, fmt.Sprintf(`ringstream_controller_recoveries_total{node="%d",outcome="%s"}`, n.ID(), o))
	}
	recorded := outcome(primary, "recorded") + outcome(other, "recorded")
	if acc := outcome(primary, "accepted_loss"); recorded < 1 || acc != 1 {
		t.Fatalf("recoveries recorded %v on the survivors, accepted_loss %v on the primary's node: want 1 or more, and 1",
			recorded, acc)
	}
	nc := dialNode(t, c.nodes[res.Owner].ClientAddr(), "")
	waitForTB(t, "the new owner serving", func() bool {
		var r wire.ProduceReply
		r, e = nc.produce(created.Stream, 2, 1, 1, []byte("after"))
		if e == nil && r.Epoch < 2 {
			t.Fatalf("produce confirmed at epoch %d", r.Epoch)
		}
		return e == nil
	})
	waitForTB(t, "attention empty after the accepted loss", func() bool {
		return len(adminGet[adminapi.Attention](t, primary, "/v1/attention").Entries) == 0
	})
	st := adminGet[adminapi.Status](t, primary, "/v1/status")
	if len(st.Streams) != 1 || st.Streams[0].Owner != res.Owner || st.Streams[0].Recovery != "" {
		t.Fatalf("status streams %s", fmt.Sprint(st.Streams))
	}
}

// metricValue is the value of the first sample of metric name on n's /metrics ("" when absent).
func metricValue(t *testing.T, n *Node, name string) string {
	t.Helper()
	return metricLine(t, n, name+"{")
}

// metricLine is the value of the first sample on n's /metrics whose line starts with prefix ("" when
// absent).
func metricLine(t *testing.T, n *Node, prefix string) string {
	t.Helper()
	resp, err := http.Get("http://" + n.AdminAddr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, prefix) {
			return line[strings.LastIndexByte(line, ' ')+1:]
		}
	}
	return ""
}
