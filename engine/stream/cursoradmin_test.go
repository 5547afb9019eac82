package stream_test

import (
	"fmt"
	"testing"

	"github.com/ringstream/ringstream/engine/stream"
	"github.com/ringstream/ringstream/ring"
	"github.com/ringstream/ringstream/ring/ringtest"
	"github.com/ringstream/ringstream/wire"
)

func listMsg(from string, after bool, limit uint32) stream.Message {
	m := stream.Message{Kind: stream.KindListCursors, Client: 4}
	m.CursorList = wire.ListCursors{RequestID: 2, Stream: testStream, From: []byte(from), After: after, Limit: limit}
	return m
}

// listed is a cursor list reply as "name=offset" entries.
func listed(t *testing.T, r []stream.Reply) (stream.Reply, []string) {
	t.Helper()
	if len(r) != 1 || r[0].Kind != stream.ReplyListCursors {
		t.Fatalf("list answered %+v", r)
	}
	var out []string
	for _, c := range r[0].Cursors {
		out = append(out, fmt.Sprintf("%s=%d", c.Consumer, c.Offset))
	}
	return r[0], out
}

// A list pages the cursor map in name order with the confirmed tail, the head and the total; a commit
// may move a cursor backwards.
func TestCursors_ListPagesInNameOrder(t *testing.T) {
	cl := newCluster(t, assignment(1, 1, 2, 3))
	owner := cl.nodes[1]
	for i := 0; i < 4; i++ {
		cl.produce(1, 9, 0, 0, 2, payload(i, 10))
	}
	cl.settle()
	owner.takeReplies()
	for _, c := range []struct {
		name string
		off  uint64
	}{{"zeta", 8}, {"alpha", 3}, {"mid", 6}, {"alpha", 7}, {"alpha", 1}} {
		m := cursorMsg(stream.KindCommitCursor, c.name, c.off)
		owner.c.Step(&m)
	}
	owner.ready(t)
	owner.takeReplies()
	m := listMsg("", false, 2)
	owner.c.Step(&m)
	owner.ready(t)
	r, got := listed(t, owner.takeReplies())
	if fmt.Sprint(got) != "[alpha=1 mid=6]" || !r.CursorList.More || r.CursorList.Total != 3 || r.CursorList.ConfirmedTail != 8 ||
		r.CursorList.Head != 0 {
		t.Fatalf("first page %v %+v", got, r.CursorList)
	}
	m = listMsg("mid", true, 2)
	owner.c.Step(&m)
	m = listMsg("mid", false, 1) // a describe: the name itself
	owner.c.Step(&m)
	owner.ready(t)
	replies := owner.takeReplies()
	if len(replies) != 2 {
		t.Fatalf("two lists answered %+v", replies)
	}
	r, got = listed(t, replies[:1])
	if fmt.Sprint(got) != "[zeta=8]" || r.CursorList.More {
		t.Fatalf("second page %v %+v", got, r.CursorList)
	}
	if _, got = listed(t, replies[1:]); fmt.Sprint(got) != "[mid=6]" {
		t.Fatalf("list from mid, limit 1: %v", got)
	}
	f := cl.nodes[2]
	m = listMsg("", false, 10)
	f.c.Step(&m)
	f.ready(t)
	if r := f.takeReplies(); len(r) != 1 || r[0].Error.Code != wire.CodeNotOwner {
		t.Fatalf("a follower answered a list with %+v", r)
	}
}

// A delete appends a tombstone, syncs it at once and is answered only once W copies hold it durably;
// the cursor is gone from then on, a delete of a consumer without a cursor is answered at once (not
// found), and a commit after the delete makes the cursor again.
func TestCursors_DeleteAnsweredOnceWCopiesHoldIt(t *testing.T) {
	cl := newCluster(t, assignment(1, 1, 2, 3))
	owner := cl.nodes[1]
	cl.produce(1, 9, 0, 0, 8, payload(0, 10))
	cl.settle()
	owner.takeReplies()
	m := cursorMsg(stream.KindCommitCursor, "reader", 5)
	owner.c.Step(&m)
	owner.ready(t)
	cl.tick(int(testConfig(1).CursorSyncTicks))
	owner.takeReplies()

	down := true
	cl.drop = func(e envelope) bool { return down } // no follower hears the tombstone yet
	m = cursorMsg(stream.KindDeleteCursor, "reader", 0)
	owner.c.Step(&m)
	fx := owner.c.Ready()
	if len(fx.Appends) != 1 || !fx.Appends[0].CursorDelete || !fx.SyncCursors || len(fx.Replies) != 0 {
		t.Fatalf("delete effects: %+v sync %v replies %+v", fx.Appends, fx.SyncCursors, fx.Replies)
	}
	owner.apply(t, fx)
	owner.ready(t)
	cl.settle()
	if owner.curTail() != 2 {
		t.Fatalf("owner's cursor log durable at %d, want the tombstone (2)", owner.curTail())
	}
	if r := owner.takeReplies(); len(r) != 0 {
		t.Fatalf("delete answered before a second copy held it: %+v", r)
	}
	m = cursorMsg(stream.KindGetCursor, "reader", 0)
	owner.c.Step(&m)
	owner.ready(t)
	if r := owner.takeReplies(); len(r) != 1 || r[0].Cursor.Found {
		t.Fatalf("a deleted cursor read back %+v", r)
	}
	down = false
	cl.tick(int(testConfig(1).ResendTicks) + 2)
	r := owner.takeReplies()
	if len(r) != 1 || r[0].Kind != stream.ReplyDeleteCursor || !r[0].Cursor.Found || r[0].Cursor.Offset != 5 {
		t.Fatalf("delete answered %+v, want found at 5", r)
	}
	if got := cl.nodes[2].curTail() + cl.nodes[3].curTail(); got < 2 {
		t.Fatalf("followers' cursor tails sum to %d: no follower holds the tombstone", got)
	}

	m = cursorMsg(stream.KindDeleteCursor, "reader", 0)
	owner.c.Step(&m)
	fx = owner.c.Ready()
	if len(fx.Appends) != 0 || len(fx.Replies) != 1 || fx.Replies[0].Cursor.Found {
		t.Fatalf("a delete of no cursor: appends %+v replies %+v", fx.Appends, fx.Replies)
	}
	owner.apply(t, fx)
	owner.takeReplies()
	m = cursorMsg(stream.KindCommitCursor, "reader", 2)
	owner.c.Step(&m)
	m = cursorMsg(stream.KindGetCursor, "reader", 0)
	owner.c.Step(&m)
	owner.ready(t)
	if r := owner.takeReplies(); len(r) != 2 || !r[1].Cursor.Found || r[1].Cursor.Offset != 2 {
		t.Fatalf("a commit after the delete: %+v", r)
	}
}

// A delete waiting for its copies is refused when the copy is sealed: it cannot confirm it any more.
func TestCursors_DeleteWaitingRefusedWhenSealed(t *testing.T) {
	cl := newCluster(t, assignment(1, 1, 2, 3))
	owner := cl.nodes[1]
	m := cursorMsg(stream.KindCommitCursor, "reader", 0)
	owner.c.Step(&m)
	owner.ready(t)
	owner.takeReplies()
	cl.drop = func(envelope) bool { return true }
	m = cursorMsg(stream.KindDeleteCursor, "reader", 0)
	owner.c.Step(&m)
	owner.ready(t)
	owner.c.Sealed(2)
	owner.ready(t)
	if r := owner.takeReplies(); len(r) != 1 || r[0].Error.Code != wire.CodeFenced {
		t.Fatalf("a waiting delete on a sealed copy: %+v", r)
	}
}

// On real segment logs: a delete confirmed on W copies survives the owner's loss. The new owner
// (a follower promoted at the next epoch, its storage reopened) lists no deleted cursor, the old
// owner's reopened log has none either, and a commit on the new owner makes the cursor again.
func TestRealStorage_CursorDeleteSurvivesFailover(t *testing.T) {
	ringtest.ForEachBackend(t, func(t *testing.T, b ring.Backend) {
		dc := newDiskCluster(t, b, t.TempDir(), assignment(1, 1, 2, 3))
		owner := dc.nodes[1]
		dc.run(5)
		m := stream.Message{Kind: stream.KindProduce, Client: 1}
		m.Produce = wire.Produce{RequestID: 1, Stream: testStream, ProducerID: 5, Sequence: 0, Count: 10, Batch: payload(0, 100)}
		owner.c.Step(&m)
		dc.run(20)
		for _, c := range []struct {
			name string
			off  uint64
		}{{"audit", 4}, {"billing", 9}} {
			m := cursorMsg(stream.KindCommitCursor, c.name, c.off)
			owner.c.Step(&m)
		}
		m = cursorMsg(stream.KindDeleteCursor, "billing", 0)
		owner.c.Step(&m)
		var deleted *stream.Reply
		for i := 0; i < 200 && deleted == nil; i++ {
			dc.run(1)
			for j := range owner.reps {
				if owner.reps[j].Kind == stream.ReplyDeleteCursor {
					deleted = &owner.reps[j]
				}
			}
		}
		if deleted == nil || !deleted.Cursor.Found || deleted.Cursor.Offset != 9 {
			t.Fatalf("delete answered %+v", deleted)
		}
		// The owner is lost; nodes 2 and 3 reopen at the next epoch, owned by the one a recovery picks
		// (F8: equal record logs here, so the longer cursor log, then the lower node id).
		owner.down = true
		_, cur2 := dc.nodes[2].seg.Tails()
		_, cur3 := dc.nodes[3].seg.Tails()
		nextID, other := uint16(2), uint16(3)
		if cur3 > cur2 {
			nextID, other = 3, 2
		}
		for _, id := range []uint16{2, 3} {
			n := dc.nodes[id]
			if err := n.seg.CloseSync(); err != nil {
				t.Fatal(err)
			}
			n.a = assignment(2, nextID, other)
			n.open()
		}
		dc.ids = []uint16{2, 3}
		next := dc.nodes[nextID]
		var got []string
		for i := 0; i < 200; i++ {
			dc.run(1)
			m := listMsg("", false, 100)
			next.c.Step(&m)
			dc.run(1)
			r := next.reps[len(next.reps)-1]
			next.reps = nil
			if r.Kind == stream.ReplyListCursors {
				_, got = listed(t, []stream.Reply{r})
				break
			}
		}
		if fmt.Sprint(got) != "[audit=4]" {
			t.Fatalf("the new owner lists %v, want [audit=4]: the delete did not survive the failover", got)
		}
		m = cursorMsg(stream.KindCommitCursor, "billing", 3)
		next.c.Step(&m)
		dc.run(2)
		if off, ok := next.seg.Cursor("billing"); !ok || off != 3 {
			t.Fatalf("a commit after the delete on the new owner: %d %v", off, ok)
		}
		if err := owner.seg.CloseSync(); err != nil {
			t.Fatal(err)
		}
		owner.open()
		if off, ok := owner.seg.Cursor("billing"); ok {
			t.Fatalf("the old owner's reopened log brings the deleted cursor back at %d", off)
		}
		dc.ids = []uint16{1, 2, 3}
		dc.close()
	})
}

// A new owner lists cursors only once it proved its confirmed tail: before a follower answered at its
// epoch it refuses as unavailable, then lists the cursors its log holds, a deleted one left out.
func TestCursors_NewOwnerListsOnceProven(t *testing.T) {
	cl := newCluster(t, assignment(1, 1, 2, 3))
	owner := cl.nodes[1]
	cl.produce(1, 9, 0, 0, 4, payload(0, 10))
	cl.settle()
	owner.takeReplies()
	for _, name := range []string{"a", "b"} {
		m := cursorMsg(stream.KindCommitCursor, name, 3)
		owner.c.Step(&m)
	}
	m := cursorMsg(stream.KindDeleteCursor, "a", 0)
	owner.c.Step(&m)
	owner.ready(t)
	cl.settle()
	if r := owner.takeReplies(); len(r) != 3 || r[2].Kind != stream.ReplyDeleteCursor || !r[2].Cursor.Found {
		t.Fatalf("commits and delete answered %+v", r)
	}
	owner.down = true
	a := assignment(2, 2, 3)
	next := cl.nodes[2]
	cl.drop = func(envelope) bool { return true } // node 3 has not answered the new owner yet
	next.reassign(t, a)
	cl.nodes[3].reassign(t, a)
	m = listMsg("", false, 10)
	next.c.Step(&m)
	next.ready(t)
	if r := next.takeReplies(); len(r) != 1 || r[0].Error.Code != wire.CodeUnavailable {
		t.Fatalf("an unproven owner answered a list with %+v", r)
	}
	cl.drop = nil
	cl.tick(int(testConfig(2).ResendTicks) + 2)
	next.takeReplies()
	m = listMsg("", false, 10)
	next.c.Step(&m)
	next.ready(t)
	if _, got := listed(t, next.takeReplies()); fmt.Sprint(got) != "[b=3]" {
		t.Fatalf("the new owner lists %v, want [b=3]", got)
	}
}
