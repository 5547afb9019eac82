package stream_test

import (
	"testing"

	"github.com/ringstream/ringstream/engine/stream"
)

// Issue 22, finding 7: a sealed copy answers the old owner's prepares as stale (at or below its
// fence), so the old owner stops sending to it (the follower counted stale, and stalled) instead of
// probing a copy that will never take its records.
func TestSealedCopyAnswersOldPreparesAsStale(t *testing.T) {
	cl := newCluster(t, assignment(1, 1, 2, 3))
	cl.produce(1, 1, 1, 0, 2, payload(0, 100))
	cl.settle()
	cl.nodes[2].c.Sealed(2)
	cl.nodes[2].ready(t)
	cl.produce(1, 1, 1, 1, 2, payload(1, 100))
	cl.settle()
	owner, sealed := cl.nodes[1].c.Stats(), cl.nodes[2].c.Stats()
	if owner.Ignored[stream.IgnoreStaleFollower] == 0 {
		t.Fatalf("the old owner heard no stale answer from the sealed copy: %+v", owner.Ignored)
	}
	if sealed.Ignored[stream.IgnoreRole] != 0 {
		t.Fatalf("the sealed copy dropped the old owner's prepare without an answer: %+v", sealed.Ignored)
	}
	if m := cl.nodes[1].c.FollowerMatch(2); m != 2 {
		t.Fatalf("node 2 matched at %d after its seal, want 2 (what it held before)", m)
	}
}
