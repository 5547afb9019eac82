package engine

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net/netip"
	"testing"
	"time"

	"github.com/ringstream/ringstream/wire"
)

// produce sends one batch of count records and reads the answer.
func (tc *testClient) produce(stream uint64, producer, seq uint64, count uint32, batch []byte) (wire.ProduceReply, *wire.ErrorReply) {
	tc.t.Helper()
	rid := tc.next()
	tc.write(wire.AppendProduce(nil, wire.From{Cluster: nodeTestCluster}, &wire.Produce{RequestID: rid, Stream: stream,
		ProducerID: producer, Sequence: seq, Count: count, Batch: batch}))
	h, body := tc.read()
	if e := errorOf(tc.t, h, body); e != nil {
		return wire.ProduceReply{}, e
	}
	r, err := wire.DecodeProduceReply(&h, body)
	if err != nil || r.RequestID != rid {
		tc.t.Fatalf("produce reply %+v: %v (want request %d)", r, err, rid)
	}
	return r, nil
}

// TestNode_ProduceConfirmFetchThroughTheClientProtocol: a 3-copy stream created through a client
// connection opens its copies on the three nodes (the assignments reach them); produces to the owner,
// looked up by name, are confirmed at consecutive offsets, a retried batch is answered as a duplicate,
// a produce to a follower is sent to the owner, and a fetch from the owner reads the batches back.
func TestNode_ProduceConfirmFetchThroughTheClientProtocol(t *testing.T) {
	c := newTestCluster(t, "")
	c.waitRegistered()
	tc := dialNode(t, c.nodes[3].ClientAddr(), "")
	var e *wire.ErrorReply
	created, look := tc.createLooked("events")
	owner := c.nodes[look.Owner]
	oc := dialNode(t, netip.MustParseAddrPort(string(look.OwnerAddr)), "")
	var r wire.ProduceReply
	waitForTB(t, "the owner's copy serving", func() bool {
		r, e = oc.produce(created.Stream, 7, 1, 2, []byte("first-second"))
		if e != nil && e.Code != wire.CodeUnavailable && e.Code != wire.CodeNotYet && e.Code != wire.CodeNotOwner {
			t.Fatalf("produce: %v %s", e.Code, e.Message)
		}
		return e == nil
	})
	if r.BaseOffset != 0 || r.Count != 2 || r.Duplicate {
		t.Fatalf("first produce: %+v", r)
	}
	if r, e = oc.produce(created.Stream, 7, 2, 1, []byte("third")); e != nil || r.BaseOffset != 2 {
		t.Fatalf("second produce: %+v %+v", r, e)
	}
	if r, e = oc.produce(created.Stream, 7, 2, 1, []byte("third")); e != nil || !r.Duplicate || r.BaseOffset != 2 {
		t.Fatalf("retried produce: %+v %+v", r, e)
	}
	follower := c.nodes[look.Owner%3+1]
	fc := dialNode(t, follower.ClientAddr(), "")
	waitForTB(t, "the follower's copy open", func() bool {
		_, e = fc.produce(created.Stream, 8, 1, 1, []byte("x"))
		return e != nil && e.Code == wire.CodeNotOwner && e.Owner == owner.ID()
	})
	rid := oc.next()
	oc.write(wire.AppendFetch(nil, wire.From{Cluster: nodeTestCluster}, &wire.Fetch{RequestID: rid, Stream: created.Stream,
		BytesMax: 1 << 20}))
	h, body := oc.read()
	if e := errorOf(t, h, body); e != nil {
		t.Fatalf("fetch: %v %s", e.Code, e.Message)
	}
	fr, err := wire.DecodeFetchReply(&h, body)
	if err != nil || fr.RequestID != rid || fr.BaseOffset != 0 || fr.Count != 3 || fr.ConfirmedTail != 3 {
		t.Fatalf("fetch reply %+v: %v", fr, err)
	}
	if !bytes.Contains(fr.Batches, []byte("first-second")) || !bytes.Contains(fr.Batches, []byte("third")) {
		t.Fatalf("fetched batches do not hold the records: %q", fr.Batches)
	}
	waitForTB(t, "every copy in status", func() bool {
		for _, n := range c.nodes {
			st := n.Status()
			if len(st.Copies) != 1 || !st.Copies[0].Open || st.Copies[0].Durable != 3 {
				return false
			}
		}
		return true
	})
}

// TestNode_ProducesOfOneTurnLeaveAsOnePrepare: 64 produces pipelined on one connection are each
// confirmed once at consecutive offsets, and the owner sends its followers far fewer data frames than
// two per produce: the produces a shard receives in one turn reach the copy together (StepAll) and
// leave for each follower as one prepare.
func TestNode_ProducesOfOneTurnLeaveAsOnePrepare(t *testing.T) {
	c := newTestCluster(t, "")
	c.waitRegistered()
	tc := dialNode(t, c.nodes[1].ClientAddr(), "")
	var e *wire.ErrorReply
	created, look := tc.createLooked("pipelined")
	owner := c.nodes[look.Owner]
	oc := dialNode(t, owner.ClientAddr(), "")
	waitForTB(t, "the owner's copy serving", func() bool {
		_, e = oc.produce(created.Stream, 1, 1, 1, []byte("warm-up"))
		return e == nil
	})
	dataFrames := func() (n uint64) {
		for _, s := range owner.Shards().Shards() {
			n += s.Stats().DataFramesSent.Load()
		}
		return n
	}
	before := dataFrames()
	const produces = 64
	var frames []byte
	for i := range uint64(produces) {
		frames = wire.AppendProduce(frames, wire.From{Cluster: nodeTestCluster}, &wire.Produce{RequestID: 1000 + i,
			Stream: created.Stream, ProducerID: 1, Sequence: 2 + i, Count: 1, Batch: fmt.Appendf(nil, "record %d", i)})
	}
	oc.write(frames)
	seen := map[uint64]bool{}
	for range produces {
		h, body := oc.read()
		if e := errorOf(t, h, body); e != nil {
			t.Fatalf("produce: %v %s", e.Code, e.Message)
		}
		r, err := wire.DecodeProduceReply(&h, body)
		if err != nil || r.Duplicate || r.BaseOffset != r.RequestID-1000+1 || seen[r.RequestID] {
			t.Fatalf("reply %+v: %v", r, err)
		}
		seen[r.RequestID] = true
	}
	sent := dataFrames() - before
	t.Logf("%d produces: %d data frames to the followers", produces, sent)
	if sent > produces {
		t.Fatalf("%d data frames for %d produces to two followers: the produces were not batched", sent, produces)
	}
}

// BenchmarkNode_Produce3Copies: one produce of one record at a time to a 3-copy stream through the
// client protocol, from the client's frame to its confirmed reply (owner, two followers, their
// fdatasyncs), on three nodes in this process. allocs/op counts every goroutine of the process.
func BenchmarkNode_Produce3Copies(b *testing.B) {
	c := newTestCluster(b, "")
	c.waitRegistered()
	tc := dialNode(b, c.nodes[1].ClientAddr(), "")
	var e *wire.ErrorReply
	created, look := tc.createLooked("bench")
	oc := dialNode(b, c.nodes[look.Owner].ClientAddr(), "")
	waitForTB(b, "the owner's copy serving", func() bool {
		_, e = oc.produce(created.Stream, 0, 0, 1, []byte("warm-up"))
		return e == nil
	})
	// Producer 0 opts out of deduplication, so the same frame can be sent again and again.
	frame := wire.AppendProduce(nil, wire.From{Cluster: nodeTestCluster}, &wire.Produce{RequestID: 77,
		Stream: created.Stream, Count: 1, Batch: []byte("a record of some bytes")})
	reply := make([]byte, wire.HeaderSize)
	_ = oc.c.SetDeadline(time.Now().Add(time.Hour))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := oc.c.Write(frame); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(oc.c, reply); err != nil {
			b.Fatal(err)
		}
		if wire.Command(binary.LittleEndian.Uint16(reply[46:])) != wire.CommandProduceReply {
			b.Fatalf("reply command %d", binary.LittleEndian.Uint16(reply[46:]))
		}
	}
}
