package clientreq

import (
	"testing"

	"github.com/ringstream/ringstream/engine/stream"
	"github.com/ringstream/ringstream/internal/allocs"
	"github.com/ringstream/ringstream/shard"
	"github.com/ringstream/ringstream/wire"
)

// TestClientShard_SteadyStateAllocatesNothing: a data request's slot (taken when it reaches the copy,
// freed by its reply) and a held produce (its payload copied into the shard's arena until the turn
// ends) reuse their tables: nothing is allocated per request once they reached their size.
func TestClientShard_SteadyStateAllocatesNothing(t *testing.T) {
	c := &Handler{shards: make([]clientShard, 1)}
	cs := &c.shards[0]
	payload := make([]byte, 512)
	var toks [16]uint64
	n := allocs.In(t, 100, func() {
		for i := range toks {
			req := shard.ClientRequest{Conn: 1, RequestID: uint64(i), Stream: 5}
			toks[i] = cs.acquire(req, wire.CommandProduce)
			m := stream.Message{Kind: stream.KindProduce, Client: toks[i], Produce: wire.Produce{Stream: 5, Batch: payload}}
			c.holdProduce(nil, cs, req, &m)
		}
		for i := range toks {
			if sl, ok := cs.take(toks[i]); !ok || sl.req.RequestID != uint64(i) {
				t.Fatalf("slot %d: %+v %v", i, sl, ok)
			}
		}
		cs.held, cs.arena = cs.held[:0], cs.arena[:0]
	})
	if n != 0 {
		t.Fatalf("%d allocations in 100 rounds of 16 requests", n)
	}
}

// TestClientShard_StaleTokenFindsNoSlot: a token whose slot was freed and taken again (its generation
// moved) finds nothing, so a second reply for one request cannot reach the next request's connection.
func TestClientShard_StaleTokenFindsNoSlot(t *testing.T) {
	var cs clientShard
	old := cs.acquire(shard.ClientRequest{RequestID: 1}, wire.CommandFetch)
	if _, ok := cs.take(old); !ok {
		t.Fatal("fresh token found no slot")
	}
	if _, ok := cs.take(old); ok {
		t.Fatal("a token was taken twice")
	}
	fresh := cs.acquire(shard.ClientRequest{RequestID: 2}, wire.CommandFetch)
	if uint32(fresh) != uint32(old) {
		t.Fatalf("slot not reused: %x %x", fresh, old)
	}
	if _, ok := cs.take(old); ok {
		t.Fatal("the stale token took the reused slot")
	}
	if sl, ok := cs.take(fresh); !ok || sl.req.RequestID != 2 {
		t.Fatalf("fresh token: %+v %v", sl, ok)
	}
}

// TestClientGroupTurnsFirst: on every shard of nodes of 1 to 128 shards, the client group's id is below
// the stream host's group id (the highest id below the metadata group's that ShardOf puts on the
// shard, engine/streamhost), so its turn hook, which hands the turn's produces to the copies, runs
// before the one that flushes their group commits (shard runs turn hooks in group id order).
func TestClientGroupTurnsFirst(t *testing.T) {
	for shards := 1; shards <= 128; shards++ {
		for i := range shards {
			host := shard.MetadataGroupID - 1
			for shard.ShardOf(host, shards) != i {
				host--
			}
			if c := clientGroupID(i, shards); c >= host {
				t.Fatalf("%d shards, shard %d: client group id %#x not below the stream host's %#x", shards, i, c, host)
			}
		}
	}
}
