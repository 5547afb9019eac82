package admin

import (
	"errors"
	"strings"
	"testing"

	"github.com/ringstream/ringstream/engine/metahost"
	"github.com/ringstream/ringstream/wire"
)

// TestReadiness_UnopenedCopies: an assigned copy counts as open only when the host published it at
// the assignment's epoch or later, or lists it as failed; another incarnation's copy is not it.
func TestReadiness_UnopenedCopies(t *testing.T) {
	assigned := []assignedCopy{{stream: 1, incarnation: 1, epoch: 2}, {stream: 2, incarnation: 1, epoch: 1},
		{stream: 3, incarnation: 2, epoch: 1}, {stream: 4, incarnation: 1, epoch: 1}}
	tails := []wire.CopyTail{{Stream: 1, Incarnation: 1, Epoch: 2}, {Stream: 2, Incarnation: 1, Epoch: 1},
		{Stream: 3, Incarnation: 1, Epoch: 5}}
	failed := map[copyKey]bool{{stream: 4, incarnation: 1}: true}
	if missing, first := unopenedCopies(assigned, tails, failed); missing != 1 || first != assigned[2] {
		t.Fatalf("missing %d, first %+v; want 1, stream 3 at incarnation 2", missing, first)
	}
	tails[0].Epoch = 1 // open, but at an epoch below its assignment's
	if missing, first := unopenedCopies(assigned, tails, failed); missing != 2 || first != assigned[0] {
		t.Fatalf("missing %d, first %+v; want 2, stream 1 first", missing, first)
	}
	if missing, _ := unopenedCopies(assigned, tails, nil); missing != 3 {
		t.Fatalf("missing %d without the failure; want 3", missing)
	}
	if missing, _ := unopenedCopies(nil, nil, nil); missing != 0 {
		t.Fatalf("missing %d of nothing assigned", missing)
	}
}

// TestReadiness_MetaReplica: a replica lets the node be ready only in a normal view with working
// storage, as the primary or as a backup that applied the commit its primary last sent it.
func TestReadiness_MetaReplica(t *testing.T) {
	caughtUp := metahost.Status{View: 3, Commit: 9, Normal: true, HeardPrimary: true, CommitHeard: 9}
	for _, tc := range []struct {
		name string
		edit func(*metahost.Status)
		want string
	}{
		{"backup caught up", func(*metahost.Status) {}, ""},
		{"primary that heard nobody", func(m *metahost.Status) { m.Primary, m.HeardPrimary, m.CommitHeard = true, false, 0 }, ""},
		{"primary behind what it heard as a backup", func(m *metahost.Status) { m.Primary, m.Commit = true, 7 }, ""},
		{"storage failed", func(m *metahost.Status) { m.PersistErr = errors.New("EIO") }, "storage failed: EIO"},
		{"recovering", func(m *metahost.Status) { m.Recovering, m.Normal = true, false }, "recovering its state"},
		{"view change", func(m *metahost.Status) { m.Normal = false }, "not in a normal view"},
		{"primary not heard", func(m *metahost.Status) { m.HeardPrimary, m.CommitHeard = false, 0 }, "has not heard from the primary of view 3"},
		{"behind the commit heard", func(m *metahost.Status) { m.Commit = 8 }, "catching up: applied 8 of the primary's commit 9"},
	} {
		ms := caughtUp
		tc.edit(&ms)
		got := metaNotReady(ms)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q; want %q", tc.name, got, tc.want)
		}
	}
}
