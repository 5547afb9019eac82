package meta

import (
	"fmt"
	"testing"
)

// Spec 000, "Copies with a longer tail": the cut is the lowest history start recorded for an epoch
// after the copy's own and up to the target, for the record log and the cursor log each; a copy on
// the target history is left alone; the owner of an epoch is never cut at its own start.
func TestCutPoint(t *testing.T) {
	// Starts of one stream: node 2 took over at epoch 2, node 3 at epoch 3 (lower record start but
	// higher cursor start: an accepted loss with lagging published tails), node 1 at epoch 4.
	starts := []HistoryStart{
		{Epoch: 2, RecordStart: 10, CursorStart: 4, Node: 2},
		{Epoch: 3, RecordStart: 7, CursorStart: 6, Node: 3},
		{Epoch: 4, RecordStart: 12, CursorStart: 5, Node: 1},
	}
	epochs := func(es ...uint32) []LogEpoch {
		out := make([]LogEpoch, len(es))
		for i, e := range es {
			out[i] = LogEpoch{Epoch: e, RecordStart: uint64(i) * 3, CursorStart: uint64(i)}
		}
		return out
	}
	cases := []struct {
		name   string
		node   uint16
		log    []LogEpoch
		target uint32
		starts []HistoryStart
		want   Cut
		ok     bool
	}{
		{"one epoch behind: the target's start", 5, epochs(1), 2, starts, Cut{10, 4}, true},
		{"two epochs behind: record and cursor starts taken separately", 5, epochs(1), 3, starts,
			Cut{Record: 7, Cursor: 4}, true},
		{"a copy with no log epochs: every start up to the target", 5, nil, 4, starts,
			Cut{Record: 7, Cursor: 4}, true},
		{"starts after the target are ignored", 5, epochs(1), 2, starts, Cut{10, 4}, true},
		{"starts at or before the own epoch are ignored", 5, epochs(1, 3), 4, starts, Cut{12, 5}, true},
		{"already on the target history: left alone", 5, epochs(1, 3), 3, starts, Cut{}, false},
		{"ahead of the target: left alone", 5, epochs(1, 4), 3, starts, Cut{}, false},
		{"no starts recorded", 5, epochs(1), 3, nil, Cut{}, false},
		{"no start between own epoch and target", 5, epochs(1), 3,
			[]HistoryStart{{Epoch: 4, RecordStart: 1, CursorStart: 1, Node: 1}}, Cut{}, false},
		{"accepted-loss owner applying its own epoch: never cut at its own start", 2, epochs(1), 2, starts,
			Cut{}, false},
		{"own start skipped, later starts still cut", 3, epochs(1, 2), 4, starts, Cut{12, 5}, true},
		{"own start skipped, earlier starts still cut", 3, epochs(1), 3, starts, Cut{10, 4}, true},
		{"own epoch is the last log epoch, not the epoch of the last record", 5, epochs(1, 2, 3), 4, starts,
			Cut{12, 5}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, ok := CutPoint(c.node, c.log, c.target, c.starts)
			if ok != c.ok || got != c.want {
				t.Fatalf("CutPoint(node %d, own epoch %d, target %d) = %+v, %v; want %+v, %v",
					c.node, OwnEpoch(c.log), c.target, got, ok, c.want, c.ok)
			}
		})
	}
}

// A log-epochs entry that starts exactly at the cut: the copy joined epoch 3 at record 7, where epoch
// 3's owner took over, and epoch 4's owner took over at 7 too. Its own epoch is 3 (the entry), so the
// cut for epoch 4 is epoch 4's start, 7, and nothing below 7 is touched. The entry stays after the cut
// (it starts at the cut), so the cut computed again is the same.
func TestCutPoint_LogEpochExactlyAtTheCut(t *testing.T) {
	starts := []HistoryStart{
		{Epoch: 2, RecordStart: 5, CursorStart: 2, Node: 2},
		{Epoch: 3, RecordStart: 7, CursorStart: 3, Node: 3},
		{Epoch: 4, RecordStart: 7, CursorStart: 3, Node: 1},
	}
	log := []LogEpoch{{Epoch: 1}, {Epoch: 3, RecordStart: 7, CursorStart: 3}}
	cut, ok := CutPoint(4, log, 4, starts)
	if !ok || cut != (Cut{Record: 7, Cursor: 3}) {
		t.Fatalf("cut %+v, %v; want {7 3}, true", cut, ok)
	}
	// What storage keeps after cutting at 7/3: entries that start past the cut go, the one at it stays.
	kept := log[:0:0]
	for _, e := range log {
		if e.RecordStart <= cut.Record && e.CursorStart <= cut.Cursor {
			kept = append(kept, e)
		}
	}
	if OwnEpoch(kept) != 3 {
		t.Fatalf("own epoch after the cut %d, want 3", OwnEpoch(kept))
	}
	again, ok := CutPoint(4, kept, 4, starts)
	if !ok || again != cut {
		t.Fatalf("cut again %+v, %v; want %+v", again, ok, cut)
	}
	// Were the own epoch taken as 1 (the epoch of the copy's last record, below the entry), the
	// epoch-2 start would cut to record 5: below the point where this copy joined epoch 3's history,
	// removing records epoch 3's owner confirmed.
	if wrong, _ := CutPoint(4, log[:1], 4, starts); wrong.Record != 5 {
		t.Fatalf("own epoch 1 would cut at %d; the test no longer tells the two apart", wrong.Record)
	}
}

// Spec 000, "Safety argument": R = E - W + 1 with W through Assignment.ConfirmCount, the path the
// owner confirms by, for E in 1..5 and every policy.
func TestAssignment_SealThreshold_EveryPolicyAndE(t *testing.T) {
	policies := []Policy{
		{Kind: PolicyUnset}, {Kind: PolicyLocalDurable}, {Kind: PolicyMajorityDurable},
		{Kind: PolicyCountDurable, Count: 1}, {Kind: PolicyCountDurable, Count: 2},
		{Kind: PolicyCountDurable, Count: 3}, {Kind: PolicyCountDurable, Count: 7},
		{Kind: PolicyCountAccepted, Count: 1}, {Kind: PolicyCountAccepted, Count: 4},
	}
	// want[policy][E-1] is R.
	want := [][5]int{
		{1, 1, 1, 1, 1}, // unset: every copy
		{1, 1, 1, 1, 1}, // local_durable: every copy
		{1, 1, 2, 2, 3}, // majority
		{1, 2, 3, 4, 5}, // count 1
		{1, 1, 2, 3, 4}, // count 2
		{1, 1, 1, 2, 3}, // count 3
		{1, 1, 1, 1, 1}, // count 7 capped at E
		{1, 2, 3, 4, 5}, // accepted 1 read as durable 1
		{1, 1, 1, 1, 2}, // accepted 4 read as durable 4
	}
	for i, p := range policies {
		for e := 1; e <= 5; e++ {
			t.Run(fmt.Sprintf("%s/E=%d", p, e), func(t *testing.T) {
				a := Assignment{Epoch: 1, Owner: 1, Policy: p}
				for f := 2; f <= e; f++ {
					a.Followers = append(a.Followers, uint16(f))
				}
				r := a.SealThreshold()
				if r != want[i][e-1] {
					t.Fatalf("R = %d, want %d", r, want[i][e-1])
				}
				if r+a.ConfirmCount() != e+1 {
					t.Fatalf("R %d + W %d != E %d + 1", r, a.ConfirmCount(), e)
				}
				if r != SealThreshold(p, e) {
					t.Fatalf("Assignment.SealThreshold %d, SealThreshold %d", r, SealThreshold(p, e))
				}
			})
		}
	}
}
