package streamhost_test

import (
	"bytes"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/engine/stream"
	"github.com/ringstream/ringstream/engine/streamhost"
	"github.com/ringstream/ringstream/shard"
	"github.com/ringstream/ringstream/wire"
)

// sendFrom sends frame from node from to node to over their link (from the stream's shard).
func (c *cluster) sendFrom(from, to uint16, frame []byte) {
	c.run(from, func(s *shard.Shard) {
		if err := s.SendFrame(to, frame); err != nil {
			c.t.Error(err)
		}
	})
}

func assignmentFrame(from uint16, a meta.Assignment, starts []wire.HistoryStart) []byte {
	m := wire.StreamAssignment{Stream: testStream, Incarnation: testIncarnation, Epoch: a.Epoch, Owner: a.Owner,
		PolicyKind: uint8(a.Policy.Kind), PolicyCount: a.Policy.Count, FollowerCount: uint8(len(a.Followers))}
	copy(m.Followers[:], a.Followers)
	return wire.AppendStreamAssignment(nil, wire.From{Cluster: 42, Node: from}, &m, starts)
}

func stats(c *cluster, id uint16) streamhost.Stats {
	var hs streamhost.Stats
	c.run(id, func(s *shard.Shard) { hs = c.nodes[id].host.Stats(s) })
	return hs
}

// A node that holds no copy answers a seal so (SealNoCopy, back to the sender's copy), and an
// assignment that names it creates its copy, empty, which follows the owner and catches up on
// everything before it. An assignment whose history starts do not decode is withheld.
func TestFailover_NewMemberJoinsEmpty(t *testing.T) {
	policy := meta.Policy{Kind: meta.PolicyMajorityDurable}
	c := newClusterWith(t, majority(1, 2), []uint16{3})
	n1, n2, n3 := c.nodes[1], c.nodes[2], c.nodes[3]
	at := produceConfirmed(t, n1, 0, 10, 0)

	seal := wire.StreamSeal{Stream: testStream, Incarnation: testIncarnation, FenceEpoch: 2, TransitionID: 9}
	c.sendFrom(1, 3, wire.AppendStreamSeal(nil, wire.From{Cluster: 42, Node: 1}, &seal, nil))
	select {
	case r := <-n1.sink.sealed:
		if r.Status != wire.SealNoCopy || r.TransitionID != 9 || r.FenceEpoch != 2 {
			t.Fatalf("seal of a node without a copy answered %+v", r)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the seal of a node without a copy was never answered")
	}

	e2 := meta.Assignment{Epoch: 2, Owner: 1, Followers: []uint16{2, 3}, Policy: policy}
	starts := []wire.HistoryStart{{Epoch: 2, Node: 1, RecordStart: at}}
	frame := assignmentFrame(2, e2, starts)
	hd, body, err := wire.ParseFrame(frame)
	if err != nil {
		t.Fatal(err)
	}
	bad := bytes.Clone(body)
	bad[4], bad[5] = 0, 0 // the start's node: 0 does not decode
	n2.host.OnControlFrame(&hd, bad)
	if hs := stats(c, 2); hs.FramesBad != 1 || hs.Applied != 0 {
		t.Fatalf("node 2 after an assignment with unreadable starts: %+v", hs)
	}
	if st := state(t, n2); st.Epoch != 1 || st.Role != stream.RoleFollower {
		t.Fatalf("node 2 applied an assignment with unreadable starts: %+v", st)
	}

	assignOn(t, n1, e2, starts)
	assignOn(t, n2, e2, starts)
	c.sendFrom(1, 3, assignmentFrame(1, e2, starts))
	select {
	case err := <-n3.sink.opened:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("node 3's copy never opened")
	}
	waitDurable(t, n3, at)
	at = produceConfirmed(t, n1, 10, 15, at)
	waitDurable(t, n3, at)
	if st := state(t, n3); st.Role != stream.RoleFollower || st.Epoch != 2 {
		t.Fatalf("node 3's new copy: %+v", st)
	}
}

// A newer transition at the same fence takes a seal over, an older one is stale; a sealed copy that
// the next assignment leaves out stays sealed while the others serve at the new epoch, the owner
// moved in place with its cursor.
func TestFailover_SealTakeoverAndLeftOutCopy(t *testing.T) {
	policy := meta.Policy{Kind: meta.PolicyMajorityDurable}
	c := newCluster(t, majority(1, 2, 3))
	n1, n2, n3 := c.nodes[1], c.nodes[2], c.nodes[3]
	at := produceConfirmed(t, n1, 0, 5, 0)
	waitDurable(t, n3, at) // two copies confirm: the third may trail
	for _, s := range []struct {
		transition uint64
		want       wire.SealStatus
	}{{5, wire.SealSealed}, {4, wire.SealStale}, {6, wire.SealSealed}} {
		r := sealOn(t, n3, 2, s.transition, nil)
		if r.Status != s.want || r.TransitionID != s.transition || (s.want == wire.SealSealed && r.RecordTail != at) {
			t.Fatalf("seal of transition %d answered %+v, want %v", s.transition, r, s.want)
		}
	}
	// A cursor commit not yet synced (cursor events get no fsync of their own) when the owner takes
	// the next assignment without a seal: the apply syncs it and the owner keeps it.
	if r := cursorOp(t, n1, testStream, stream.KindCommitCursor, "c", 8); r.Kind != stream.ReplyCommitCursor {
		t.Fatalf("cursor commit answered %+v", r)
	}
	e2 := meta.Assignment{Epoch: 2, Owner: 1, Followers: []uint16{2}, Policy: policy}
	for _, n := range []*testNode{n1, n2, n3} {
		assignOn(t, n, e2, nil)
	}
	if r := cursorOp(t, n1, testStream, stream.KindGetCursor, "c", 0); !r.Cursor.Found || r.Cursor.Offset != 8 {
		t.Fatalf("cursor after the owner's reassignment: %+v (%s)", r.Cursor, r.Error.Message)
	}
	if hs := stats(c, 1); hs.InPlace != 1 {
		t.Fatalf("node 1 stats %+v: want its assignment applied in place", hs)
	}
	produceConfirmed(t, n1, 5, 8, at)
	if st := state(t, n3); st.Role != stream.RoleSealed || st.Epoch != 1 || st.Fence != 2 {
		t.Fatalf("the copy left out: %+v, want sealed at 2", st)
	}
	if hs := stats(c, 3); hs.AssignmentsLeftOut != 1 || hs.Applied != 0 || hs.Seals != 2 || hs.SealsStale != 1 {
		t.Fatalf("node 3 stats %+v", hs)
	}
}

// lockedBuffer is a log sink shared by the nodes' goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A copy promoted with its record tail below the latest start of an earlier epoch (an operator's
// accepted owner loss) logs the warning; its follower does not.
func TestFailover_AcceptedLossBelowPrefixWarns(t *testing.T) {
	var logs lockedBuffer
	c := newCluster(t, majority(1, 2, 3), func(cfg *streamhost.Config) {
		cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	at := produceConfirmed(t, c.nodes[1], 0, 5, 0)
	starts := []wire.HistoryStart{{Epoch: 2, Node: 1, RecordStart: at + 100}, {Epoch: 3, Node: 2, RecordStart: at}}
	e3 := meta.Assignment{Epoch: 3, Owner: 2, Followers: []uint16{3}, Policy: meta.Policy{Kind: meta.PolicyMajorityDurable}}
	assignOn(t, c.nodes[2], e3, starts)
	assignOn(t, c.nodes[3], e3, starts)
	if hs := stats(c, 2); hs.BelowPrefix != 1 {
		t.Fatalf("node 2 stats %+v: want one promotion below the prefix", hs)
	}
	if hs := stats(c, 3); hs.BelowPrefix != 0 {
		t.Fatalf("node 3 (a follower) stats %+v", hs)
	}
	if got := bytes.Count([]byte(logs.String()), []byte("below the confirmed prefix")); got != 1 {
		t.Fatalf("%d warnings logged, want 1:\n%s", got, logs.String())
	}
}

// A history start that falls inside one of the copy's batches (another owner's batching) cuts the
// copy at that batch's start: the seal reports the tail there, and the copy, released as a
// follower, fetches the rest from its owner.
func TestFailover_CutInsideBatchCutsAtItsStart(t *testing.T) {
	policy := meta.Policy{Kind: meta.PolicyMajorityDurable}
	c := newCluster(t, majority(1, 2, 3))
	n1, n3 := c.nodes[1], c.nodes[3]
	at := produceConfirmed(t, n1, 0, 10, 0)
	waitDurable(t, n3, at)
	inside := 5*recordsPerBatch + recordsPerBatch/2
	r := sealOn(t, n3, 3, 1, []wire.HistoryStart{{Epoch: 2, Node: 2, RecordStart: uint64(inside)}})
	if r.Status != wire.SealSealed || r.RecordTail != 5*recordsPerBatch {
		t.Fatalf("seal with a start inside a batch answered %+v, want the tail at that batch's start %d", r, 5*recordsPerBatch)
	}
	if hs := stats(c, 3); hs.Cuts != 1 || hs.CutsInsideBatch != 1 {
		t.Fatalf("node 3 stats %+v", hs)
	}
	e3 := meta.Assignment{Epoch: 3, Owner: 1, Followers: []uint16{3}, Policy: policy}
	starts := []wire.HistoryStart{{Epoch: 3, Node: 1, RecordStart: at}}
	assignOn(t, n1, e3, starts)
	assignOn(t, n3, e3, starts)
	at = produceConfirmed(t, n1, 10, 12, at)
	waitDurable(t, n3, at)
}

// A seal that reaches a copy still opening (its storage opening, its log being read) waits for the
// open and is carried out then: the answer has the tails the copy reopened with.
func TestFailover_SealQueuedWhileOpening(t *testing.T) {
	dir := t.TempDir()
	n := soloNode(t, dir)
	if _, errs := openAll(t, n, []streamhost.Spec{soloSpec(testStream)}); len(errs) > 0 {
		t.Fatal(errs)
	}
	var at uint64
	for seq := range uint64(20) {
		r := produceOne(t, n, testStream, seq)
		if r.Kind != stream.ReplyProduce {
			t.Fatalf("produce answered %+v", r)
		}
		at = r.Produce.BaseOffset + recordsPerBatch
	}
	if err := n.node.Stop(); err != nil {
		t.Fatal(err)
	}
	n = soloNode(t, dir)
	if err := n.host.Open(soloSpec(testStream)); err != nil {
		t.Fatal(err)
	}
	m := wire.StreamSeal{Stream: testStream, Incarnation: testIncarnation, FenceEpoch: 2, TransitionID: 3}
	controlFrame(t, n, wire.AppendStreamSeal(nil, wire.From{Cluster: 42, Node: n.id}, &m, nil))
	select {
	case r := <-n.sink.sealed:
		if r.Status != wire.SealSealed || r.RecordTail != at {
			t.Fatalf("seal of a copy opening answered %+v, want sealed at %d", r, at)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the seal of a copy opening was never answered")
	}
	if err := <-n.sink.opened; err != nil {
		t.Fatal(err)
	}
	if st := state(t, n); st.Role != stream.RoleSealed || st.Fence != 2 {
		t.Fatalf("after the seal: %+v", st)
	}
}

// A newer transition that arrives while the seal's storage step runs takes it over: the copy seals
// again once the step ends and answers only the newer transition.
func TestFailover_SealTakenOverMidway(t *testing.T) {
	c := newCluster(t, majority(1, 2, 3))
	n3 := c.nodes[3]
	at := produceConfirmed(t, c.nodes[1], 0, 3, 0)
	waitDurable(t, n3, at)
	// Both handed over from one shard turn run in the next one: the second finds the first fencing.
	c.run(3, func(*shard.Shard) {
		for _, transition := range []uint64{5, 6} {
			m := wire.StreamSeal{Stream: testStream, Incarnation: testIncarnation, FenceEpoch: 2, TransitionID: transition}
			controlFrame(t, n3, wire.AppendStreamSeal(nil, wire.From{Cluster: 42, Node: 3}, &m, nil))
		}
	})
	select {
	case r := <-n3.sink.sealed:
		if r.Status != wire.SealSealed || r.TransitionID != 6 || r.RecordTail != at {
			t.Fatalf("seal answered %+v, want transition 6 sealed at %d", r, at)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the seal was never answered")
	}
	if hs := stats(c, 3); hs.Seals != 1 {
		t.Fatalf("node 3 stats %+v: want one seal answered", hs)
	}
}
