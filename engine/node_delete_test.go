package engine

import (
	"errors"
	"io/fs"
	"net/netip"
	"os"
	"testing"

	"github.com/ringstream/ringstream/wire"
)

// deleteStream deletes name through tc.
func (tc *testClient) deleteStream(name string) (wire.StreamIDReply, *wire.ErrorReply) {
	tc.t.Helper()
	rid := tc.next()
	tc.write(wire.AppendDeleteStream(nil, wire.From{Cluster: nodeTestCluster}, &wire.StreamNameRequest{RequestID: rid,
		Name: []byte(name)}))
	h, body := tc.read()
	if e := errorOf(tc.t, h, body); e != nil {
		return wire.StreamIDReply{}, e
	}
	r, err := wire.DecodeDeleteStreamReply(&h, body)
	if err != nil || r.RequestID != rid {
		tc.t.Fatalf("delete reply %+v: %v (want request %d)", r, err, rid)
	}
	return r, nil
}

// hasCopy says whether n publishes a serving copy of stream at incarnation.
func hasCopy(n *Node, stream uint64, incarnation uint32) bool {
	for _, ct := range n.Streams().AppendCopyTails(nil) {
		if ct.Stream == stream && ct.Incarnation == incarnation {
			return true
		}
	}
	return false
}

// TestNode_DeleteRemovesEveryCopy: a committed delete of a 3-copy stream is carried out on every
// node: each deletes its copy (its directory goes), and a produce to the old owner is then answered
// CodeUnknownStream. Another stream's copies stay.
func TestNode_DeleteRemovesEveryCopy(t *testing.T) {
	c := newTestCluster(t, "")
	c.waitRegistered()
	tc := dialNode(t, c.nodes[2].ClientAddr(), "")
	var ids [2]wire.StreamIDReply
	for i, name := range []string{"doomed", "kept"} {
		r, e := tc.create(name, 3)
		if e != nil {
			t.Fatalf("create %s: %+v", name, e)
		}
		ids[i] = r
	}
	doomed, kept := ids[0], ids[1]
	look, e := tc.lookup("doomed")
	if e != nil {
		t.Fatal(e)
	}
	oc := dialNode(t, netip.MustParseAddrPort(string(look.OwnerAddr)), "")
	waitForTB(t, "the owner's copy serving", func() bool {
		_, e = oc.produce(doomed.Stream, 1, 1, 1, []byte("record"))
		return e == nil
	})
	waitForTB(t, "both streams' copies serving on every node", func() bool {
		for _, n := range c.nodes {
			if !hasCopy(n, doomed.Stream, 1) || !hasCopy(n, kept.Stream, 1) {
				return false
			}
		}
		return true
	})
	if _, e := tc.deleteStream("doomed"); e != nil {
		t.Fatalf("delete: %+v", e)
	}
	waitForTB(t, "every node's copy of the deleted stream deleted", func() bool {
		for _, n := range c.nodes {
			if n.reaper.Deleted() != 1 {
				return false
			}
		}
		return true
	})
	for id, n := range c.nodes {
		if _, err := os.Stat(n.Streams().Dir(doomed.Stream, 1)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("node %d: the deleted copy's directory: %v", id, err)
		}
		if !hasCopy(n, kept.Stream, 1) {
			t.Errorf("node %d: the other stream's copy went too", id)
		}
		if _, err := os.Stat(n.Streams().Dir(kept.Stream, 1)); err != nil {
			t.Errorf("node %d: the other stream's directory: %v", id, err)
		}
	}
	if _, e := oc.produce(doomed.Stream, 1, 2, 1, []byte("after")); e == nil || e.Code != wire.CodeUnknownStream {
		t.Fatalf("produce to the deleted stream's old owner: %+v, want CodeUnknownStream", e)
	}
}
