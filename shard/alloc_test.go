package shard_test

import (
	"testing"

	"github.com/ringstream/ringstream/internal/allocs"
	"github.com/ringstream/ringstream/shard"
	"github.com/ringstream/ringstream/shard/shardtest"
)

// A tick that builds Commit and reply batches for 500 groups allocates nothing per entry (the outbox
// buffers are preallocated and entries are encoded in place).
func TestTickBatchingAllocatesNothing(t *testing.T) {
	var groups []*shardtest.Group
	for id := uint64(1); id <= 500; id++ {
		g := newGroup(id, []uint16{1, 2, 3}, 1, 1)
		g.CommitEvery = 1 // eager Commits every tick: the busiest path
		groups = append(groups, g)
	}
	n := offlineNode(t, 1, 1, []uint16{2, 3}, groups...)
	s := n.Shards()[0]
	runTicks(n, 10)
	s.TakeOutbox(2)
	s.TakeOutbox(3)
	got := allocs.In(t, 100, func() {
		s.RunTick((s.Tick() + 1) * 1000)
		s.DiscardOutboxes()
	})
	if got != 0 {
		t.Fatalf("%d allocations in 100 ticks, want 0", got)
	}
	if s.Stats().CommitEntriesSent.Load() < 100*1000 {
		t.Fatalf("only %d entries sent", s.Stats().CommitEntriesSent.Load())
	}
}

// Receiving a Commit batch for 400 groups across two shards allocates nothing per entry.
func TestReceiveRoutingAllocatesNothing(t *testing.T) {
	ids := idRange(1, 401)
	groups := backups(ids)
	gs := make([]shard.Group, len(groups))
	for i, g := range groups {
		g.DiscardReceived = true
		gs[i] = g
	}
	n, err := shard.NewOfflineNode(shard.Config{Node: 2, Cluster: testCluster, Shards: 2,
		Schedule: testTicks}, peersOf(1), gs)
	if err != nil {
		t.Fatal(err)
	}
	s0, s1 := n.Shards()[0], n.Shards()[1]
	frames := make([][]byte, 200)
	for i := range frames {
		frames[i] = commitBatch(ids, uint64(100+i))
	}
	var r shard.TestReceiver
	i := 0
	got := allocs.In(t, 100, func() {
		if _, err := s0.Feed(&r, 1, frames[i]); err != nil {
			t.Fatal(err)
		}
		s1.DrainInbox()
		s0.DiscardOutboxes()
		s1.DiscardOutboxes()
		i++
	})
	if got != 0 {
		t.Fatalf("%d allocations in 100 frames, want 0", got)
	}
	var accepted uint64
	for _, s := range n.Shards() {
		accepted += s.Stats().CommitEntriesAccepted.Load()
	}
	if accepted != uint64(len(ids)*i) {
		t.Fatalf("accepted %d, want %d", accepted, len(ids)*i)
	}
}

// A 1 MiB data frame for a group of the receiving shard is received and handed on without an
// allocation: the default receive buffer holds it whole (issue 9: frames over 256 KiB used to
// allocate a buffer each).
func TestDataFrameReceiveAllocatesNothing(t *testing.T) {
	const id = 3
	sink := &dataSink{Group: newGroup(id, []uint16{1, 2}, 2, 1), want: -1}
	n, err := shard.NewOfflineNode(shard.Config{Node: 2, Cluster: testCluster, Schedule: testTicks},
		peersOf(1), []shard.Group{sink})
	if err != nil {
		t.Fatal(err)
	}
	body := make([]byte, 1<<20)
	header := dataFrameParts(id, body)
	frame := append(header, body...)
	s := n.Shards()[0]
	var r shard.TestReceiver
	got := allocs.In(t, 20, func() {
		if _, err := s.Feed(&r, 1, frame); err != nil {
			t.Fatal(err)
		}
	})
	if got != 0 {
		t.Fatalf("%d allocations in 20 frames of 1 MiB, want 0", got)
	}
	if sink.got != 40 {
		t.Fatalf("%d frames handed on, want 40", sink.got)
	}
}
