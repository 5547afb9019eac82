package stream_test

import (
	"testing"

	"github.com/ringstream/ringstream/engine/stream"
	"github.com/ringstream/ringstream/wire"
)

// fetchReplies takes node id's fetch replies (and refusals), leaving produce replies aside.
func fetchReplies(cl *cluster, id uint16) []stream.Reply {
	var out []stream.Reply
	for _, r := range cl.nodes[id].takeReplies() {
		if r.Kind != stream.ReplyProduce {
			out = append(out, r)
		}
	}
	return out
}

func fetch(cl *cluster, id uint16, offset uint64, bytesMax, recordsMax, waitMs uint32) {
	n := cl.nodes[id]
	m := stream.Message{Kind: stream.KindFetch, Client: 8}
	m.Fetch = wire.Fetch{RequestID: offset, Stream: testStream, Offset: offset, BytesMax: bytesMax, RecordsMax: recordsMax, WaitMs: waitMs}
	n.c.Step(&m)
	n.ready(cl.t)
	cl.settle()
}

// checkFetch checks a fetch reply: its batches decode, start at base, hold count records and stop
// at or below the confirmed tail it carries.
func checkFetch(t tb, r stream.Reply, base uint64, count uint32) {
	t.Helper()
	if r.Kind != stream.ReplyFetch || r.Fetch.BaseOffset != base || r.Fetch.Count != count {
		t.Fatalf("fetch reply %+v, want base %d count %d", r, base, count)
	}
	next, data := base, r.Fetch.Batches
	for len(data) > 0 {
		h, n, err := decode(data)
		if err != nil || h.BaseOffset != next {
			t.Fatalf("fetch batch at %d: %v", next, err)
		}
		next, data = h.End(), data[n:]
	}
	if next != base+uint64(count) || next > r.Fetch.ConfirmedTail {
		t.Fatalf("fetch holds up to %d of count %d, confirmed %d", next, count, r.Fetch.ConfirmedTail)
	}
	frame := wire.AppendFetchReply(nil, wire.From{Cluster: 1, Node: 1}, &r.Fetch)
	h, body, err := wire.ParseFrame(frame)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wire.DecodeFetchReply(&h, body); err != nil {
		t.Fatal(err)
	}
}

// Consumers read only below the confirmed tail; at it they wait (long poll) until records are
// confirmed there or the wait runs out.
func TestFetch_ConfirmedTailLimitAndLongPoll(t *testing.T) {
	cl := newCluster(t, assignment(1, 1, 2, 3))
	owner := cl.nodes[1]
	for i := 0; i < 5; i++ {
		cl.produce(1, 9, 0, 0, 2, payload(i, 100))
	}
	cl.settle()
	cl.nodes[2].autoSync, cl.nodes[3].autoSync = false, false
	for i := 5; i < 10; i++ {
		cl.produce(1, 9, 0, 0, 2, payload(i, 100))
	}
	cl.settle()
	owner.takeReplies()
	if owner.c.Confirmed() != 10 || owner.recTail() != 20 {
		t.Fatalf("confirmed %d durable %d", owner.c.Confirmed(), owner.recTail())
	}
	fetch(cl, 1, 0, 1<<20, 0, 0)
	r := owner.takeReplies()
	if len(r) != 1 {
		t.Fatalf("replies %+v", r)
	}
	checkFetch(t, r[0], 0, 10) // the durable but unconfirmed records stay out
	fetch(cl, 1, 3, 1<<20, 3, 0)
	checkFetch(t, fetchReplies(cl, 1)[0], 2, 2) // from the batch holding 3, at most 3 records
	fetch(cl, 1, 0, 1, 0, 0)
	checkFetch(t, fetchReplies(cl, 1)[0], 0, 2) // at least one batch past a tiny BytesMax
	fetch(cl, 1, 10, 1<<20, 0, 0)
	checkFetch(t, fetchReplies(cl, 1)[0], 10, 0) // nothing confirmed there: empty at once

	fetch(cl, 1, 10, 1<<20, 0, 50) // parks for up to 5 ticks
	if r := owner.takeReplies(); len(r) != 0 {
		t.Fatalf("long poll answered early: %+v", r)
	}
	cl.nodes[2].sync(t)
	cl.nodes[2].ready(t)
	cl.settle()
	r = fetchReplies(cl, 1)
	if len(r) != 1 {
		t.Fatalf("long poll not answered when records were confirmed: %+v", r)
	}
	checkFetch(t, r[0], 10, 10)

	fetch(cl, 1, 20, 1<<20, 0, 30)
	cl.tick(2)
	if r := owner.takeReplies(); len(r) != 0 {
		t.Fatalf("long poll answered before its deadline: %+v", r)
	}
	cl.tick(1)
	r = owner.takeReplies()
	if len(r) != 1 {
		t.Fatalf("long poll not answered at its deadline: %+v", r)
	}
	checkFetch(t, r[0], 20, 0)

	fetch(cl, 2, 0, 1<<20, 0, 0)
	if r := cl.nodes[2].takeReplies(); len(r) != 1 || r[0].Error.Code != wire.CodeNotOwner || r[0].Error.Owner != 1 {
		t.Fatalf("fetch from a follower answered %+v", r)
	}
}

func cursorMsg(kind stream.Kind, name string, off uint64) stream.Message {
	m := stream.Message{Kind: kind, Client: 3}
	m.Cursor = wire.CursorRequest{RequestID: 1, Stream: testStream, Consumer: []byte(name), Offset: off}
	return m
}

// A cursor commit appends an event without its own fsync, reading it returns the committed offset,
// and the event reaches the followers once it is durable on the owner.
func TestCursors_CommitReadReplicate(t *testing.T) {
	cl := newCluster(t, assignment(1, 1, 2, 3))
	owner := cl.nodes[1]
	owner.autoSync = false
	for i := 0; i < 4; i++ {
		cl.produce(1, 9, 0, 0, 2, payload(i, 10))
		owner.sync(t)
		owner.ready(t)
		cl.settle()
	}
	owner.takeReplies()
	m := cursorMsg(stream.KindCommitCursor, "reader", 6)
	owner.c.Step(&m)
	fx := owner.c.Ready()
	if len(fx.Appends) != 1 || fx.Appends[0].Log != wire.LogCursors || fx.SyncCursors {
		t.Fatalf("cursor commit effects: %+v sync %v", fx.Appends, fx.SyncCursors)
	}
	owner.apply(t, fx)
	if r := owner.takeReplies(); len(r) != 1 || !r[0].Cursor.Found || r[0].Cursor.Offset != 6 {
		t.Fatalf("commit answered %+v", r)
	}
	m = cursorMsg(stream.KindGetCursor, "reader", 0)
	owner.c.Step(&m)
	m = cursorMsg(stream.KindGetCursor, "nobody", 0)
	owner.c.Step(&m)
	m = cursorMsg(stream.KindCommitCursor, "reader", 9)
	owner.c.Step(&m)
	owner.ready(t)
	r := owner.takeReplies()
	if len(r) != 3 || r[0].Cursor.Offset != 6 || !r[0].Cursor.Found || r[1].Cursor.Found || r[2].Error.Code != wire.CodeInvalidRequest {
		t.Fatalf("replies %+v", r)
	}
	cl.settle()
	if cl.nodes[2].curTail() != 0 {
		t.Fatal("cursor event reached a follower before it was durable on the owner")
	}
	cl.tick(int(testConfig(1).CursorSyncTicks))
	if owner.curTail() != 1 {
		t.Fatalf("owner's cursor log durable at %d after CursorSyncTicks", owner.curTail())
	}
	for _, id := range []uint16{2, 3} {
		if got := cl.nodes[id].curTail(); got != 1 {
			t.Fatalf("node %d cursor tail %d, want 1", id, got)
		}
	}
}

// Retention: a follower's limit is the owner's confirmed tail as it heard it (never past its own
// durable tail), the owner's its confirmed tail; a fetch below the moved head is refused.
func TestRetention_LimitAndHead(t *testing.T) {
	cl := newCluster(t, assignment(1, 1, 2, 3))
	for i := 0; i < 4; i++ {
		cl.produce(1, 9, 0, 0, 2, payload(i, 10))
	}
	cl.settle()
	owner, f := cl.nodes[1], cl.nodes[2]
	if owner.c.RetainLimit() != 8 {
		t.Fatalf("owner retain limit %d, want 8", owner.c.RetainLimit())
	}
	f.c.CommitSeen(2, 100) // another epoch: ignored
	f.c.CommitSeen(1, 8)
	if f.c.Confirmed() != 8 || f.c.RetainLimit() != 8 {
		t.Fatalf("follower confirmed %d limit %d", f.c.Confirmed(), f.c.RetainLimit())
	}
	f.c.CommitSeen(1, 50)
	if f.c.RetainLimit() != 8 {
		t.Fatalf("follower limit %d past its durable tail", f.c.RetainLimit())
	}
	owner.c.HeadMoved(4)
	fetch(cl, 1, 2, 1<<20, 0, 0)
	if r := fetchReplies(cl, 1); len(r) != 1 || r[0].Error.Code != wire.CodeInvalidRequest {
		t.Fatalf("fetch below the head answered %+v", r)
	}
	fetch(cl, 1, 4, 1<<20, 0, 0)
	checkFetch(t, fetchReplies(cl, 1)[0], 4, 4)
}

// Cursors survive a reopen: the host feeds storage's cursor map before OpenDone and a read returns
// the committed offset; a follower refuses cursor requests, naming the owner.
func TestCursors_FedOnOpen(t *testing.T) {
	c, err := stream.New(testConfig(1), assignment(2, 1, 2), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.ObserveBatch(stream.BatchHeader{BaseOffset: 0, Count: 8, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	c.ObserveCursor([]byte("reader"), 5)
	c.OpenDone(stream.OpenState{RecordTail: 8, CursorTail: 3, LogEpochs: []wire.LogEpoch{{Epoch: 1}}})
	c.Ready()
	c.EpochDone(2, nil)
	m := cursorMsg(stream.KindGetCursor, "reader", 0)
	c.Step(&m)
	fx := c.Ready()
	if len(fx.Replies) != 1 || !fx.Replies[0].Cursor.Found || fx.Replies[0].Cursor.Offset != 5 {
		t.Fatalf("replies %+v", fx.Replies)
	}
	f := newNode(t, testConfig(2), assignment(2, 1, 2), nil, nil, nil)
	m = cursorMsg(stream.KindCommitCursor, "reader", 0)
	f.c.Step(&m)
	if fx := f.c.Ready(); len(fx.Replies) != 1 || fx.Replies[0].Error.Code != wire.CodeNotOwner || fx.Replies[0].Error.Owner != 1 {
		t.Fatalf("follower answered %+v", fx.Replies)
	}
}
