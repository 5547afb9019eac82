package streamhost_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/engine/stream"
	"github.com/ringstream/ringstream/engine/streamhost"
	"github.com/ringstream/ringstream/shard"
	"github.com/ringstream/ringstream/wire"
)

// Issue 22, finding 7: guards a mutation audit could break with every test green, each tested on
// real nodes over loopback.

// waitUntil polls cond (events on other nodes move it) until it holds or 30 s pass.
func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 30 s: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// repliesReceived counts the CommitReply entries n's shards took (the followers' answers to the
// owner's Commit heartbeats).
func repliesReceived(n *testNode) uint64 {
	var sum uint64
	for _, s := range n.node.Shards() {
		sum += s.Stats().ReplyEntriesReceived.Load()
	}
	return sum
}

// refusedUnavailable reports whether r refuses as unavailable with a text holding why.
func refusedUnavailable(r stream.Reply, why string) bool {
	return r.Kind == stream.ReplyError && r.Error.Code == wire.CodeUnavailable && bytes.Contains(r.Error.Message, []byte(why))
}

// R24 on an every-copy stream (W = 3): the owner that hears only one of its two followers within
// commit_heartbeat_timeout stops serving; that follower's replies alone (two copies of W = 3 with
// the owner) do not bring it back, however many; once the other follower answers again it serves.
func TestQuorum_OwnerServesOnlyWhileItHearsW(t *testing.T) {
	a := meta.Assignment{Epoch: 1, Owner: 1, Followers: []uint16{2, 3}, Policy: meta.Policy{Kind: meta.PolicyLocalDurable}}
	c := newCluster(t, a)
	n1 := c.nodes[1]
	produceConfirmed(t, n1, 0, 2, 0)
	if err := c.nodes[3].node.Stop(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the owner losing its quorum", func() bool { return hostStats(t, n1).QuorumLost > 0 })
	if r := fetchAt(t, n1, testStream, 0); !refusedUnavailable(r, "quorum") {
		t.Fatalf("fetch after the quorum loss answered kind %d code %d (%s), want unavailable", r.Kind, r.Error.Code, r.Error.Message)
	}
	base := repliesReceived(n1)
	waitUntil(t, "three more replies from node 2", func() bool { return repliesReceived(n1) >= base+3 })
	if r := fetchAt(t, n1, testStream, 0); !refusedUnavailable(r, "quorum") {
		t.Fatalf("fetch with one follower of two heard answered kind %d code %d (%s), want unavailable (W = 3)", r.Kind,
			r.Error.Code, r.Error.Message)
	}
	c.restart(3)
	waitUntil(t, "the owner serving again with both followers", func() bool {
		return fetchAt(t, n1, testStream, 0).Kind == stream.ReplyFetch
	})
}

// A seal for another incarnation of the same stream id is not this copy's: it is answered "no
// copy" and the copy goes on following, unfenced.
func TestSeal_AnotherIncarnationIsNoCopy(t *testing.T) {
	c := newCluster(t, majority(1, 2, 3))
	at := produceConfirmed(t, c.nodes[1], 0, 2, 0)
	n2 := c.nodes[2]
	m := wire.StreamSeal{Stream: testStream, Incarnation: testIncarnation + 1, FenceEpoch: 2, TransitionID: 1}
	controlFrame(t, n2, wire.AppendStreamSeal(nil, wire.From{Cluster: 42, Node: n2.id}, &m, nil))
	select {
	case r := <-n2.sink.sealed:
		if r.Status != wire.SealNoCopy || r.Incarnation != testIncarnation+1 {
			t.Fatalf("seal of incarnation %d answered %+v, want no copy", m.Incarnation, r)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("seal never answered")
	}
	if st := state(t, n2); st.Role != stream.RoleFollower || st.Fence != 0 {
		t.Fatalf("node 2 after another incarnation's seal: %+v", st)
	}
	at = produceConfirmed(t, c.nodes[1], 2, 4, at)
	waitDurable(t, n2, at)
}

// An assignment that arrives while the copy's seal is still in storage waits for the seal to end.
// Node 1 holds 24 records of epoch 1, but epoch 2 started on node 2 at 8, so the seal at 3 cuts
// node 1 to 8, and the assignment at 3 (node 2 owner, node 1 its follower) comes while the seal's
// fence is in storage. The seal runs to its end (fence, cut, digest) and answers once at the cut
// tail before the copy reopens (the order of the host's callbacks, on the shard's goroutine, shows
// it), then the assignment is applied.
func TestAssign_WaitsForTheSealsCut(t *testing.T) {
	events := make(chan string, 64)
	order := func(cfg *streamhost.Config) {
		opened, sealed := cfg.Opened, cfg.SealReplies
		cfg.Opened = func(id uint64, err error) {
			events <- "opened"
			opened(id, err)
		}
		cfg.SealReplies = func(from uint16, m wire.StreamSealReply) {
			events <- "sealed"
			sealed(from, m)
		}
	}
	policy := meta.Policy{Kind: meta.PolicyMajorityDurable}
	c := newCluster(t, meta.Assignment{Epoch: 1, Owner: 1, Policy: policy}, order)
	n1 := c.nodes[1]
	<-events
	produceConfirmed(t, n1, 0, 3, 0)
	starts := []wire.HistoryStart{{Epoch: 2, Node: 2, RecordStart: 8}}
	seal := wire.StreamSeal{Stream: testStream, Incarnation: testIncarnation, FenceEpoch: 3, TransitionID: 1}
	asg := wire.StreamAssignment{Stream: testStream, Incarnation: testIncarnation, Epoch: 3, Owner: 2,
		PolicyKind: uint8(policy.Kind), FollowerCount: 1}
	asg.Followers[0] = 1
	sealFrame := wire.AppendStreamSeal(nil, wire.From{Cluster: 42, Node: 1}, &seal, starts)
	asgFrame := wire.AppendStreamAssignment(nil, wire.From{Cluster: 42, Node: 1}, &asg,
		append(starts, wire.HistoryStart{Epoch: 3, Node: 2, RecordStart: 8}))
	c.run(1, func(*shard.Shard) {
		controlFrame(t, n1, sealFrame)
		controlFrame(t, n1, asgFrame)
	})
	for _, want := range []string{"sealed", "opened"} {
		select {
		case got := <-events:
			if got != want {
				t.Fatalf("%s before the seal's answer: the assignment was applied while the seal was in storage", got)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("no %s: %+v", want, hostStats(t, n1))
		}
	}
	if r := <-n1.sink.sealed; r.Status != wire.SealSealed || r.RecordTail != 8 {
		t.Fatalf("seal answered %+v, want sealed at the cut, 8", r)
	}
	if err := <-n1.sink.opened; err != nil {
		t.Fatalf("reopen at epoch 3: %v", err)
	}
	if st := state(t, n1); st.Role != stream.RoleFollower || st.Epoch != 3 || st.Durable != 8 {
		t.Fatalf("after the seal and the assignment: %+v", st)
	}
	if hs := hostStats(t, n1); hs.SealsFailed != 0 || hs.Seals != 1 {
		t.Fatalf("host stats %+v: want one seal, none failed", hs)
	}
}
