package engine

import (
	"testing"

	"github.com/ringstream/ringstream/wire"
)

// longPollLookup sends a lookup of name asking for an assignment newer than after (waiting up to
// waitMs) on cn, and returns it unread.
func longPollLookup(t *testing.T, cn *conn, name string, after, waitMs uint32) {
	t.Helper()
	req := wire.LookupStream{RequestID: 5, Name: []byte(name), AfterEpoch: after, WaitMs: waitMs}
	if err := cn.write(wire.AppendLookupStream(nil, wire.From{Cluster: nodeTestCluster}, &req)); err != nil {
		t.Fatal(err)
	}
}

// readLookup reads the answer to a lookup on cn.
func readLookup(t *testing.T, cn *conn) wire.LookupStreamReply {
	t.Helper()
	h, body, err := cn.read(waitBound)
	if err != nil {
		t.Fatal(err)
	}
	if h.Command == wire.CommandErrorReply {
		e, _ := wire.DecodeErrorReply(&h, body)
		t.Fatalf("lookup refused: %v %s", e.Code, e.Message)
	}
	r, err := wire.DecodeLookupStreamReply(&h, body)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestLookup_LongPollAnsweredWhenTheNewOwnerCommits (issue 25 item 4): a lookup asking for an
// assignment newer than the current epoch waits at the metadata primary, through the owner's death
// and the view change it causes when that node held the primary too, and is answered with the new
// owner at the newer epoch; a client that lost its owner learns the new one the moment it commits,
// without polling on a backoff. A plain lookup sent as the primary dies is held through the view
// change and answered. A long poll whose wait ends with nothing newer is answered with the
// assignment as it stands, and one asking past an older epoch is answered at once.
func TestLookup_LongPollAnsweredWhenTheNewOwnerCommits(t *testing.T) {
	c := newFailoverCluster(t, 50)
	c.createStream("orders")
	before, err := lookupOwner(c.client[1], "orders")
	if err != nil || before.Owner == 0 {
		t.Fatalf("lookup: %+v %v", before, err)
	}
	survivor := before.Owner%3 + 1

	// Nothing newer comes: the wait ends with the assignment as it stands.
	quiet, err := dialConn(c.client[survivor])
	if err != nil {
		t.Fatal(err)
	}
	defer quiet.close()
	longPollLookup(t, quiet, "orders", before.Epoch, 100)
	if r := readLookup(t, quiet); r.Epoch != before.Epoch || r.Owner != before.Owner {
		t.Fatalf("a long poll that saw no change answered %+v, want the assignment %+v", r, before)
	}
	// Asked past an older epoch, the current assignment is the answer.
	if before.Epoch > 1 {
		longPollLookup(t, quiet, "orders", before.Epoch-1, 5000)
		if r := readLookup(t, quiet); r.Epoch != before.Epoch {
			t.Fatalf("a long poll past epoch %d answered %+v", before.Epoch-1, r)
		}
	}

	waiting, err := dialConn(c.client[survivor])
	if err != nil {
		t.Fatal(err)
	}
	defer waiting.close()
	longPollLookup(t, waiting, "orders", before.Epoch, 5000)
	plain, err := dialConn(c.client[survivor])
	if err != nil {
		t.Fatal(err)
	}
	defer plain.close()
	c.nodes[before.Owner].Kill()
	// A plain lookup sent as the metadata primary dies is held through the view change and served by
	// the next primary, not refused into the client's backoff.
	longPollLookup(t, plain, "orders", 0, 0)
	if r := readLookup(t, plain); r.Stream != before.Stream {
		t.Fatalf("a plain lookup through the view change answered %+v", r)
	}
	r := readLookup(t, waiting)
	if r.Epoch <= before.Epoch || r.Owner == 0 || r.Owner == before.Owner || len(r.OwnerAddr) == 0 {
		t.Fatalf("the long poll answered %+v after node %d (owner at epoch %d) was killed, want a new owner at a newer epoch",
			r, before.Owner, before.Epoch)
	}
	now, err := lookupOwner(c.client[survivor], "orders")
	if err != nil || now.Epoch != r.Epoch || now.Owner != r.Owner {
		t.Fatalf("a plain lookup after it answered %+v (%v), the long poll %+v", now, err, r)
	}
}
