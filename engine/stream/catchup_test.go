package stream_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/ringstream/ringstream/engine/stream"
	"github.com/ringstream/ringstream/wire"
)

// cut3 drops every message to and from node 3 while on is true.
func cut3(cl *cluster, on *bool) {
	cl.drop = func(e envelope) bool { return *on && (e.from == 3 || e.to == 3) }
}

// A follower cut off while the stream runs: the others keep confirming (W = 2 of 3), the owner's
// bytes in flight to it stay within InflightBytesMax, and once it is back it catches up from the
// owner's log and ends with the same log.
func TestCatchup_SlowFollowerBoundedThenCatchesUp(t *testing.T) {
	// 1000-byte batches hit the bound on batches in flight (64) first, 8000-byte ones the bound on
	// bytes (256 KiB).
	for _, size := range []int{1000, 8000} {
		t.Run(fmt.Sprint(size), func(t *testing.T) { slowFollower(t, size) })
	}
}

func slowFollower(t *testing.T, size int) {
	cl := newCluster(t, assignment(1, 1, 2, 3))
	owner := cl.nodes[1]
	cut := true
	cut3(cl, &cut)
	const batches = 400
	peak := 0
	for i := 0; i < batches; i++ {
		cl.produce(1, 9, 0, 0, 2, payload(i, size))
		cl.settle()
		b := owner.c.InflightBytes(3)
		if b > testConfig(1).InflightBytesMax {
			t.Fatalf("%d bytes in flight to the cut follower", b)
		}
		peak = max(peak, b)
	}
	if want := min(64*(size+80), testConfig(1).InflightBytesMax); peak < want-(size+80) || peak > want {
		t.Fatalf("peak in flight %d, want about %d", peak, want)
	}
	if owner.c.Confirmed() != 2*batches || len(owner.takeReplies()) != batches {
		t.Fatalf("confirmed %d without the cut follower, want %d", owner.c.Confirmed(), 2*batches)
	}
	if cl.nodes[3].recTail() != 0 {
		t.Fatalf("cut follower holds %d records", cl.nodes[3].recTail())
	}
	cut = false
	cl.tick(int(testConfig(1).ResendTicks))
	if cl.nodes[3].recTail() != 2*batches {
		t.Fatalf("follower caught up to %d, want %d", cl.nodes[3].recTail(), 2*batches)
	}
	sameLog(t, owner, cl.nodes[3])
	if owner.c.Stats().Catchups == 0 {
		t.Fatal("no catch-up read was issued")
	}
	if owner.c.FollowerMatch(3) != 2*batches {
		t.Fatalf("owner sees follower 3 at %d", owner.c.FollowerMatch(3))
	}
	// Caught up, it is live again: the next batch reaches it in the same step.
	cl.produce(1, 9, 0, 0, 2, payload(1, 10))
	cl.settle()
	if cl.nodes[3].recTail() != 2*batches+2 {
		t.Fatalf("follower not live after catch-up: tail %d", cl.nodes[3].recTail())
	}
}

// A follower that restarts having lost what it had not synced comes back from its own durable tail:
// the owner's next prepare is refused as a gap, the owner probes there and serves it from its log.
func TestCatchup_RestartedFollowerResumesFromItsTail(t *testing.T) {
	a := assignment(1, 1, 2, 3)
	cl := newCluster(t, a)
	owner := cl.nodes[1]
	for i := 0; i < 10; i++ {
		cl.produce(1, 9, 0, 0, 1, payload(i, 200))
	}
	cl.settle()
	n3 := cl.nodes[3]
	n3.autoSync = false
	for i := 10; i < 20; i++ {
		cl.produce(1, 9, 0, 0, 1, payload(i, 200))
	}
	cl.settle()
	if owner.c.Confirmed() != 20 || n3.recTail() != 10 || len(n3.rec) != 20 {
		t.Fatalf("confirmed %d, node 3 durable %d of %d", owner.c.Confirmed(), n3.recTail(), len(n3.rec))
	}
	// Node 3 crashes: only its synced batches survive.
	cl.nodes[3] = newNode(t, testConfig(3), a, n3.rec[:n3.recSync], nil, n3.epochs)
	for i := 20; i < 25; i++ {
		cl.produce(1, 9, 0, 0, 1, payload(i, 200))
	}
	cl.settle()
	cl.tick(int(testConfig(1).ResendTicks))
	if got := cl.nodes[3].recTail(); got != 25 {
		t.Fatalf("restarted follower at %d, want 25", got)
	}
	sameLog(t, owner, cl.nodes[3])
	if n := cl.nodes[3].c.Stats().Refused[stream.RefuseGap]; n == 0 {
		t.Fatal("the restarted follower never refused a gap")
	}
	t.Logf("owner stats %+v", owner.c.Stats())
}

// An owner at epoch 4 (which appended [4,6) as epoch 3's owner) meets a follower that holds an older owner's unconfirmed suffix: its probe at
// the follower's tail is refused (wrong predecessor epoch), the next one at the start of the owner's
// own epoch run is accepted, and the divergent records are then refused, not overwritten: the
// follower is left stalled for the seal to cut (the failover issue), and the owner keeps confirming
// with the others.
func TestCatchup_DivergentSuffixStallsFollower(t *testing.T) {
	common := [][]byte{batch(0, 4, 1, 30)}
	ownerLog := append(append([][]byte(nil), common...), batch(4, 2, 3, 30))
	staleLog := append(append([][]byte(nil), common...), batch(4, 4, 2, 30))
	a := assignment(4, 1, 2, 3)
	epochs1 := []wire.LogEpoch{{Epoch: 1}, {Epoch: 3, RecordStart: 4}}
	epochs2 := []wire.LogEpoch{{Epoch: 1}, {Epoch: 2, RecordStart: 4}}
	cl := &cluster{t: t, nodes: map[uint16]*node{}, ids: []uint16{1, 2, 3}}
	cl.nodes[1] = newNode(t, testConfig(1), a, ownerLog, nil, epochs1)
	cl.nodes[2] = newNode(t, testConfig(2), a, staleLog, nil, epochs2)
	cl.nodes[3] = newNode(t, testConfig(3), a, common, nil, epochs1[:1])
	cl.settle()
	owner := cl.nodes[1]
	if owner.c.Role() != stream.RoleOwner {
		t.Fatalf("owner role %v", owner.c.Role())
	}
	cl.produce(1, 9, 0, 0, 1, payload(9, 10))
	cl.settle()
	if owner.c.Confirmed() != 7 || cl.nodes[3].recTail() != 7 {
		t.Fatalf("confirmed %d, node 3 at %d; want 7 and 7", owner.c.Confirmed(), cl.nodes[3].recTail())
	}
	n2 := cl.nodes[2]
	if n2.recTail() != 8 || !bytes.Equal(n2.rec[1], staleLog[1]) {
		t.Fatal("the divergent suffix was overwritten")
	}
	st := n2.c.Stats()
	if st.Refused[stream.RefuseWrongPrevEpoch] == 0 || st.Refused[stream.RefuseDivergent] == 0 {
		t.Fatalf("follower refusals %v", st.Refused)
	}
	if owner.c.Stats().Diverged != 1 {
		t.Fatalf("owner stats %+v", owner.c.Stats())
	}
	cl.tick(20) // stalled: probed again each ResendTicks, never overwritten, never looping
	if n2.recTail() != 8 || owner.c.Stats().Probes > 12 {
		t.Fatalf("node 2 at %d after ticks, %d probes", n2.recTail(), owner.c.Stats().Probes)
	}
}

// A catch-up read the host could not start (its read table full) is tried again at a later tick,
// even on an idle stream.
func TestCatchup_FailedReadRetriedOnTick(t *testing.T) {
	cl := newCluster(t, assignment(1, 1, 2))
	cut := true
	cl.drop = func(e envelope) bool { return cut && (e.from == 2 || e.to == 2) }
	for i := 0; i < 80; i++ {
		cl.produce(1, 9, 0, 0, 1, payload(i, 100))
	}
	cl.settle()
	cut = false
	owner := cl.nodes[1]
	owner.failRead = 3
	cl.tick(int(testConfig(1).ResendTicks) + 3)
	if owner.failRead != 0 || cl.nodes[2].recTail() != 80 {
		t.Fatalf("%d refusals left, follower at %d", owner.failRead, cl.nodes[2].recTail())
	}
}

// Under constant load the owner's log always holds a group waiting for its commit. A follower that
// caught up by reads to the durable tail gets that group from the owner's memory and is live again,
// instead of trailing one group commit behind on reads for as long as produces come.
func TestCatchup_LiveAgainUnderConstantLoad(t *testing.T) {
	cl := newCluster(t, assignment(1, 1, 2, 3))
	owner := cl.nodes[1]
	owner.autoSync = false
	cut := true
	cut3(cl, &cut)
	for i := 0; i < 100; i++ {
		cl.produce(1, 9, 0, 0, 1, payload(i, 100))
		owner.sync(t)
		owner.ready(t)
		cl.settle()
	}
	cut = false
	var reads uint64
	for i := 0; i < 40; i++ {
		cl.produce(1, 9, 0, 0, 1, payload(i, 100)) // appended, waiting for the next group commit
		cl.tick(1)
		if i == 30 {
			reads = owner.c.Stats().Catchups
		}
		owner.sync(t)
		owner.ready(t)
		cl.settle()
	}
	if got := owner.c.Stats().Catchups; got != reads {
		t.Fatalf("follower still served by reads after catching up: %d reads, %d ten turns ago", got, reads)
	}
	if owner.c.Stats().Unsynced == 0 || cl.nodes[3].recTail() != owner.recTail() {
		t.Fatalf("stats %+v, node 3 at %d, owner at %d", owner.c.Stats(), cl.nodes[3].recTail(), owner.recTail())
	}
	sameLog(t, owner, cl.nodes[3])
}
