package stream_test

import (
	"testing"

	"github.com/ringstream/ringstream/engine/stream"
	"github.com/ringstream/ringstream/wire"
)

// A retried batch is answered with its first offset and not appended again; a skipped sequence is
// refused with CodeSequenceGap.
func TestProducers_RetryAnsweredFromTable(t *testing.T) {
	cl := newCluster(t, assignment(1, 1, 2, 3))
	owner := cl.nodes[1]
	cl.produce(1, 9, 42, 0, 3, payload(0, 20))
	cl.produce(1, 9, 42, 1, 5, payload(1, 20))
	cl.settle()
	owner.takeReplies()
	tail := owner.recTail()
	cl.produce(1, 9, 42, 0, 3, payload(0, 20)) // retry of the first batch
	cl.settle()
	r := owner.takeReplies()
	if len(r) != 1 || !r[0].Produce.Duplicate || r[0].Produce.BaseOffset != 0 || r[0].Produce.Count != 3 {
		t.Fatalf("retry answered %+v", r)
	}
	if owner.recTail() != tail || cl.nodes[2].recTail() != tail {
		t.Fatal("retry was appended again")
	}
	cl.produce(1, 9, 42, 3, 1, payload(3, 20)) // sequence 2 skipped
	r = owner.takeReplies()
	if len(r) != 1 || r[0].Kind != stream.ReplyError || r[0].Error.Code != wire.CodeSequenceGap {
		t.Fatalf("gap answered %+v", r)
	}
}

// The table survives a restart: a copy opened on the log at a new epoch (as after a failover) is
// fed the batch headers and answers a retry with the first offset the old owner gave it.
func TestProducers_RetryAfterRestart(t *testing.T) {
	cl := newCluster(t, assignment(1, 1, 2))
	for i := 0; i < 6; i++ {
		cl.produce(1, 9, 100+uint64(i%2), uint64(i/2), 2, payload(i, 20))
	}
	cl.settle()
	old := cl.nodes[1]
	// Node 2 takes over at epoch 2 with node 1's log (the same bytes: it is a follower's copy).
	a2 := assignment(2, 2, 1)
	n2 := newNode(t, testConfig(2), a2, cl.nodes[2].rec, nil, cl.nodes[2].epochs)
	if n2.c.Role() != stream.RoleOwner || len(n2.epochs) != 2 {
		t.Fatalf("role %v epochs %+v", n2.c.Role(), n2.epochs)
	}
	n1 := newNode(t, testConfig(1), a2, old.rec, nil, old.epochs)
	cl2 := &cluster{t: t, nodes: map[uint16]*node{1: n1, 2: n2}, ids: []uint16{1, 2}}
	cl2.settle()
	cl2.produce(2, 9, 101, 1, 2, payload(3, 20)) // producer 101's second batch: offsets 6..7
	cl2.settle()
	r := n2.takeReplies()
	if len(r) != 1 || !r[0].Produce.Duplicate || r[0].Produce.BaseOffset != 6 || r[0].Produce.Epoch != 2 {
		t.Fatalf("retry after restart answered %+v", r)
	}
	cl2.produce(2, 9, 101, 3, 2, payload(7, 20)) // the next sequence is appended
	cl2.settle()
	r = n2.takeReplies()
	if len(r) != 1 || r[0].Produce.Duplicate || r[0].Produce.BaseOffset != 12 {
		t.Fatalf("next batch answered %+v", r)
	}
	if n1.recTail() != 14 {
		t.Fatalf("old owner, now follower, at %d", n1.recTail())
	}
}

// Past ProducersMax the producer whose last batch is oldest is forgotten: its retry is appended again
// (the table's documented limit), the others' retries are still answered from the table.
func TestProducers_EvictOldest(t *testing.T) {
	cfg := testConfig(1)
	cfg.ProducersMax = 2
	n := newNode(t, cfg, assignment(1, 1), nil, nil, nil)
	send := func(p, seq uint64) stream.Reply {
		m := stream.Message{Kind: stream.KindProduce, Client: p}
		m.Produce = wire.Produce{RequestID: seq, Stream: testStream, ProducerID: p, Sequence: seq, Count: 1, Batch: payload(int(p), 10)}
		n.c.Step(&m)
		n.ready(t)
		r := n.takeReplies()
		if len(r) != 1 {
			t.Fatalf("replies %+v", r)
		}
		return r[0]
	}
	send(1, 0) // offset 0
	send(2, 0) // offset 1
	send(3, 0) // offset 2: producer 1 (oldest last batch) is forgotten
	if r := send(2, 0); !r.Produce.Duplicate || r.Produce.BaseOffset != 1 {
		t.Fatalf("producer 2's retry: %+v", r.Produce)
	}
	if r := send(1, 0); r.Produce.Duplicate || r.Produce.BaseOffset != 3 {
		t.Fatalf("forgotten producer 1's retry: %+v", r.Produce)
	}
}
