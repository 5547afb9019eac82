package streamhost_test

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/engine/stream"
	"github.com/ringstream/ringstream/engine/streamhost"
	"github.com/ringstream/ringstream/segment"
	"github.com/ringstream/ringstream/shard"
	"github.com/ringstream/ringstream/wire"
)

// controlFrame hands node n a seal or assignment frame as the controller on its own node does
// (Host.OnControlFrame): seal replies come back through Config.SealReplies.
func controlFrame(t testing.TB, n *testNode, frame []byte) {
	t.Helper()
	hd, body, err := wire.ParseFrame(frame)
	if err != nil {
		t.Fatal(err)
	}
	n.host.OnControlFrame(&hd, body)
}

// sealOn seals n's copy of the test stream at fence for transition and returns its answer.
func sealOn(t testing.TB, n *testNode, fence uint32, transition uint64, starts []wire.HistoryStart) wire.StreamSealReply {
	t.Helper()
	m := wire.StreamSeal{Stream: testStream, Incarnation: testIncarnation, FenceEpoch: fence, TransitionID: transition}
	controlFrame(t, n, wire.AppendStreamSeal(nil, wire.From{Cluster: 42, Node: n.id}, &m, starts))
	select {
	case r := <-n.sink.sealed:
		return r
	case <-time.After(30 * time.Second):
		t.Fatalf("node %d: seal at %d never answered", n.id, fence)
	}
	return wire.StreamSealReply{}
}

// assignOn hands n assignment a with starts; when it includes n, it waits for the copy to reopen.
func assignOn(t testing.TB, n *testNode, a meta.Assignment, starts []wire.HistoryStart) {
	t.Helper()
	m := wire.StreamAssignment{Stream: testStream, Incarnation: testIncarnation, Epoch: a.Epoch, Owner: a.Owner,
		PolicyKind: uint8(a.Policy.Kind), PolicyCount: a.Policy.Count, FollowerCount: uint8(len(a.Followers))}
	copy(m.Followers[:], a.Followers)
	controlFrame(t, n, wire.AppendStreamAssignment(nil, wire.From{Cluster: 42, Node: n.id}, &m, starts))
	if !a.Includes(n.id) {
		return
	}
	select {
	case err := <-n.sink.opened:
		if err != nil {
			t.Fatalf("node %d: reopen at epoch %d: %v", n.id, a.Epoch, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("node %d: assignment at epoch %d never applied", n.id, a.Epoch)
	}
}

// state reads n's copy state on its shard.
func state(t testing.TB, n *testNode) streamhost.CopyState {
	t.Helper()
	var st streamhost.CopyState
	done := make(chan struct{})
	if err := n.node.Run(shard.ShardOf(testStream, n.shards), func(s *shard.Shard) {
		st = n.host.State(s, testStream)
		close(done)
	}); err != nil {
		t.Fatal(err)
	}
	<-done
	return st
}

// waitDurable waits until n's copy is durable at tail (events on other nodes move it: polled).
func waitDurable(t testing.TB, n *testNode, tail uint64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for st := state(t, n); st.Durable != tail; st = state(t, n) {
		if time.Now().After(deadline) {
			t.Fatalf("node %d: %+v, want durable %d", n.id, st, tail)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// produceNoWait produces batch seq on n without waiting for its answer.
func produceNoWait(t testing.TB, n *testNode, seq uint64) {
	t.Helper()
	if err := n.node.Run(shard.ShardOf(testStream, n.shards), func(s *shard.Shard) {
		m := stream.Message{Kind: stream.KindProduce, Client: 1}
		m.Produce = wire.Produce{RequestID: seq, Stream: testStream, Incarnation: testIncarnation, Count: recordsPerBatch,
			Batch: recordBatch(seq, nil)}
		if err := n.host.Step(s, testStream, &m); err != nil {
			t.Error(err)
		}
	}); err != nil {
		t.Fatal(err)
	}
}

// produceConfirmed produces batches from..to-1 on n, each confirmed at the next offset.
func produceConfirmed(t testing.TB, n *testNode, from, to uint64, at uint64) uint64 {
	t.Helper()
	for seq := from; seq < to; seq++ {
		r := produceOne(t, n, testStream, seq)
		if r.Kind != stream.ReplyProduce || r.Produce.BaseOffset != at {
			t.Fatalf("node %d: produce %d answered %+v (%s), want confirmed at %d", n.id, seq, r, r.Error.Message, at)
		}
		at += recordsPerBatch
	}
	return at
}

// restart replaces node id by a new node over the same directory and address and opens its copy at
// the cluster's spec.
func (c *cluster) restart(id uint16) *testNode {
	old := c.nodes[id]
	c.nodes[id] = newTestNode(c.t, id, old.dir, old.node.Addr(), c.tune...)
	c.start(id)
	return c.nodes[id]
}

// readAll fetches n's whole log (n owns the stream) and returns the batch seq at each batch offset.
func readAll(t testing.TB, n *testNode, tail uint64) map[uint64]uint64 {
	t.Helper()
	seqAt := map[uint64]uint64{}
	for off := uint64(0); off < tail; {
		r := fetchAt(t, n, testStream, off)
		if r.Kind != stream.ReplyFetch || r.Fetch.Count == 0 {
			t.Fatalf("node %d: fetch at %d answered %+v (%s)", n.id, off, r, r.Error.Message)
		}
		it := segment.NewBatchIter(r.Fetch.Batches, off)
		for h, p, ok := it.Next(); ok; h, p, ok = it.Next() {
			seqAt[h.BaseOffset] = binary.LittleEndian.Uint64(p) / recordsPerBatch
			off = h.NextOffset()
		}
		if err := it.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return seqAt
}

// Storage and broker, on three real nodes over loopback with real segment logs: the owner (1) takes
// a suffix its followers never saw (records and a cursor commit) and dies; the followers are sealed
// (fence durable, tails reported), node 2 is promoted at its own tails and node 3 released in place
// as its follower, and the stream confirms again. The old owner returns in its own epoch, waits,
// and an assignment that names it a follower cuts it to the new owner's start (its suffix and its
// cursor event gone) before it takes the new owner's entries; promoted in turn, it serves every
// confirmed record exactly once at its offset, and none of its old suffix.
func TestFailover_SealPromoteAndReturningCopyCut(t *testing.T) {
	policy := meta.Policy{Kind: meta.PolicyMajorityDurable}
	c := newCluster(t, majority(1, 2, 3))
	n1 := c.nodes[1]
	at := produceConfirmed(t, n1, 0, 10, 0)
	confirmed := at
	for _, id := range []uint16{2, 3} {
		waitDurable(t, c.nodes[id], confirmed)
		if err := c.nodes[id].node.Stop(); err != nil {
			t.Fatal(err)
		}
	}
	// The suffix: appended and durable on the owner alone, never confirmed.
	for seq := uint64(100); seq < 105; seq++ {
		produceNoWait(t, n1, seq)
	}
	if r := cursorOp(t, n1, testStream, stream.KindCommitCursor, "reader", 40); r.Kind != stream.ReplyCommitCursor {
		t.Fatalf("cursor commit answered %+v (%s)", r, r.Error.Message)
	}
	waitDurable(t, n1, confirmed+5*recordsPerBatch)
	if err := n1.node.Stop(); err != nil { // commits the queued cursor event
		t.Fatal(err)
	}

	n2, n3 := c.restart(2), c.restart(3)
	var cursorStart uint64
	for _, n := range []*testNode{n2, n3} {
		r := sealOn(t, n, 2, 1, nil)
		if r.Status != wire.SealSealed || r.FenceEpoch != 2 || r.TransitionID != 1 || r.RecordTail != confirmed {
			t.Fatalf("node %d: seal answered %+v, want sealed at 2 with tail %d", n.id, r, confirmed)
		}
		if st := state(t, n); st.Role != stream.RoleSealed || st.Fence != 2 {
			t.Fatalf("node %d after the seal: %+v", n.id, st)
		}
		cursorStart = r.CursorTail
	}
	if r := sealOn(t, n3, 2, 1, nil); r.Status != wire.SealSealed {
		t.Fatalf("the same seal again answered %+v", r)
	}
	if r := sealOn(t, n3, 1, 1, nil); r.Status != wire.SealStale {
		t.Fatalf("a seal below the fence answered %+v, want stale", r)
	}
	starts := []wire.HistoryStart{{Epoch: 2, Node: 2, RecordStart: confirmed, CursorStart: cursorStart}}
	e2 := meta.Assignment{Epoch: 2, Owner: 2, Followers: []uint16{3}, Policy: policy}
	assignOn(t, n2, e2, starts)
	assignOn(t, n3, e2, starts)
	if st := state(t, n2); st.Role != stream.RoleOwner || st.Epoch != 2 || st.Durable != confirmed {
		t.Fatalf("node 2 after its promotion: %+v", st)
	}
	at = produceConfirmed(t, n2, 10, 15, at)

	n1 = c.restart(1)
	if r := produceOne(t, n1, testStream, 200); r.Kind != stream.ReplyError || r.Error.Code != wire.CodeUnavailable {
		t.Fatalf("the old owner reopened in its own epoch answered %+v, want unavailable", r)
	}
	e3 := meta.Assignment{Epoch: 3, Owner: 2, Followers: []uint16{1, 3}, Policy: policy}
	for _, n := range []*testNode{n2, n3, n1} {
		assignOn(t, n, e3, starts)
	}
	at = produceConfirmed(t, n2, 15, 20, at)
	for _, n := range []*testNode{n1, n2, n3} {
		waitDurable(t, n, at)
	}
	var hs streamhost.Stats
	c.run(1, func(s *shard.Shard) { hs = n1.host.Stats(s) })
	if hs.Cuts != 1 || hs.Applied != 1 || hs.InPlace != 0 {
		t.Fatalf("node 1 stats %+v: want one cut and one assignment applied from a reread of its log", hs)
	}
	c.run(2, func(s *shard.Shard) { hs = n2.host.Stats(s) })
	if hs.Applied != 2 || hs.InPlace != 2 {
		t.Fatalf("node 2 stats %+v: want both assignments applied in place (never cut)", hs)
	}

	e4 := meta.Assignment{Epoch: 4, Owner: 1, Followers: []uint16{2, 3}, Policy: policy}
	for _, n := range []*testNode{n2, n3, n1} {
		assignOn(t, n, e4, starts)
	}
	if r := cursorOp(t, n1, testStream, stream.KindGetCursor, "reader", 0); r.Kind != stream.ReplyGetCursor || r.Cursor.Found {
		t.Fatalf("cursor of the cut suffix after the cut: %+v (%s), want none", r.Cursor, r.Error.Message)
	}
	at = produceConfirmed(t, n1, 20, 21, at) // the new owner confirms what it holds with it
	seqAt := readAll(t, n1, at)
	if len(seqAt) != 21 {
		t.Fatalf("%d batches read back, want 21", len(seqAt))
	}
	for seq := uint64(0); seq < 21; seq++ {
		if got, ok := seqAt[seq*recordsPerBatch]; !ok || got != seq {
			t.Fatalf("batch at %d holds seq %d (%v), want %d: %v", seq*recordsPerBatch, got, ok, seq, seqAt)
		}
	}
}

// An owner that restarts within its epoch publishes it (wire.CopyOwnerRestarted) and refuses an
// assignment that keeps it owner without a seal (a follower addition committed while it was down):
// only the recovery the controller then records moves it on, and after that recovery's seal the
// same assignment applies.
func TestFailover_RestartedOwnerWaitsForSeal(t *testing.T) {
	policy := meta.Policy{Kind: meta.PolicyMajorityDurable}
	c := newCluster(t, majority(1, 2, 3))
	at := produceConfirmed(t, c.nodes[1], 0, 4, 0)
	if err := c.nodes[1].node.Stop(); err != nil {
		t.Fatal(err)
	}
	n1 := c.restart(1)
	deadline := time.Now().Add(30 * time.Second)
	for {
		tails := n1.host.AppendCopyTails(nil)
		if len(tails) == 1 && tails[0].Role == wire.RoleOwner && tails[0].Flags == wire.CopyOwnerRestarted {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("published tails %+v, want the owner flagged restarted", tails)
		}
		time.Sleep(2 * time.Millisecond)
	}
	e2 := meta.Assignment{Epoch: 2, Owner: 1, Followers: []uint16{2, 3}, Policy: policy}
	m := wire.StreamAssignment{Stream: testStream, Incarnation: testIncarnation, Epoch: 2, Owner: 1,
		PolicyKind: uint8(policy.Kind), FollowerCount: 2}
	copy(m.Followers[:], e2.Followers)
	controlFrame(t, n1, wire.AppendStreamAssignment(nil, wire.From{Cluster: 42, Node: 1}, &m, nil))
	var hs streamhost.Stats
	c.run(1, func(s *shard.Shard) { hs = n1.host.Stats(s) })
	if hs.AssignmentsRefused != 1 || hs.Applied != 0 {
		t.Fatalf("stats %+v: want the unsealed assignment refused", hs)
	}
	if st := state(t, n1); st.Role != stream.RoleOwner || st.Epoch != 1 {
		t.Fatalf("after the refused assignment: %+v", st)
	}
	if r := sealOn(t, n1, 2, 7, nil); r.Status != wire.SealSealed || r.RecordTail != at {
		t.Fatalf("seal answered %+v, want sealed with tail %d", r, at)
	}
	for _, id := range []uint16{2, 3} {
		if r := sealOn(t, c.nodes[id], 2, 7, nil); r.Status != wire.SealSealed {
			t.Fatalf("node %d: seal answered %+v", id, r)
		}
	}
	starts := []wire.HistoryStart{{Epoch: 2, Node: 1, RecordStart: at}}
	for _, id := range []uint16{1, 2, 3} {
		assignOn(t, c.nodes[id], e2, starts)
	}
	if st := state(t, n1); st.Role != stream.RoleOwner || st.Epoch != 2 {
		t.Fatalf("after the recovery's assignment: %+v", st)
	}
	produceConfirmed(t, n1, 4, 6, at)
}
