package shard_test

import (
	"testing"

	"github.com/ringstream/ringstream/shard"
	"github.com/ringstream/ringstream/wire"
)

// FuzzReceive feeds arbitrary bytes to a shard as if a peer sent them: frame reassembly, frame and
// entry decoding, routing to another shard and the groups must never panic, whatever arrives.
func FuzzReceive(f *testing.F) {
	ids := []uint64{1, 2, 3, 4}
	f.Add(commitBatch(ids, 100))
	f.Add(append(commitBatch(ids, 100), commitBatch(ids, 200)...))
	f.Add(wire.AppendCommitReplyBatch(nil, testCluster, 1, []wire.CommitReplyEntry{
		{Group: 2, Incarnation: 1, View: 3, TimestampMonotonic: 1, Replica: 1}}))
	f.Add(wire.AppendHandshake(nil, wire.Handshake{Node: 1, Cluster: testCluster, Revision: wire.Revision}))
	bad := commitBatch(ids, 5)
	bad[wire.HeaderSize+1] ^= 1
	f.Add(bad)
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, data []byte) {
		groups := backups(ids)
		gs := make([]shard.Group, len(groups))
		for i, g := range groups {
			gs[i] = g
		}
		// Small buffers and queues: each input builds a node, and the queue of 2 makes nearly every
		// batch stall and resume.
		n, err := shard.NewOfflineNode(shard.Config{Node: 2, Cluster: testCluster, Shards: 2,
			Schedule: testTicks, QueueCapacity: 2, OutboxBytes: 8192, ReplyOutboxEntries: 16, GroupsPerShardMax: 16,
			RecvBufferBytes: 4096}, peersOf(1), gs)
		if err != nil {
			t.Fatal(err)
		}
		s0, s1 := n.Shards()[0], n.Shards()[1]
		var r shard.TestReceiver
		stalled, err := s0.Feed(&r, 1, data)
		for stalled && err == nil {
			s1.DrainInbox()
			stalled, err = s0.Resume(&r, 1)
		}
		s1.DrainInbox()
		runTicks(n, 1)
	})
}
