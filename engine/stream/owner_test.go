package stream_test

import (
	"testing"

	"github.com/ringstream/ringstream/engine/stream"
	"github.com/ringstream/ringstream/wire"
)

// A 3-copy stream: a produce is appended on every copy, confirmed, and answered once.
func TestProduceConfirmedOnThreeCopies(t *testing.T) {
	cl := newCluster(t, assignment(1, 1, 2, 3))
	owner := cl.nodes[1]
	for i := 0; i < 20; i++ {
		cl.produce(1, 9, 42, uint64(i), 4, payload(i, 100))
		cl.settle()
	}
	replies := owner.takeReplies()
	if len(replies) != 20 {
		t.Fatalf("%d replies, want 20", len(replies))
	}
	for i, r := range replies {
		if r.Kind != stream.ReplyProduce || r.Produce.BaseOffset != uint64(4*i) || r.Produce.Count != 4 || r.Produce.Duplicate {
			t.Fatalf("reply %d: %+v", i, r)
		}
	}
	if got := owner.c.Confirmed(); got != 80 {
		t.Fatalf("confirmed %d, want 80", got)
	}
	for _, id := range []uint16{2, 3} {
		if cl.nodes[id].recTail() != 80 {
			t.Fatalf("node %d tail %d, want 80", id, cl.nodes[id].recTail())
		}
		sameLog(t, owner, cl.nodes[id])
	}
	fx := owner.c.Ready()
	if fx.Heartbeat.Commit != 80 || fx.Heartbeat.State != wire.HeartbeatIdle || len(fx.Heartbeat.Holders) != 2 {
		t.Fatalf("heartbeat %+v", fx.Heartbeat)
	}
}

// The owner sends each batch in the step that appends it, from the appended bytes, before its own
// log reports it durable; a produce is answered only once the confirmed tail passes it.
func TestProduceSentInSameStepAndAckedOnConfirm(t *testing.T) {
	cl := newCluster(t, assignment(1, 1, 2, 3))
	owner := cl.nodes[1]
	owner.autoSync = false
	m := stream.Message{Kind: stream.KindProduce, Client: 5}
	m.Produce = wire.Produce{RequestID: 77, Stream: testStream, Count: 3, Batch: payload(1, 50)}
	owner.c.Step(&m)
	fx := owner.c.Ready()
	if len(fx.Appends) != 1 || len(fx.Prepares) != 2 {
		t.Fatalf("appends %d prepares %d, want 1 and 2", len(fx.Appends), len(fx.Prepares))
	}
	for _, p := range fx.Prepares {
		if p.Source != stream.SourceAppends || p.AppendFrom != 0 || p.AppendTo != 1 || p.Msg.Count != 3 || p.Msg.BaseOffset != 0 {
			t.Fatalf("prepare %+v", p)
		}
	}
	if fx.Heartbeat.State != wire.HeartbeatBusy {
		t.Fatalf("owner with an unconfirmed produce is %v", fx.Heartbeat.State)
	}
	owner.apply(t, fx)
	cl.settle()
	if len(owner.replies) != 0 {
		t.Fatalf("answered before the owner's own fsync: %+v", owner.replies)
	}
	if owner.c.Confirmed() != 0 {
		t.Fatalf("confirmed %d before the owner's fsync", owner.c.Confirmed())
	}
	owner.sync(t)
	owner.ready(t)
	if len(owner.replies) != 1 || owner.replies[0].Produce.RequestID != 77 {
		t.Fatalf("replies %+v", owner.replies)
	}
}

// Several produces in one step go to a follower as one prepare over the appended run.
func TestProducesInOneStepCoalesce(t *testing.T) {
	cl := newCluster(t, assignment(1, 1, 2))
	owner := cl.nodes[1]
	for i := 0; i < 3; i++ {
		m := stream.Message{Kind: stream.KindProduce, Client: 5}
		m.Produce = wire.Produce{RequestID: uint64(i), Stream: testStream, Count: 2, Batch: payload(i, 10)}
		owner.c.Step(&m)
	}
	fx := owner.c.Ready()
	if len(fx.Prepares) != 1 || fx.Prepares[0].AppendFrom != 0 || fx.Prepares[0].AppendTo != 3 || fx.Prepares[0].Msg.Count != 6 {
		t.Fatalf("prepares %+v", fx.Prepares)
	}
	owner.apply(t, fx)
	owner.ready(t)
	cl.settle()
	if owner.c.Confirmed() != 6 || cl.nodes[2].recTail() != 6 {
		t.Fatalf("confirmed %d follower tail %d", owner.c.Confirmed(), cl.nodes[2].recTail())
	}
}
