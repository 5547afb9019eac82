package client

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ringstream/ringstream/wire"
)

// movedCluster is a metadata node (the seed address) that answers lookups, an old owner at epoch 1
// and a new owner at epoch 2. A plain lookup names the old owner; a lookup for an owner newer than
// epoch 1 names the new one when newOwnerKnown, else the old one again (its wait ended with nothing
// newer).
type movedCluster struct {
	meta, old, fresh *fakeNode
	stream           *fakeStream

	mu            sync.Mutex
	newOwnerKnown bool
	lookups       []wire.LookupStream // as the metadata node received them
}

func newMovedCluster(t *testing.T, newOwnerKnown bool) *movedCluster {
	return newMovedClusterDropping(t, newOwnerKnown, false)
}

// newMovedClusterDropping is newMovedCluster whose old owner, if dies, closes the connection of a
// produce and its listener instead of refusing it (its node was killed).
func newMovedClusterDropping(t *testing.T, newOwnerKnown, dies bool) *movedCluster {
	mc := &movedCluster{newOwnerKnown: newOwnerKnown}
	mc.old = startFake(t, 1, func(h *wire.Header, body []byte) ([]byte, bool) {
		if dies {
			_ = mc.old.ln.Close() // killed: the connection closes and no new one is taken
			return nil, true
		}
		return mc.old.refuse(h, wire.CodeNotOwner, "node 1 does not own stream 7"), false
	})
	mc.fresh = startFake(t, 2, func(h *wire.Header, body []byte) ([]byte, bool) { return mc.stream.handle(h, body) })
	mc.stream = newFakeStream(mc.fresh)
	mc.meta = startFake(t, 3, func(h *wire.Header, body []byte) ([]byte, bool) {
		req, err := wire.DecodeLookupStream(h, body)
		if err != nil {
			return mc.meta.refuse(h, wire.CodeInvalidRequest, err.Error()), false
		}
		mc.mu.Lock()
		defer mc.mu.Unlock()
		mc.lookups = append(mc.lookups, req)
		r := wire.LookupStreamReply{RequestID: req.RequestID, Stream: 7, Incarnation: 1, Epoch: 1, Owner: 1,
			OwnerAddr: []byte(mc.old.addr)}
		if req.AfterEpoch >= 1 && mc.newOwnerKnown {
			r.Epoch, r.Owner, r.OwnerAddr = 2, 2, []byte(mc.fresh.addr)
		}
		return wire.AppendLookupStreamReply(nil, mc.meta.from(), &r), false
	})
	return mc
}

func (mc *movedCluster) seenLookups() []wire.LookupStream {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	return append([]wire.LookupStream(nil), mc.lookups...)
}

// noBackoffConfig waits an hour between retries: a test that finishes did not back off.
func noBackoffConfig(addr string) Config {
	c := testConfig(addr)
	c.BackoffMin, c.BackoffMax = time.Hour, time.Hour
	return c
}

// TestOwnerMoved_NextLookupWaitsForANewerOwnerWithoutBackoff (issue 25 item 4): a produce refused by
// the owner of epoch 1 (not the owner any more) is followed at once, with no backoff, by a lookup
// asking for an assignment newer than epoch 1, whose answer the produce follows to the new owner.
func TestOwnerMoved_NextLookupWaitsForANewerOwnerWithoutBackoff(t *testing.T) {
	mc := newMovedCluster(t, true)
	c := dialTest(t, noBackoffConfig(mc.meta.addr))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := c.Producer(ProducerConfig{Stream: "orders", Linger: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Append(ctx, []byte("a")); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatalf("produce across the owner's move: %v (a backoff of an hour would show as the deadline)", err)
	}
	got := mc.seenLookups()
	if len(got) != 2 || got[0].AfterEpoch != 0 || got[1].AfterEpoch != 1 || got[1].WaitMs == 0 {
		t.Fatalf("lookups %+v: want a plain one, then one for an owner after epoch 1 with a wait", got)
	}
	if mc.old.count(wire.CommandProduce) != 1 || mc.fresh.count(wire.CommandProduce) != 1 {
		t.Fatalf("produces: old owner %d, new owner %d; want 1 each", mc.old.count(wire.CommandProduce),
			mc.fresh.count(wire.CommandProduce))
	}
	// The new owner is known: a later lookup asks plainly again.
	if _, err := c.Lookup(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	if got := mc.seenLookups(); len(got) != 3 || got[2].AfterEpoch != 0 {
		t.Fatalf("lookups %+v: the one after the new owner was learned still waits for a newer one", got)
	}
}

// TestOwnerMoved_NoNewerOwnerFallsBackToTheBackoff: when the long poll ends without a newer owner,
// the next attempt waits its backoff (here an hour: the context ends first) instead of asking again
// at once, so a stream whose owner did not move is never polled in a loop.
func TestOwnerMoved_NoNewerOwnerFallsBackToTheBackoff(t *testing.T) {
	mc := newMovedCluster(t, false)
	c := dialTest(t, noBackoffConfig(mc.meta.addr))
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err := c.CommitCursor(ctx, "orders", "reader", 0)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("commit with an owner that never moves: %v, want the context's deadline in its backoff", err)
	}
	if got := mc.seenLookups(); len(got) != 2 || got[1].AfterEpoch != 1 {
		t.Fatalf("lookups %+v: want a plain one and one long poll, then the backoff", got)
	}
}

// TestOwnerMoved_PipelinedResendAsksForTheNextOwner: a pipelined producer (InFlight 4) whose owner's
// node dies reconnects to it at once, finds it unreachable, and asks at once for an owner newer than
// the lost one's epoch: its only lookup after the loss is that long poll, with no backoff before it.
func TestOwnerMoved_PipelinedResendAsksForTheNextOwner(t *testing.T) {
	mc := newMovedClusterDropping(t, true, true)
	c := dialTest(t, noBackoffConfig(mc.meta.addr))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := c.Producer(ProducerConfig{Stream: "orders", Linger: -1, InFlight: 4})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []string{"a", "b", "c"} {
		if err := p.Append(ctx, []byte(r)); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close(ctx); err != nil {
		t.Fatalf("produce across the owner's death: %v", err)
	}
	got := mc.seenLookups()
	if len(got) != 2 || got[0].AfterEpoch != 0 || got[1].AfterEpoch != 1 {
		t.Fatalf("lookups %+v: want a plain one, then the resend's for an owner after epoch 1", got)
	}
}

// TestOwnerMoved_LostConnectionReconnectsToTheSameOwner: a connection to a live owner that closes
// under a produce is not taken for the owner's death: the next attempt reconnects to the same owner
// at once, with no lookup and no backoff, and the produce is confirmed there.
func TestOwnerMoved_LostConnectionReconnectsToTheSameOwner(t *testing.T) {
	var s *fakeStream
	var n *fakeNode
	var dropped sync.Once
	n = startFake(t, 1, func(h *wire.Header, body []byte) ([]byte, bool) {
		switch h.Command {
		case wire.CommandLookupStream:
			return n.lookupReply(h, 1, n.addr), false
		case wire.CommandProduce:
			drop := false
			dropped.Do(func() { drop = true })
			if drop {
				return nil, true
			}
		}
		return s.handle(h, body)
	})
	s = newFakeStream(n)
	c := dialTest(t, noBackoffConfig(n.addr))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.CommitCursor(ctx, "orders", "reader", 0); err != nil {
		t.Fatal(err) // a route to the owner, before the produce
	}
	if _, err := produceOne(t, c, ProducerConfig{Stream: "orders", Linger: -1}, "a"); err != nil {
		t.Fatalf("produce after a lost connection: %v (a backoff of an hour would show as the deadline)", err)
	}
	if got := n.count(wire.CommandLookupStream); got != 1 {
		t.Fatalf("%d lookups, want 1: a lost connection to a live owner needs none", got)
	}
	if got := n.count(wire.CommandProduce); got != 2 {
		t.Fatalf("%d produces, want 2", got)
	}
}
