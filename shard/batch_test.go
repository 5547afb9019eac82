package shard_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/ringstream/ringstream/shard"
	"github.com/ringstream/ringstream/shard/shardtest"
	"github.com/ringstream/ringstream/wire"
)

// R10, R11: on a send tick a shard sends one Commit batch per peer node, holding one 40-byte entry per
// group it leads that has a member on that node, with the sender's member index as replica.
func TestR10_R11_OneCommitBatchPerPeerPerTick(t *testing.T) {
	var groups []*shardtest.Group
	for id := uint64(1); id <= 20; id++ {
		// Members on nodes 1, 2, 3 in varying order: node 1's member index changes per group.
		nodes := []uint16{1, 2, 3}
		if id%2 == 0 {
			nodes = []uint16{3, 1, 2}
		}
		groups = append(groups, newGroup(id, nodes, 1, 1))
	}
	n := offlineNode(t, 1, 1, []uint16{2, 3}, groups...)
	s := n.Shards()[0]
	runTicks(n, 4)
	for _, peer := range []uint16{2, 3} {
		if out := s.TakeOutbox(peer); len(out) != 0 {
			t.Fatalf("peer %d: %d bytes before the first send tick", peer, len(out))
		}
	}
	runTicks(n, 1) // tick 5: send tick
	for _, peer := range []uint16{2, 3} {
		frames := parseFrames(t, s.TakeOutbox(peer))
		if len(frames) != 1 || frames[0].h.Command != wire.CommandCommit {
			t.Fatalf("peer %d: %d frames, want one Commit batch", peer, len(frames))
		}
		if frames[0].h.Sender != 1 || frames[0].h.Cluster != testCluster {
			t.Fatalf("peer %d: header sender %d cluster %#x", peer, frames[0].h.Sender, frames[0].h.Cluster)
		}
		entries := commitEntries(t, frames[0])
		if len(entries) != 20 || len(frames[0].body) != 20*wire.CommitEntrySize {
			t.Fatalf("peer %d: %d entries in %d bytes", peer, len(entries), len(frames[0].body))
		}
		for i, e := range entries {
			g := groups[i]
			if e.Group != g.GroupID || e.Replica != g.SelfIndex || e.View != 3 || e.Incarnation != 1 ||
				e.HeartbeatState != wire.HeartbeatBusy {
				t.Fatalf("peer %d entry %d: %+v", peer, i, e)
			}
		}
	}
	if st := s.Stats(); st.CommitBatchesSent.Load() != 2 || st.CommitEntriesSent.Load() != 40 {
		t.Fatalf("R19 counters: %d batches, %d entries", st.CommitBatchesSent.Load(), st.CommitEntriesSent.Load())
	}
}

// R4: the metadata group's Commits travel in the same batches, on the same schedule, as the others.
func TestR4_MetadataGroupSharesTheBatch(t *testing.T) {
	if shard.ShardOf(shard.MetadataGroupID, 2) != 0 {
		t.Fatal("metadata group not on shard 0")
	}
	partID := uint64(1)
	for shard.ShardOf(partID, 2) != 0 {
		partID++ // a partition group that lands on shard 0 beside the metadata group
	}
	meta := newGroup(shard.MetadataGroupID, []uint16{1, 2, 3}, 1, 1)
	part := newGroup(partID, []uint16{2, 1, 3}, 1, 1)
	n := offlineNode(t, 1, 2, []uint16{2, 3}, meta, part)
	runTicks(n, 4)
	if out := n.Shards()[0].TakeOutbox(2); len(out) != 0 {
		t.Fatal("metadata heartbeat before the send tick")
	}
	runTicks(n, 1)
	frames := parseFrames(t, n.Shards()[0].TakeOutbox(2))
	if len(frames) != 1 {
		t.Fatalf("%d frames", len(frames))
	}
	var ids []uint64
	for _, e := range commitEntries(t, frames[0]) {
		ids = append(ids, e.Group)
	}
	if !slices.Equal(ids, []uint64{partID, shard.MetadataGroupID}) {
		t.Fatalf("batch groups %v", ids)
	}
}

// R6: an eager Commit leaves on the next tick, not on a send tick, to the backups that hold the op.
func TestR6_EagerCommitLeavesOnNextTick(t *testing.T) {
	g := newGroup(1, []uint16{1, 2, 3}, 1, 1)
	g.CommitEvery = 7 // the commit point moves at the 7th poll: tick 7
	n := offlineNode(t, 1, 1, []uint16{2, 3}, g)
	s := n.Shards()[0]
	runTicks(n, 6)
	s.TakeOutbox(2)
	runTicks(n, 1)
	frames := parseFrames(t, s.TakeOutbox(2))
	if len(frames) != 1 {
		t.Fatalf("tick 7: %d frames, want the eager batch", len(frames))
	}
	e := commitEntries(t, frames[0])
	if len(e) != 1 || e[0].HeartbeatState != wire.HeartbeatEager || e[0].Commit != 1 {
		t.Fatalf("tick 7 entries %+v", e)
	}
}

// R13: a batch is never split, and the limit that makes every tick's batch fit is stated in the
// config: an outbox holds GroupsPerShardMax Commit entries and ReplyOutboxEntries replies with their
// headers above what SendFrame may use. With the smallest outbox that validation allows and frames
// filling every byte SendFrame may take, a shard holding the most groups sends all of their entries
// to the peer in one frame on each tick. One group more, a smaller outbox and a frame that can never
// fit are refused with errors that say so.
func TestR13_OneTicksEntriesLeaveInOneFrame(t *testing.T) {
	const groupsMax = 300
	var groups []shard.Group
	for id := uint64(1); id <= groupsMax; id++ {
		groups = append(groups, newGroup(id, []uint16{1, 2}, 1, 1))
	}
	reserve := 2*wire.HeaderSize + groupsMax*wire.CommitEntrySize + 64*wire.CommitReplyEntrySize
	cfg := shard.Config{Node: 1, Cluster: testCluster, Schedule: testTicks, GroupsPerShardMax: groupsMax,
		ReplyOutboxEntries: 64, OutboxBytes: reserve + 4096}
	n, err := shard.NewOfflineNode(cfg, peersOf(2), groups)
	if err != nil {
		t.Fatal(err)
	}
	s := n.Shards()[0]
	frame := wire.BeginFrame(nil, &wire.Header{Cluster: testCluster, Sender: 1, Command: wire.CommandStreamPrepare,
		Group: 1, Incarnation: 1})
	frame = append(frame, make([]byte, 4096-wire.HeaderSize)...)
	wire.EndFrame(frame, 0)
	for tick := 0; tick < 12; tick++ {
		if err := s.SendFrame(2, frame); err != nil { // every byte above the reserve
			t.Fatalf("tick %d: frame: %v", tick, err)
		}
		if err := s.SendFrame(2, frame[:wire.HeaderSize]); !errors.Is(err, shard.ErrOutboxFull) {
			t.Fatalf("tick %d: a frame past the room above the reserve: %v, want ErrOutboxFull", tick, err)
		}
		runTicks(n, 1)
		var entries, batches int
		for _, f := range parseFrames(t, s.TakeOutbox(2)) {
			if f.h.Command == wire.CommandCommit {
				batches++
				entries = len(commitEntries(t, f))
			}
		}
		if batches > 1 || (batches == 1 && entries != groupsMax) {
			t.Fatalf("tick %d: %d Commit frames, %d entries; want one frame of all %d", tick, batches, entries, groupsMax)
		}
	}
	if got := s.Stats().CommitEntriesSent.Load(); got == 0 || got%groupsMax != 0 {
		t.Fatalf("%d entries sent, want whole batches of %d", got, groupsMax)
	}
	if s.Stats().EntriesDeferredFull.Load() != 0 {
		t.Fatal("entries deferred for room")
	}
	if err := s.SendFrame(2, append(frame, make([]byte, 1)...)); !errors.Is(err, shard.ErrFrameTooLarge) {
		t.Fatalf("a frame larger than the room above the reserve: %v, want ErrFrameTooLarge", err)
	}
	small := cfg
	small.OutboxBytes = reserve + 4095
	if _, err := shard.NewOfflineNode(small, peersOf(2), nil); !errors.Is(err, shard.ErrConfig) {
		t.Fatalf("outbox below the reserve: %v, want ErrConfig", err)
	}
	live, err := shard.NewNode(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Stop()
	for _, g := range groups {
		if err := live.AddGroup(g); err != nil {
			t.Fatal(err)
		}
	}
	if err := live.AddGroup(newGroup(groupsMax+1, []uint16{1, 2}, 1, 1)); !errors.Is(err, shard.ErrTooManyGroups) {
		t.Fatalf("group %d on a full shard: %v, want ErrTooManyGroups", groupsMax+1, err)
	}
}

// R25: after a send each group records, for its member, whether the send reached a connected link,
// from the send's outcome: not connected at once for a link that is down (counted as dropped, not
// retried blindly); connected when the outbox that carries the entry was sent; not connected when
// that send failed, although the entry had entered the outbox of a link that was up.
func TestR25_RecordsWhetherLinkWasConnected(t *testing.T) {
	g := newGroup(1, []uint16{1, 2, 3}, 1, 1)
	n := offlineNode(t, 1, 1, []uint16{2, 3}, g)
	s := n.Shards()[0]
	s.SetLinkUp(3, false)
	runTicks(n, 5)
	if s.LinkConnected(1, 1) || s.LinkConnected(1, 2) {
		t.Fatal("a member recorded connected before its send ended")
	}
	s.TakeOutbox(2) // the send to node 2 completed
	if !s.LinkConnected(1, 1) || s.LinkConnected(1, 2) {
		t.Fatalf("link records: member 1 %v member 2 %v", s.LinkConnected(1, 1), s.LinkConnected(1, 2))
	}
	if got := s.Stats().EntriesDroppedLinkDown.Load(); got != 1 {
		t.Fatalf("dropped %d", got)
	}
	runTicks(n, 1) // not a send tick: nothing owed again for member 2
	if got := s.Stats().EntriesDroppedLinkDown.Load(); got != 1 {
		t.Fatalf("dropped %d after tick 6, want no blind retry", got)
	}
	s.SetLinkUp(3, true)
	runTicks(n, 4)
	s.TakeOutbox(2)
	s.TakeOutbox(3)
	if !s.LinkConnected(1, 2) {
		t.Fatal("member 2 not recorded connected after the link came back")
	}
	runTicks(n, 5) // the next heartbeat enters node 2's outbox, and that send fails
	s.FailLink(2)
	if s.LinkConnected(1, 1) {
		t.Fatal("member 1 recorded connected although the send that carried its entry failed")
	}
}

func deliver(t *testing.T, src *shard.Shard, srcNode uint16, dst *shard.Node, dstNode uint16) {
	t.Helper()
	out := src.TakeOutbox(dstNode)
	var r shard.TestReceiver
	stalled, err := dst.Shards()[0].Feed(&r, srcNode, out)
	if err != nil || stalled {
		t.Fatalf("feed: stalled %v err %v", stalled, err)
	}
	for _, s := range dst.Shards() {
		s.DrainInbox()
	}
}

// R26, R27, R28, R16: an accepted Commit entry queues a reply (group, incarnation, view, the echoed
// timestamp and the backup's member index) that leaves, batched per peer, at the end of the receiving
// shard's next tick; each entry reaches its owning shard once, whatever the shard counts.
func TestR26_R27_R28_RepliesLeaveAsOneBatchAtNextTick(t *testing.T) {
	const groups = 60
	var prim, back []*shardtest.Group
	for id := uint64(1); id <= groups; id++ {
		prim = append(prim, newGroup(id, []uint16{1, 2}, 1, 1))
		back = append(back, newGroup(id, []uint16{1, 2}, 2, 1))
	}
	n1 := offlineNode(t, 1, 3, []uint16{2}, prim...) // sender runs 3 shards
	n2 := offlineNode(t, 2, 2, []uint16{1}, back...) // receiver runs 2 (R16)
	runTicks(n1, 5)
	for _, s := range n1.Shards() {
		deliver(t, s, 1, n2, 2)
	}
	for _, g := range back {
		if len(g.Received) != 1 || g.Received[0].HeartbeatState != wire.HeartbeatBusy {
			t.Fatalf("group %d received %d entries", g.GroupID, len(g.Received))
		}
	}
	var replies []wire.CommitReplyEntry
	for _, s := range n2.Shards() {
		if out := s.TakeOutbox(1); len(out) != 0 {
			t.Fatal("reply sent before the tick")
		}
	}
	runTicks(n2, 1)
	for _, s := range n2.Shards() {
		frames := parseFrames(t, s.TakeOutbox(1))
		if len(frames) != 1 || frames[0].h.Command != wire.CommandCommitReply {
			t.Fatalf("shard %d: %d frames, want one reply batch", s.Index(), len(frames))
		}
		replies = append(replies, replyEntries(t, frames[0])...)
	}
	if len(replies) != groups {
		t.Fatalf("%d replies, want %d", len(replies), groups)
	}
	for _, r := range replies {
		if r.Replica != 1 || r.View != 3 || r.TimestampMonotonic != 5000 {
			t.Fatalf("reply %+v", r)
		}
	}
	var got int
	for _, s := range n2.Shards() {
		got += int(s.Stats().CommitEntriesAccepted.Load())
		if s.Stats().CommitEntriesIgnored.Load() != 0 {
			t.Fatal("an entry was ignored (handled twice?)")
		}
	}
	if got != groups {
		t.Fatalf("accepted %d", got)
	}
}

// R29, R24: reply entries route to the owning shard and count in the primary's quorum window: with
// replies the primary stays; without, it hears OnQuorumLost once after commit_heartbeat_timeout.
func TestR29_RepliesRouteAndKeepQuorum(t *testing.T) {
	const groups = 30
	var prim, back []*shardtest.Group
	for id := uint64(100); id < 100+groups; id++ {
		prim = append(prim, newGroup(id, []uint16{1, 2, 3}, 1, 1))
		back = append(back, newGroup(id, []uint16{1, 2, 3}, 2, 1))
	}
	n1 := offlineNode(t, 1, 2, []uint16{2, 3}, prim...)
	n2 := offlineNode(t, 2, 2, []uint16{1, 3}, back...)
	for range 60 {
		runTicks(n1, 1)
		for _, s := range n1.Shards() {
			deliver(t, s, 1, n2, 2)
			s.TakeOutbox(3) // node 3 is silent
		}
		runTicks(n2, 1)
		for _, s := range n2.Shards() {
			deliver(t, s, 2, n1, 1)
		}
	}
	for _, g := range prim {
		if g.QuorumLost != 0 {
			t.Fatalf("group %d lost quorum with node 2 replying", g.GroupID)
		}
		if len(g.Replies) == 0 {
			t.Fatalf("group %d heard no reply", g.GroupID)
		}
	}
	// Node 2 falls silent too: within commit_heartbeat_timeout ticks every primary steps down, once.
	for range 25 {
		runTicks(n1, 1)
		for _, s := range n1.Shards() {
			s.TakeOutbox(2)
			s.TakeOutbox(3)
		}
	}
	for _, g := range prim {
		if g.QuorumLost != 1 {
			t.Fatalf("group %d: quorum lost %d times, want 1", g.GroupID, g.QuorumLost)
		}
	}
}

// R30: a reply batch that cannot be sent (the link is down) is dropped whole; the next Commit brings a
// new reply.
func TestR30_FailedReplyBatchIsDropped(t *testing.T) {
	p := newGroup(5, []uint16{1, 2}, 1, 1)
	b := newGroup(5, []uint16{1, 2}, 2, 1)
	n1 := offlineNode(t, 1, 1, []uint16{2}, p)
	n2 := offlineNode(t, 2, 1, []uint16{1}, b)
	runTicks(n1, 5)
	deliver(t, n1.Shards()[0], 1, n2, 2)
	n2.Shards()[0].SetLinkUp(1, false)
	runTicks(n2, 1)
	st := n2.Shards()[0].Stats()
	if st.RepliesDroppedLinkDown.Load() != 1 || st.ReplyBatchesSent.Load() != 0 {
		t.Fatalf("dropped %d, sent %d", st.RepliesDroppedLinkDown.Load(), st.ReplyBatchesSent.Load())
	}
	n2.Shards()[0].SetLinkUp(1, true)
	runTicks(n2, 1)
	if out := n2.Shards()[0].TakeOutbox(1); len(out) != 0 {
		t.Fatal("dropped reply was sent later")
	}
	runTicks(n1, 5)
	deliver(t, n1.Shards()[0], 1, n2, 2)
	runTicks(n2, 1)
	frames := parseFrames(t, n2.Shards()[0].TakeOutbox(1))
	if len(frames) != 1 || len(replyEntries(t, frames[0])) != 1 {
		t.Fatalf("no fresh reply after the next Commit: %d frames", len(frames))
	}
}
