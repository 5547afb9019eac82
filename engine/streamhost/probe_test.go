package streamhost_test

import (
	"sync"
	"testing"
	"time"

	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/engine/stream"
	"github.com/ringstream/ringstream/engine/streamhost"
	"github.com/ringstream/ringstream/ring"
	"github.com/ringstream/ringstream/shard"
	"github.com/ringstream/ringstream/wire"
)

// fsyncGate wraps a node's ring: while closed, the completions of its fsyncs are held (the data is
// written; the copy is not told), and open hands them over on the node's shard.
type fsyncGate struct {
	ring.Ring
	mu     sync.Mutex
	closed bool
	held   []heldCompletion
}

type heldCompletion struct {
	h ring.Handler
	c ring.Completion
}

type gatedHandler struct {
	g *fsyncGate
	h ring.Handler
}

func (gh gatedHandler) Complete(c ring.Completion) {
	gh.g.mu.Lock()
	defer gh.g.mu.Unlock()
	gh.g.held = append(gh.g.held, heldCompletion{gh.h, c})
}

func (g *fsyncGate) Fsync(h ring.Handler, tag uint64, fd int, datasync bool, fl ring.Flags) error {
	g.mu.Lock()
	closed := g.closed
	g.mu.Unlock()
	if closed {
		h = gatedHandler{g, h}
	}
	return g.Ring.Fsync(h, tag, fd, datasync, fl)
}

func (g *fsyncGate) close() { g.mu.Lock(); g.closed = true; g.mu.Unlock() }

// open stops holding and completes what was held, on node n's stream shard.
func (g *fsyncGate) open(c *cluster, id uint16) {
	g.mu.Lock()
	g.closed = false
	held := g.held
	g.held = nil
	g.mu.Unlock()
	c.run(id, func(*shard.Shard) {
		for _, x := range held {
			x.h.Complete(x.c)
		}
	})
}

// A new owner probes its followers once its own epoch is durable. A follower still applying the same
// assignment (here: waiting for its appends to become durable) cannot take the probe then; it keeps
// it and answers once it serves, so the new owner confirms without probing again. The new owner's
// resend is set beyond the test's bounds: without the kept probe nothing would ever be confirmed.
func TestFailover_FollowerApplyingKeepsTheNewOwnersProbe(t *testing.T) {
	gate := &fsyncGate{}
	noResend := func(c *streamhost.Config) { // node 2, the new owner, never probes again
		if c.Node == 2 {
			c.Stream.ResendTicks = 1 << 40
		}
	}
	c := newClusterOn(t, t.TempDir(), majority(1, 2, 3), nil,
		map[uint16]func(ring.Ring) ring.Ring{3: func(r ring.Ring) ring.Ring { gate.Ring = r; return gate }}, noResend)
	n1, n2, n3 := c.nodes[1], c.nodes[2], c.nodes[3]
	at := produceConfirmed(t, n1, 0, 10, 0)
	waitDurable(t, n2, at)
	waitDurable(t, n3, at)

	// Node 3 appends the next batches but its fsyncs do not come back: 1 and 2 confirm them.
	gate.close()
	at = produceConfirmed(t, n1, 10, 12, at)
	waitFor(t, "node 3 holding appends not durable", func() bool { st := state(t, n3); return st.Appended == at && st.Durable < at })
	if err := n1.node.Stop(); err != nil {
		t.Fatal(err)
	}
	if r := sealOn(t, n2, 2, 1, nil); r.Status != wire.SealSealed || r.RecordTail != at {
		t.Fatalf("node 2's seal answered %+v", r)
	}

	e2 := meta.Assignment{Epoch: 2, Owner: 2, Followers: []uint16{1, 3}, Policy: meta.Policy{Kind: meta.PolicyMajorityDurable}}
	starts := []wire.HistoryStart{{Epoch: 2, Node: 2, RecordStart: at}}
	controlFrame(t, n3, assignmentFrame(3, e2, starts))
	waitFor(t, "node 3 applying the assignment", func() bool { return !state(t, n3).Open })
	dropped := stats(c, 3).FramesDropped
	assignOn(t, n2, e2, starts)
	waitFor(t, "the new owner's probe dropped by node 3", func() bool { return stats(c, 3).FramesDropped > dropped })

	gate.open(c, 3)
	select {
	case err := <-n3.sink.opened:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("node 3 never took the assignment")
	}
	produceNoWait(t, n2, 12)
	select {
	case r := <-n2.sink.acks:
		if r.Kind != stream.ReplyProduce || r.Produce.BaseOffset != at {
			t.Fatalf("produce on the new owner answered %+v (%s)", r, r.Error.Message)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the new owner confirmed nothing: its follower never answered the probe (owner %+v)", state(t, n2))
	}
	if st := state(t, n2); st.Stats.Resets != 0 {
		t.Fatalf("the new owner probed again %d times", st.Stats.Resets)
	}
}

// A follower's node restarts: what the owner sent it while its link was down was dropped. The owner
// probes it again as soon as the link is up (stream.Copy.PeerUp), not ResendTicks later; its resend is
// set beyond the test's bounds, so every probe it sends is a link-up probe (Resets counts them). The
// follower's answer can meet its own link back still down (links are one per direction): the
// follower sends its last answer again when that link comes up (PeerUp on the follower), so with no
// resend at all the follower still catches up to every confirmed record.
func TestFailover_OwnerProbesARestartedFollowerWhenItsLinkIsUp(t *testing.T) {
	noResend := func(c *streamhost.Config) {
		c.Stream.ResendTicks = 1 << 40
	}
	c := newCluster(t, majority(1, 2, 3), noResend)
	n1 := c.nodes[1]
	at := produceConfirmed(t, n1, 0, 5, 0)
	waitDurable(t, c.nodes[3], at)
	if err := c.nodes[3].node.Stop(); err != nil {
		t.Fatal(err)
	}
	tail := produceConfirmed(t, n1, 5, 10, at) // confirmed by nodes 1 and 2; what went to node 3 is dropped
	before := state(t, n1).Stats.Resets
	c.restart(3)
	waitFor(t, "the owner probing node 3 when its link is up", func() bool { return state(t, n1).Stats.Resets > before })
	waitDurable(t, c.nodes[3], tail)
}
