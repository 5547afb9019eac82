package shard_test

import (
	"net/netip"
	"testing"

	"github.com/ringstream/ringstream/shard"
	"github.com/ringstream/ringstream/shard/heartbeat"
	"github.com/ringstream/ringstream/shard/shardtest"
	"github.com/ringstream/ringstream/wire"
)

// testTicks is a short schedule: P = 5, busy timeout 20, idle interval 10, idle timeout 40.
var testTicks = heartbeat.Ticks{BroadcastIntervalTicks: 5, HeartbeatTimeoutTicks: 20,
	IdleHeartbeatIntervalTicks: 10, IdleHeartbeatTimeoutTicks: 40}

const testCluster = 0xC1

// newGroup builds a test group whose member i is on nodes[i], seen from node self, led by node primary.
func newGroup(id uint64, nodes []uint16, self, primary uint16) *shardtest.Group {
	g := &shardtest.Group{GroupID: id, Inc: 1, ViewNumber: 3}
	for i, n := range nodes {
		g.MemberList = append(g.MemberList, shard.Member{Index: uint8(i), Node: n})
		if n == self {
			g.SelfIndex = uint8(i)
		}
		if n == primary {
			g.PrimaryIdx = uint8(i)
		}
	}
	return g
}

func peersOf(nodes ...uint16) []shard.Peer {
	var out []shard.Peer
	for _, n := range nodes {
		out = append(out, shard.Peer{Node: n, Addr: netip.MustParseAddrPort("127.0.0.1:9")})
	}
	return out
}

func offlineNode(t testing.TB, node uint16, shards int, peers []uint16, groups ...*shardtest.Group) *shard.Node {
	t.Helper()
	gs := make([]shard.Group, len(groups))
	for i, g := range groups {
		gs[i] = g
	}
	n, err := shard.NewOfflineNode(shard.Config{Node: node, Cluster: testCluster, Shards: shards,
		Schedule: testTicks, QueueCapacity: 1024, OutboxBytes: 1 << 20, GroupsPerShardMax: 4096,
		ReplyOutboxEntries: 4096, Logger: quietLogger()}, peersOf(peers...), gs)
	if err != nil {
		t.Fatalf("offline node: %v", err)
	}
	return n
}

// parsedFrame is one frame cut from an outbox.
type parsedFrame struct {
	h    wire.Header
	body []byte
}

func parseFrames(t *testing.T, b []byte) []parsedFrame {
	t.Helper()
	var out []parsedFrame
	for len(b) > 0 {
		h, err := wire.ParseHeader(b)
		if err != nil {
			t.Fatalf("outbox header: %v", err)
		}
		size := wire.HeaderSize + int(h.BodySize)
		h, body, err := wire.ParseFrame(b[:size])
		if err != nil {
			t.Fatalf("outbox frame: %v", err)
		}
		out = append(out, parsedFrame{h, body})
		b = b[size:]
	}
	return out
}

func commitEntries(t *testing.T, f parsedFrame) []wire.CommitEntry {
	t.Helper()
	batch, err := wire.DecodeCommitBatch(&f.h, f.body)
	if err != nil {
		t.Fatalf("commit batch: %v", err)
	}
	var out []wire.CommitEntry
	for i := 0; i < batch.Len(); i++ {
		e, err := batch.Entry(i)
		if err != nil {
			t.Fatalf("commit entry %d: %v", i, err)
		}
		out = append(out, e)
	}
	return out
}

func replyEntries(t *testing.T, f parsedFrame) []wire.CommitReplyEntry {
	t.Helper()
	batch, err := wire.DecodeCommitReplyBatch(&f.h, f.body)
	if err != nil {
		t.Fatalf("reply batch: %v", err)
	}
	var out []wire.CommitReplyEntry
	for i := 0; i < batch.Len(); i++ {
		e, err := batch.Entry(i)
		if err != nil {
			t.Fatalf("reply entry %d: %v", i, err)
		}
		out = append(out, e)
	}
	return out
}

// runTicks runs n ticks on every shard of node, the clock at 1000 x tick number.
func runTicks(n *shard.Node, count int) {
	for range count {
		for _, s := range n.Shards() {
			s.RunTick((s.Tick() + 1) * 1000)
		}
	}
}
