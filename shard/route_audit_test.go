package shard_test

import (
	"testing"

	"github.com/ringstream/ringstream/shard"
	"github.com/ringstream/ringstream/shard/shardtest"
	"github.com/ringstream/ringstream/wire"
)

// Tests from the issue 9 audit of R1-R32: each fails when the line it names is removed.

// feed hands data to shard s as if node from sent it, and fails the test on a receive error.
func feed(t *testing.T, s *shard.Shard, from uint16, data []byte) {
	t.Helper()
	var r shard.TestReceiver
	if _, err := s.Feed(&r, from, data); err != nil {
		t.Fatalf("feed from node %d: %v", from, err)
	}
}

// repliesTo runs one tick and returns the reply entries s queued for node.
func repliesTo(t *testing.T, n *shard.Node, node uint16) []wire.CommitReplyEntry {
	t.Helper()
	runTicks(n, 1)
	var out []wire.CommitReplyEntry
	for _, f := range parseFrames(t, n.Shards()[0].TakeOutbox(node)) {
		if f.h.Command == wire.CommandCommitReply {
			out = append(out, replyEntries(t, f)...)
		}
	}
	return out
}

// R8, R22: only a Commit from the node of the current view's primary, for the group's incarnation,
// restarts the backup and is answered. Group 9 is led by node 1 and followed by nodes 2 (this one)
// and 3. A Commit that node 3 sends in the primary's name (member index 0), and one from node 1 for
// another incarnation, are ignored and not answered; node 1's own is accepted and answered. Guards
// the sender-node and incarnation checks of handleCommit (route.go).
func TestR8_CommitFromAnotherNodeOrIncarnationIgnored(t *testing.T) {
	g := newGroup(9, []uint16{1, 2, 3}, 2, 1)
	n := offlineNode(t, 2, 1, []uint16{1, 3}, g)
	s := n.Shards()[0]
	forged := []wire.CommitEntry{{Group: 9, Incarnation: 1, View: 3, Commit: 4, TimestampMonotonic: 100,
		HeartbeatState: wire.HeartbeatBusy, Replica: 0}}
	feed(t, s, 3, wire.AppendCommitBatch(nil, testCluster, 3, forged))
	stale := []wire.CommitEntry{{Group: 9, Incarnation: 2, View: 3, Commit: 4, TimestampMonotonic: 200,
		HeartbeatState: wire.HeartbeatBusy, Replica: 0}}
	feed(t, s, 1, wire.AppendCommitBatch(nil, testCluster, 1, stale))
	if len(g.Received) != 0 || s.Stats().CommitEntriesIgnored.Load() != 2 {
		t.Fatalf("received %+v, ignored %d; want nothing received, 2 ignored", g.Received,
			s.Stats().CommitEntriesIgnored.Load())
	}
	if r1, r3 := repliesTo(t, n, 1), repliesTo(t, n, 3); len(r1)+len(r3) != 0 {
		t.Fatalf("replies to node 1 %+v, to node 3 %+v; want none", r1, r3)
	}
	feed(t, s, 1, commitBatch([]uint64{9}, 300))
	if len(g.Received) != 1 || g.Received[0].TimestampMonotonic != 300 {
		t.Fatalf("received %+v, want the primary's Commit", g.Received)
	}
	if r := repliesTo(t, n, 1); len(r) != 1 || r[0].TimestampMonotonic != 300 || r[0].Replica != 1 {
		t.Fatalf("replies %+v, want one echoing 300 from member 1", r)
	}
}

// R27: a reply is queued only for a Commit that was accepted. After a Commit at timestamp 200, the
// same one again, an older one and one for an older view are not newer: one tick later the reply
// batch holds exactly one reply.
func TestR27_ReplyOnlyForAcceptedCommit(t *testing.T) {
	g := newGroup(9, []uint16{1, 2}, 2, 1)
	n := offlineNode(t, 2, 1, []uint16{1}, g)
	s := n.Shards()[0]
	feed(t, s, 1, commitBatch([]uint64{9}, 200))
	feed(t, s, 1, commitBatch([]uint64{9}, 200))
	feed(t, s, 1, commitBatch([]uint64{9}, 150))
	old := []wire.CommitEntry{{Group: 9, Incarnation: 1, View: 2, Commit: 9, TimestampMonotonic: 300,
		HeartbeatState: wire.HeartbeatBusy, Replica: 0}}
	feed(t, s, 1, wire.AppendCommitBatch(nil, testCluster, 1, old))
	if r := repliesTo(t, n, 1); len(r) != 1 || r[0].TimestampMonotonic != 200 {
		t.Fatalf("replies %+v, want exactly the one for the accepted Commit", r)
	}
	if got := s.Stats().CommitEntriesAccepted.Load(); got != 1 {
		t.Fatalf("accepted %d, want 1", got)
	}
}

// R29, R24: a reply counts only when it comes from the node of the member it names, for the group's
// incarnation. Group 4 is led by node 1 (this one) and followed by nodes 2 and 3. A reply that node 3
// sends naming member 1 (node 2), and one from node 2 for another incarnation, do not count; node
// 2's own does. Guards the sender-node and incarnation checks of handleReply (route.go).
func TestR29_ReplyFromAnotherNodeOrIncarnationIgnored(t *testing.T) {
	p := newGroup(4, []uint16{1, 2, 3}, 1, 1)
	n := offlineNode(t, 1, 1, []uint16{2, 3}, p)
	s := n.Shards()[0]
	runTicks(n, 5) // the first heartbeat, stamped 5000
	s.DiscardOutboxes()
	reply := func(inc uint32) []wire.CommitReplyEntry {
		return []wire.CommitReplyEntry{{Group: 4, Incarnation: inc, View: 3, TimestampMonotonic: 5000, Replica: 1}}
	}
	feed(t, s, 3, wire.AppendCommitReplyBatch(nil, testCluster, 3, reply(1)))
	feed(t, s, 2, wire.AppendCommitReplyBatch(nil, testCluster, 2, reply(2)))
	if len(p.Replies) != 0 || s.Stats().ReplyEntriesIgnored.Load() != 2 {
		t.Fatalf("replies %+v, ignored %d; want none counted, 2 ignored", p.Replies, s.Stats().ReplyEntriesIgnored.Load())
	}
	feed(t, s, 2, wire.AppendCommitReplyBatch(nil, testCluster, 2, reply(1)))
	if len(p.Replies) != 1 {
		t.Fatalf("replies %+v, want node 2's", p.Replies)
	}
}

// R29, R16: a reply batch far larger than the cross-shard queue pauses and resumes many times, and
// every entry reaches its group exactly once: none skipped at a pause, none handled twice. Guards the
// resume index of handleReplyBatch.
func TestR29_PausedReplyBatchSkipsNoEntry(t *testing.T) {
	ids := idRange(1, 301)
	prims := make([]*shardtest.Group, len(ids))
	groups := make([]shard.Group, len(ids))
	for i, id := range ids {
		prims[i] = newGroup(id, []uint16{1, 2}, 1, 1)
		groups[i] = prims[i]
	}
	n, err := shard.NewOfflineNode(shard.Config{Node: 1, Cluster: testCluster, Shards: 2, Schedule: testTicks,
		QueueCapacity: 4}, peersOf(2), groups)
	if err != nil {
		t.Fatal(err)
	}
	runTicks(n, 5) // every primary's first heartbeat, stamped 5000
	for _, s := range n.Shards() {
		s.DiscardOutboxes()
	}
	var entries []wire.CommitReplyEntry
	for _, id := range ids {
		entries = append(entries, wire.CommitReplyEntry{Group: id, Incarnation: 1, View: 3,
			TimestampMonotonic: 5000, Replica: 1})
	}
	s0, s1 := n.Shards()[0], n.Shards()[1]
	var r shard.TestReceiver
	stalled, err := s0.Feed(&r, 2, wire.AppendCommitReplyBatch(nil, testCluster, 2, entries))
	pauses := 0
	for ; stalled && err == nil; pauses++ {
		if pauses > 1000 {
			t.Fatal("receive never finished")
		}
		s1.DrainInbox()
		stalled, err = s0.Resume(&r, 2)
	}
	if err != nil {
		t.Fatal(err)
	}
	s1.DrainInbox()
	if pauses < 10 {
		t.Fatalf("%d pauses: the test did not exercise the resume", pauses)
	}
	for _, g := range prims {
		if len(g.Replies) != 1 {
			t.Fatalf("group %d (shard %d) counted %d replies, want 1", g.GroupID, shard.ShardOf(g.GroupID, 2), len(g.Replies))
		}
	}
}
