package engine

import (
	"net/netip"
	"testing"

	"github.com/ringstream/ringstream/segment"
	"github.com/ringstream/ringstream/wire"
)

// produceFormat sends one batch of one record in format and reads the answer.
func (tc *testClient) produceFormat(stream uint64, seq uint64, format uint8, batch []byte) (wire.ProduceReply, *wire.ErrorReply) {
	tc.t.Helper()
	rid := tc.next()
	tc.write(wire.AppendProduce(nil, wire.From{Cluster: nodeTestCluster}, &wire.Produce{RequestID: rid, Stream: stream,
		ProducerID: 9, Sequence: seq, Format: format, Count: 1, Batch: batch}))
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

// TestNode_RecordFormatStoredAsBatchVersion: a produce's format travels from the wire through the
// owner's copy to the stored batch header's version on every copy: a format-2 batch and a format-1
// batch come back from a fetch with versions 2 and 1 and their payloads untouched (the node never
// reads a payload), and a produce of format 3 is refused with CodeBadFormat stating FormatRule, by the
// owner and by a follower, without taking an offset.
func TestNode_RecordFormatStoredAsBatchVersion(t *testing.T) {
	c := newTestCluster(t, "")
	c.waitRegistered()
	tc := dialNode(t, c.nodes[1].ClientAddr(), "")
	created, look := tc.createLooked("keyed")
	oc := dialNode(t, netip.MustParseAddrPort(string(look.OwnerAddr)), "")
	v2 := []byte("\x10\x00\x00\x00\x00\x00\x00\x00kafka-v2-records")
	var e *wire.ErrorReply
	waitForTB(t, "the owner's copy serving", func() bool {
		_, e = oc.produceFormat(created.Stream, 1, wire.FormatRecords, v2)
		if e != nil && e.Code != wire.CodeUnavailable && e.Code != wire.CodeNotYet && e.Code != wire.CodeNotOwner {
			t.Fatalf("produce: %v %s", e.Code, e.Message)
		}
		return e == nil
	})
	oc.refusedWith("format 3", wire.AppendProduce(nil, wire.From{Cluster: nodeTestCluster}, &wire.Produce{
		RequestID: oc.next(), Stream: created.Stream, ProducerID: 9, Sequence: 2, Format: 3, Count: 1, Batch: []byte("x")}),
		wire.CodeBadFormat, wire.FormatRule)
	fc := dialNode(t, c.nodes[look.Owner%3+1].ClientAddr(), "")
	fc.refusedWith("format 3 at a follower", wire.AppendProduce(nil, wire.From{Cluster: nodeTestCluster}, &wire.Produce{
		RequestID: fc.next(), Stream: created.Stream, ProducerID: 9, Sequence: 2, Format: 3, Count: 1, Batch: []byte("x")}),
		wire.CodeBadFormat, wire.FormatRule)
	if r, e := oc.produceFormat(created.Stream, 2, 0, []byte("\x05value")); e != nil || r.BaseOffset != 1 {
		t.Fatalf("format-0 produce: %+v %+v", r, e)
	}
	rid := oc.next()
	oc.write(wire.AppendFetch(nil, wire.From{Cluster: nodeTestCluster}, &wire.Fetch{RequestID: rid, Stream: created.Stream,
		BytesMax: 1 << 20}))
	h, body := oc.read()
	if e := errorOf(t, h, body); e != nil {
		t.Fatalf("fetch: %v %s", e.Code, e.Message)
	}
	fr, err := wire.DecodeFetchReply(&h, body)
	if err != nil || fr.Count != 2 {
		t.Fatalf("fetch reply %+v: %v", fr, err)
	}
	it := segment.NewBatchIter(fr.Batches, 0)
	for i, want := range []struct {
		version uint16
		payload string
	}{{segment.BatchVersionRecords, string(v2)}, {segment.BatchVersionValues, "\x05value"}} {
		bh, p, ok := it.Next()
		if !ok {
			t.Fatalf("batch %d missing: %v", i, it.Err())
		}
		if bh.Version != want.version || string(p) != want.payload {
			t.Fatalf("batch %d: version %d payload %q, want version %d payload %q", i, bh.Version, p, want.version, want.payload)
		}
	}
}
