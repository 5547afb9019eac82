package shard_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringstream/ringstream/shard/shardtest"
)

// R19, R32: per-shard metrics count Commit and reply batches and entries, sent and received, groups
// busy and idle, and link state, on the registry passed in.
func TestR19_R32_ShardMetrics(t *testing.T) {
	const groups = 12
	var prim, back []*shardtest.Group
	for id := uint64(1); id <= groups; id++ {
		prim = append(prim, newGroup(id, []uint16{1, 2}, 1, 1))
		back = append(back, newGroup(id, []uint16{1, 2}, 2, 1))
	}
	n1 := offlineNode(t, 1, 1, []uint16{2}, prim...)
	n2 := offlineNode(t, 2, 1, []uint16{1}, back...)
	runTicks(n1, 5)
	deliver(t, n1.Shards()[0], 1, n2, 2)
	runTicks(n2, 1)
	deliver(t, n2.Shards()[0], 2, n1, 1)
	n2.Shards()[0].SetLinkUp(1, false)

	want := map[string]map[uint16]float64{ // metric -> node -> value
		"ringstream_shard_commit_batches_sent_total":     {1: 1, 2: 0},
		"ringstream_shard_commit_entries_sent_total":     {1: groups, 2: 0},
		"ringstream_shard_commit_batches_received_total": {1: 0, 2: 1},
		"ringstream_shard_commit_entries_received_total": {1: 0, 2: groups},
		"ringstream_shard_reply_batches_sent_total":      {1: 0, 2: 1},
		"ringstream_shard_reply_entries_sent_total":      {1: 0, 2: groups},
		"ringstream_shard_reply_batches_received_total":  {1: 1, 2: 0},
		"ringstream_shard_reply_entries_received_total":  {1: groups, 2: 0},
		"ringstream_shard_groups_busy":                   {1: groups, 2: 0},
		"ringstream_shard_groups_idle":                   {1: 0, 2: 0},
		"ringstream_shard_bad_commit_entries_total":      {1: 0, 2: 0},
		"ringstream_shard_link_up":                       {1: 1, 2: 0},
	}
	byState := map[string]float64{"busy": groups, "idle": 0, "eager": 0} // node 1's entries
	for node, n := range map[uint16]interface {
		RegisterMetrics(prometheus.Registerer) error
	}{1: n1, 2: n2} {
		reg := prometheus.NewPedanticRegistry()
		if err := n.RegisterMetrics(reg); err != nil {
			t.Fatalf("register: %v", err)
		}
		families, err := reg.Gather()
		if err != nil {
			t.Fatalf("gather: %v", err)
		}
		seen := map[string]bool{}
		for _, f := range families {
			if f.GetName() == "ringstream_shard_commit_entries_sent_by_state_total" {
				seen[f.GetName()] = true
				for _, m := range f.GetMetric() {
					state := m.GetLabel()[2].GetValue() // labels sort: node, shard, state
					if node == 1 && m.GetCounter().GetValue() != byState[state] {
						t.Errorf("node 1 %s entries %v, want %v", state, m.GetCounter().GetValue(), byState[state])
					}
				}
				continue
			}
			w, ok := want[f.GetName()]
			if !ok {
				continue
			}
			seen[f.GetName()] = true
			m := f.GetMetric()[0]
			v := m.GetCounter().GetValue() + m.GetGauge().GetValue()
			if v != w[node] {
				t.Errorf("node %d %s = %v, want %v", node, f.GetName(), v, w[node])
			}
		}
		for name := range want {
			if !seen[name] {
				t.Errorf("node %d: metric %s missing", node, name)
			}
		}
	}
}
