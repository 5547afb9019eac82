package bench

import (
	"testing"
	"time"
)

// An owner kill's watch ends at a confirmation at a newer epoch (the Go client's) or at a batch of
// its stream written by a node other than the killed owner (the Kafka driver's); a batch of another
// stream, or one the killed owner wrote, does not end it.
func TestKillWatchEndsAtABatchOfAnotherNode(t *testing.T) {
	var w watches
	t0 := time.Now()
	wt := w.armKill(t0, 3, "bench-0.0", 1, nil)
	w.writtenBy(t0.Add(time.Millisecond), "bench-1.0", 2)
	w.writtenBy(t0.Add(2*time.Millisecond), "bench-0.0", 1)
	w.confirmed(t0.Add(3*time.Millisecond), t0, 0) // the Kafka driver's promises carry no epoch
	if wt.gapMs() != nil {
		t.Fatalf("watch ended at %v", *wt.gapMs())
	}
	w.writtenBy(t0.Add(4*time.Millisecond), "bench-0.0", 2)
	if g := wt.gapMs(); g == nil || *g != 4 {
		t.Fatalf("gap %v, want 4 ms", g)
	}
	ours := w.armKill(t0, 3, "bench-0.0", 1, nil)
	w.confirmed(t0.Add(5*time.Millisecond), t0, 4)
	if g := ours.gapMs(); g == nil || *g != 5 {
		t.Fatalf("gap at a newer epoch %v, want 5 ms", g)
	}
}
