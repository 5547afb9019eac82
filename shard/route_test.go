package shard_test

import (
	"encoding/binary"
	"testing"

	"github.com/ringstream/ringstream/shard"
	"github.com/ringstream/ringstream/shard/shardtest"
	"github.com/ringstream/ringstream/wire"
)

// commitBatch builds a Commit batch from node 1 for the given groups: view 3, replica 0, busy.
func commitBatch(ids []uint64, ts uint64) []byte {
	var entries []wire.CommitEntry
	for _, id := range ids {
		entries = append(entries, wire.CommitEntry{Group: id, Incarnation: 1, View: 3, Commit: 9,
			TimestampMonotonic: ts, HeartbeatState: wire.HeartbeatBusy, Replica: 0})
	}
	return wire.AppendCommitBatch(nil, testCluster, 1, entries)
}

// backups builds groups led by node 1 (member 0) and followed by node 2 (member 1).
func backups(ids []uint64) []*shardtest.Group {
	var out []*shardtest.Group
	for _, id := range ids {
		out = append(out, newGroup(id, []uint16{1, 2}, 2, 1))
	}
	return out
}

func idRange(from, to uint64) []uint64 {
	var ids []uint64
	for id := from; id < to; id++ {
		ids = append(ids, id)
	}
	return ids
}

// R15: a frame with a wrong checksum is dropped whole; the frames after it are still handled.
func TestR15_WrongChecksumDropsWholeFrame(t *testing.T) {
	ids := idRange(1, 11)
	groups := backups(ids)
	n := offlineNode(t, 2, 1, []uint16{1}, groups...)
	bad := commitBatch(ids, 100)
	bad[wire.HeaderSize+3] ^= 0xff // body byte: the body checksum no longer matches
	good := commitBatch(ids, 200)
	var r shard.TestReceiver
	if _, err := n.Shards()[0].Feed(&r, 1, append(bad, good...)); err != nil {
		t.Fatalf("feed: %v", err)
	}
	for _, g := range groups {
		if len(g.Received) != 1 || g.Received[0].TimestampMonotonic != 200 {
			t.Fatalf("group %d received %+v, want only the good frame", g.GroupID, g.Received)
		}
	}
	if got := n.Shards()[0].Stats().FramesDropped.Load(); got != 1 {
		t.Fatalf("frames dropped %d", got)
	}
}

// R17, R21: a bad entry (reserved bytes set, invalid heartbeat_state, group 0) is rejected alone; the
// other entries of the frame are handled.
func TestR17_BadEntryRejectedAlone(t *testing.T) {
	ids := idRange(1, 7)
	groups := backups(ids)
	n := offlineNode(t, 2, 1, []uint16{1}, groups...)
	frame := commitBatch(ids, 100)
	body := frame[wire.HeaderSize:]
	body[1*wire.CommitEntrySize+32] = 0                             // entry 1: heartbeat_state 0 (R21)
	body[3*wire.CommitEntrySize+39] = 1                             // entry 3: reserved byte set
	binary.LittleEndian.PutUint64(body[5*wire.CommitEntrySize:], 0) // entry 5: group 0
	wire.EndFrame(frame, uint32(len(ids)))
	var r shard.TestReceiver
	if _, err := n.Shards()[0].Feed(&r, 1, frame); err != nil {
		t.Fatalf("feed: %v", err)
	}
	for i, g := range groups {
		want := 1
		if i == 1 || i == 3 || i == 5 {
			want = 0
		}
		if len(g.Received) != want {
			t.Fatalf("group %d received %d entries, want %d", g.GroupID, len(g.Received), want)
		}
	}
	if got := n.Shards()[0].Stats().BadCommitEntries.Load(); got != 3 {
		t.Fatalf("bad entries %d, want 3", got)
	}
}

// R29: a bad reply entry is rejected alone.
func TestR29_BadReplyEntryRejectedAlone(t *testing.T) {
	p := newGroup(4, []uint16{1, 2}, 1, 1)
	q := newGroup(6, []uint16{1, 2}, 1, 1)
	n := offlineNode(t, 1, 1, []uint16{2}, p, q)
	runTicks(n, 5)
	n.Shards()[0].TakeOutbox(2)
	entries := []wire.CommitReplyEntry{
		{Group: 4, Incarnation: 1, View: 3, TimestampMonotonic: 5000, Replica: 1},
		{Group: 6, Incarnation: 1, View: 3, TimestampMonotonic: 5000, Replica: 1},
	}
	frame := wire.AppendCommitReplyBatch(nil, testCluster, 2, entries)
	frame[wire.HeaderSize+25] = 7 // entry 0: reserved byte set
	wire.EndFrame(frame, 2)
	var r shard.TestReceiver
	if _, err := n.Shards()[0].Feed(&r, 2, frame); err != nil {
		t.Fatalf("feed: %v", err)
	}
	if len(p.Replies) != 0 || len(q.Replies) != 1 {
		t.Fatalf("replies: group 4 %d, group 6 %d", len(p.Replies), len(q.Replies))
	}
	if n.Shards()[0].Stats().BadReplyEntries.Load() != 1 {
		t.Fatal("bad reply not counted")
	}
}

// R16: with a cross-shard queue far smaller than a batch, the receiving shard pauses on the full
// queue instead of dropping, resumes once the owner drained it, and every entry reaches its group
// exactly once.
func TestR16_FullQueuePausesReceiveNeverDrops(t *testing.T) {
	ids := idRange(1, 401)
	groups := backups(ids)
	gs := make([]shard.Group, len(groups))
	for i, g := range groups {
		gs[i] = g
	}
	n, err := shard.NewOfflineNode(shard.Config{Node: 2, Cluster: testCluster, Shards: 2, Schedule: testTicks,
		QueueCapacity: 8}, peersOf(1), gs)
	if err != nil {
		t.Fatal(err)
	}
	s0, s1 := n.Shards()[0], n.Shards()[1]
	data := append(commitBatch(ids, 100), commitBatch(ids, 200)...)
	var r shard.TestReceiver
	stalled, err := s0.Feed(&r, 1, data)
	if err != nil || !stalled {
		t.Fatalf("stalled %v err %v, want a stall on the 8-slot queue", stalled, err)
	}
	for rounds := 0; stalled; rounds++ {
		if rounds > 1000 {
			t.Fatal("receive never finished")
		}
		s1.DrainInbox()
		if stalled, err = s0.Resume(&r, 1); err != nil {
			t.Fatal(err)
		}
	}
	s1.DrainInbox()
	for _, g := range groups {
		if len(g.Received) != 2 || g.Received[0].TimestampMonotonic != 100 || g.Received[1].TimestampMonotonic != 200 {
			t.Fatalf("group %d (shard %d) received %+v", g.GroupID, shard.ShardOf(g.GroupID, 2), g.Received)
		}
	}
	if s0.Stats().RouteBackpressure.Load() == 0 {
		t.Fatal("back-pressure not counted")
	}
	if got := s0.Stats().CommitBatchesReceived.Load(); got != 2 {
		t.Fatalf("batches received %d, want 2 (a resumed batch counts once)", got)
	}
}

// R8, R22, R7: a backup's timeout restarts only on a newer Commit from its primary; other frames
// addressed to the group (a prepare) reach it but never stand in for a heartbeat, and the shard
// reports the silent primary once, on time.
func TestR7_PreparesNeverReplaceHeartbeat(t *testing.T) {
	g := newGroup(9, []uint16{1, 2}, 2, 1)
	n := offlineNode(t, 2, 1, []uint16{1}, g)
	s := n.Shards()[0]
	var r shard.TestReceiver
	if _, err := s.Feed(&r, 1, commitBatch([]uint64{9}, 100)); err != nil {
		t.Fatal(err)
	}
	prepare := wire.BeginFrame(nil, &wire.Header{Cluster: testCluster, Sender: 1,
		Command: wire.CommandStreamPrepare, Group: 9, Incarnation: 1})
	prepare = append(prepare, 1, 2, 3, 4)
	wire.EndFrame(prepare, 0)
	for tick := 1; tick <= 25; tick++ {
		runTicks(n, 1)
		if _, err := s.Feed(&r, 1, prepare); err != nil {
			t.Fatal(err)
		}
		if tick < 20 && g.SilentEvents != 0 {
			t.Fatalf("silent at tick %d", tick)
		}
	}
	if g.SilentEvents != 1 {
		t.Fatalf("silent events %d, want 1 at tick 20", g.SilentEvents)
	}
	if len(g.Frames) != 25 {
		t.Fatalf("group got %d prepares, want 25", len(g.Frames))
	}
}

// R22: an Idle heartbeat makes the backup wait the idle timeout.
func TestR22_IdleHeartbeatChoosesIdleTimeout(t *testing.T) {
	g := newGroup(9, []uint16{1, 2}, 2, 1)
	n := offlineNode(t, 2, 1, []uint16{1}, g)
	s := n.Shards()[0]
	var entries = []wire.CommitEntry{{Group: 9, Incarnation: 1, View: 3, TimestampMonotonic: 50,
		HeartbeatState: wire.HeartbeatIdle}}
	var r shard.TestReceiver
	if _, err := s.Feed(&r, 1, wire.AppendCommitBatch(nil, testCluster, 1, entries)); err != nil {
		t.Fatal(err)
	}
	runTicks(n, 39)
	if g.SilentEvents != 0 {
		t.Fatal("silent before the idle timeout")
	}
	runTicks(n, 1)
	if g.SilentEvents != 1 {
		t.Fatalf("silent events %d after 40 ticks", g.SilentEvents)
	}
}

// R20 and R19: the shard's busy and idle gauges follow its groups.
func TestR20_BusyIdleGauges(t *testing.T) {
	busy := newGroup(1, []uint16{1, 2}, 1, 1)
	busy.CommitEvery = 3
	idle := newGroup(2, []uint16{1, 2}, 1, 1)
	n := offlineNode(t, 1, 1, []uint16{2}, busy, idle)
	s := n.Shards()[0]
	runTicks(n, 20) // tick 20 is a send tick and 20 ticks passed without a change for group 2
	if !s.GroupBusy(1) || s.GroupBusy(2) {
		t.Fatalf("busy: group 1 %v group 2 %v", s.GroupBusy(1), s.GroupBusy(2))
	}
	if s.Stats().GroupsBusy.Load() != 1 || s.Stats().GroupsIdle.Load() != 1 {
		t.Fatalf("gauges busy %d idle %d", s.Stats().GroupsBusy.Load(), s.Stats().GroupsIdle.Load())
	}
}
