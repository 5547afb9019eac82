package streamhost_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/ringstream/ringstream/engine/stream"
	"github.com/ringstream/ringstream/engine/streamhost"
	"github.com/ringstream/ringstream/internal/fds"
	"github.com/ringstream/ringstream/shard"
)

// fdsUnder counts this process's descriptors open on dir or under it.
func fdsUnder(t testing.TB, dir string) int {
	t.Helper()
	n, err := fds.Under(dir)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// hostStats reads shard 0's stream host counters.
func hostStats(t testing.TB, n *testNode) streamhost.Stats {
	t.Helper()
	var st streamhost.Stats
	done := make(chan struct{})
	if err := n.node.Run(0, func(s *shard.Shard) { st = n.host.Stats(s); close(done) }); err != nil {
		t.Fatal(err)
	}
	<-done
	return st
}

// waitParked waits until want copies are parked and nothing is open under dir.
func waitParked(t testing.TB, n *testNode, want int, dir string) streamhost.Stats {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := hostStats(t, n)
		if st.Parked == want && fdsUnder(t, dir) == 0 {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d copies parked and %d descriptors open under them, want %d and 0", st.Parked, fdsUnder(t, dir), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestCopies_IdleCopiesParkAndServe: issue 11 (e). Copies park right after they open (no
// descriptor held); a produce reopens its copy's record log, is confirmed, and the copy parks
// again once unused for IdleCloseTicks; a fetch of a parked copy reads without reopening it; the
// next produce lands at the right offset. With IdleCloseTicks negative nothing parks: four descriptors
// per copy.
func TestCopies_IdleCopiesParkAndServe(t *testing.T) {
	const copies = 20
	specs := make([]streamhost.Spec, copies)
	for i := range specs {
		specs[i] = soloSpec(uint64(100 + i))
	}
	dir := t.TempDir()
	streams := filepath.Join(dir, "streams")
	n := soloNode(t, dir, func(c *streamhost.Config) { c.IdleCloseTicks = 50 }) // 100 ms at 2 ms ticks
	if _, errs := openAll(t, n, specs); len(errs) > 0 {
		t.Fatal(errs)
	}
	st := waitParked(t, n, copies, streams)
	if st.Parks < copies {
		t.Fatalf("%d parks counted, want at least %d", st.Parks, copies)
	}

	// The checks below hold however late this goroutine runs (a copy parks again 100 ms after its
	// last use): a produce is confirmed only once the copy reopened its log, and the copy's next
	// park shows in the count of parks.
	if r := produceOne(t, n, 100, 0); r.Kind != stream.ReplyProduce || r.Produce.BaseOffset != 0 {
		t.Fatalf("produce to a parked copy answered %+v", r)
	}
	if again := waitParked(t, n, copies, streams); again.Parks != st.Parks+1 {
		t.Fatalf("parks %d then %d: the produced-to copy should have parked once more", st.Parks, again.Parks)
	}
	if r := fetchAt(t, n, 101, 0); r.Kind == stream.ReplyError {
		t.Fatalf("fetch of an empty parked copy answered %+v", r)
	}
	st = waitParked(t, n, copies, streams)
	if r := fetchAt(t, n, 100, 0); r.Kind != stream.ReplyFetch || len(r.Fetch.Batches) == 0 {
		t.Fatalf("fetch from a parked copy answered %+v", r)
	}
	time.Sleep(300 * time.Millisecond) // three idle periods
	if got := hostStats(t, n); got.Parked != copies || got.Parks != st.Parks {
		t.Fatalf("after a fetch: %d copies parked, parks %d then %d: reads must not reopen a copy", got.Parked, st.Parks, got.Parks)
	}
	if r := produceOne(t, n, 100, 1); r.Kind != stream.ReplyProduce || r.Produce.BaseOffset != recordsPerBatch {
		t.Fatalf("produce after the copy parked again answered %+v", r)
	}
	if again := waitParked(t, n, copies, streams); again.Parks != st.Parks+1 {
		t.Fatalf("parks %d then %d: the copy did not park again after its produce", st.Parks, again.Parks)
	}

	// Control: parking off, every copy keeps its four descriptors.
	dir2 := t.TempDir()
	n2 := soloNode(t, dir2, func(c *streamhost.Config) { c.IdleCloseTicks = -1 })
	if _, errs := openAll(t, n2, specs); len(errs) > 0 {
		t.Fatal(errs)
	}
	time.Sleep(300 * time.Millisecond) // three idle periods of the first node
	if st := hostStats(t, n2); st.Parked != 0 || st.Parks != 0 {
		t.Fatalf("parking off: %d parked, %d parks", st.Parked, st.Parks)
	}
	if got := fdsUnder(t, filepath.Join(dir2, "streams")); got != 4*copies {
		t.Fatalf("parking off: %d descriptors under %d copies, want %d", got, copies, 4*copies)
	}
}

// A copy parks again right after its seal, not idle_close_after later: a failover seals thousands
// of copies at once, and each left open would hold four descriptors. The idle close here is far
// past the test, so only that park can park it.
func TestCopies_ParkAgainAfterASeal(t *testing.T) {
	c := newCluster(t, majority(1, 2, 3), func(c *streamhost.Config) { c.IdleCloseTicks = 1 << 30 })
	n3 := c.nodes[3]
	waitUntil(t, "parked after its open", func() bool { return hostStats(t, n3).Parked == 1 })
	parks := hostStats(t, n3).Parks
	if r := sealOn(t, n3, 2, 7, nil); r.FenceEpoch != 2 {
		t.Fatalf("seal answered %+v", r)
	}
	waitUntil(t, "parked again after its seal", func() bool {
		st := hostStats(t, n3)
		return st.Parks > parks && st.Parked == 1
	})
}
