package stream_test

import (
	"bytes"
	"flag"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/engine/stream"
	"github.com/ringstream/ringstream/wire"
)

var randomSeeds = flag.Int("stream.seeds", 200, "seeds of TestRandomized")

// producerState is one test producer: its next sequence and the batch it waits on.
type producerState struct {
	id      uint64
	seq     uint64
	count   uint32
	waiting bool
	acked   map[uint64]uint64 // sequence -> first offset answered
}

// TestRandomized runs a fixed assignment under message loss, duplication and reordering, storage
// that syncs and reads at random moments, follower crashes that lose what was not synced, and
// retrying producers. After every step it checks the copy invariants, that the confirmed tail
// never moves back, that no follower acknowledges past its durable tail (both in node.ready), that
// every answered produce sits at the offset it was given, and that every follower's log agrees
// with the owner's. At the end the faults stop: every follower must reach the owner's tail and
// every producer's batch must be answered.
func TestRandomized(t *testing.T) {
	for seed := 1; seed <= *randomSeeds; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { randomRun(t, uint64(seed), nil) })
	}
}

// TestRandomized_CatchesBrokenVariants: the same runs catch each broken variant (a confirm rule one
// copy short, an owner that counts its appends before its fsync) within 1,000 seeds.
func TestRandomized_CatchesBrokenVariants(t *testing.T) {
	for _, tc := range []struct {
		name string
		hook func(*stream.Copy)
	}{
		{"confirm on W-1 copies", stream.BreakConfirmShort},
		{"ack before the owner's fsync", stream.BreakAckBeforeOwnerFsync},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for seed := uint64(1); seed <= 1000; seed++ {
				c := &catcher{t: t}
				if caught := c.run(seed, tc.hook); caught != "" {
					t.Logf("caught at seed %d: %s", seed, caught)
					return
				}
			}
			t.Fatal("the broken variant survived 1,000 seeds")
		})
	}
}

// catcher is a tb that stops a run at its first violation and remembers it.
type catcher struct {
	t   *testing.T
	msg string
}

type stopRun struct{}

func (c *catcher) Helper()                         {}
func (c *catcher) Logf(format string, args ...any) {}
func (c *catcher) Fatal(args ...any)               { c.msg = fmt.Sprint(args...); panic(stopRun{}) }
func (c *catcher) Fatalf(format string, args ...any) {
	c.msg = fmt.Sprintf(format, args...)
	panic(stopRun{})
}

func (c *catcher) run(seed uint64, hook func(*stream.Copy)) (caught string) {
	defer func() {
		switch r := recover().(type) {
		case nil:
		case stopRun:
			caught = c.msg
		case string: // a copy's own invariant (internal/assert)
			if !strings.HasPrefix(r, "stream: ") {
				panic(r)
			}
			caught = "invariant: " + r
		default:
			panic(r)
		}
	}()
	randomRun(c, seed, hook)
	return ""
}

// randomSim is one randomized run: a cluster, the messages in flight, the producers.
type randomSim struct {
	t     tb
	seed  uint64
	rng   *rand.Rand
	a     meta.Assignment
	cl    *cluster
	owner *node
	queue []envelope
	prods []*producerState
}

func randomRun(t tb, seed uint64, hook func(*stream.Copy)) {
	s := &randomSim{t: t, seed: seed, rng: rand.New(rand.NewPCG(seed, 7))}
	s.a = meta.Assignment{Epoch: 1, Owner: 1, Policy: meta.Policy{Kind: meta.PolicyMajorityDurable}}
	if s.rng.IntN(3) == 0 {
		s.a.Policy = meta.Policy{Kind: meta.PolicyLocalDurable}
	}
	copies := 1 + s.rng.IntN(5)
	for f := 2; f <= copies; f++ {
		s.a.Followers = append(s.a.Followers, uint16(f))
	}
	if s.rng.IntN(2) == 0 {
		s.cl = historyCluster(t, s.rng, s.a)
		s.a = s.cl.nodes[1].c.Assignment()
	} else {
		s.cl = newCluster(t, s.a)
	}
	s.owner = s.cl.nodes[1]
	if hook != nil {
		hook(s.owner.c)
	}
	for _, id := range s.cl.ids {
		s.cl.nodes[id].autoSync = false
	}
	s.prods = []*producerState{{id: 11, acked: map[uint64]uint64{}}, {id: 12, acked: map[uint64]uint64{}}}
	for range 400 {
		s.step()
		for _, id := range s.cl.ids {
			s.queue = append(s.queue, s.cl.nodes[id].sent...)
			s.cl.nodes[id].sent = nil
		}
		s.check()
	}
	s.heal()
}

// step takes one random action: a produce (or its retry), a fetch, a cursor commit, a message
// delivered, lost or duplicated, a node's storage syncing or serving its reads, a tick, or a
// follower crash that loses what it had not synced.
func (s *randomSim) step() {
	t, rng, cl, owner := s.t, s.rng, s.cl, s.owner
	switch k := rng.IntN(100); {
	case k < 15:
		p := s.prods[rng.IntN(len(s.prods))]
		if !p.waiting {
			p.waiting, p.count = true, uint32(1+rng.IntN(4))
		}
		cl.produce(1, p.id, p.id, p.seq, p.count, payload(int(p.seq), 20+rng.IntN(200)))
	case k < 18:
		m := stream.Message{Kind: stream.KindFetch, Client: 99}
		off := uint64(rng.IntN(int(owner.c.Confirmed()) + 3))
		m.Fetch = wire.Fetch{RequestID: off, Stream: testStream, Offset: off, BytesMax: uint32(1 + rng.IntN(2000)),
			RecordsMax: uint32(rng.IntN(5)), WaitMs: uint32(rng.IntN(3) * 20)}
		owner.c.Step(&m)
		owner.ready(t)
	case k < 20:
		m := cursorMsg(stream.KindCommitCursor, fmt.Sprint("c", rng.IntN(3)), uint64(rng.IntN(int(owner.c.Confirmed())+1)))
		owner.c.Step(&m)
		owner.ready(t)
	case k < 50 && len(s.queue) > 0:
		i := rng.IntN(len(s.queue))
		e := s.queue[i]
		s.queue = append(s.queue[:i], s.queue[i+1:]...)
		switch r := rng.IntN(10); {
		case r == 0: // lost
		case r == 1: // duplicated
			cl.deliver(e)
			cl.deliver(e)
		default:
			cl.deliver(e)
		}
	case k < 65:
		n := cl.nodes[cl.ids[rng.IntN(len(cl.ids))]]
		n.sync(t)
		n.ready(t)
	case k < 70:
		// A durable report lands between a step and the Ready that carries the step's effects
		// out (a shard dispatches a whole batch of completions before it turns to Ready).
		cl.nodes[cl.ids[rng.IntN(len(cl.ids))]].sync(t)
	case k < 80:
		cl.nodes[cl.ids[rng.IntN(len(cl.ids))]].serveReads(t)
	case k < 85:
		// A read completes and a durable report follows in the same dispatch, before Ready.
		n := cl.nodes[cl.ids[rng.IntN(len(cl.ids))]]
		n.serveReadsThen(t, false)
		n.sync(t)
	case k < 95:
		for _, id := range cl.ids {
			cl.nodes[id].c.Tick()
			cl.nodes[id].ready(t)
		}
	default:
		if len(cl.ids) > 1 {
			id := cl.ids[1+rng.IntN(len(cl.ids)-1)]
			old := cl.nodes[id]
			n := newNode(t, testConfig(id), s.a, old.rec[:old.recSync], old.cur[:old.curSync], old.epochs)
			n.autoSync = false
			cl.nodes[id] = n
		}
	}
}

// check checks every reply so far, every follower's log against the owner's, and that the
// confirmed tail is durable on W copies.
func (s *randomSim) check() {
	t, owner := s.t, s.owner
	for _, r := range owner.takeReplies() {
		checkReply(t, owner, s.prods, r)
	}
	held := 0
	for _, id := range s.cl.ids {
		if id != 1 {
			sameLog(t, owner, s.cl.nodes[id])
			agreeAppended(t, owner, s.cl.nodes[id])
		}
		if s.cl.nodes[id].recTail() >= owner.c.Confirmed() {
			held++
		}
	}
	if held < s.a.ConfirmCount() {
		t.Fatalf("confirmed %d is durable on %d copies, W is %d", owner.c.Confirmed(), held, s.a.ConfirmCount())
	}
}

// heal stops the faults: storage syncs, messages arrive, producers retry; every follower must reach
// the owner's tail, everything must be confirmed and every producer answered.
func (s *randomSim) heal() {
	t, cl, owner := s.t, s.cl, s.owner
	for _, id := range cl.ids {
		cl.nodes[id].autoSync = true
		cl.nodes[id].sync(t)
		cl.nodes[id].ready(t)
	}
	for round := 0; round < 40; round++ {
		for _, e := range s.queue {
			cl.deliver(e)
		}
		s.queue = nil
		cl.settle()
		for _, p := range s.prods {
			if p.waiting && round%5 == 0 {
				cl.produce(1, p.id, p.id, p.seq, p.count, payload(int(p.seq), 20))
			}
		}
		cl.tick(1)
		s.check()
	}
	for _, id := range cl.ids[1:] {
		if got := cl.nodes[id].recTail(); got != owner.recTail() {
			t.Fatalf("seed %d: node %d at %d after healing, owner at %d", s.seed, id, got, owner.recTail())
		}
	}
	if owner.c.Confirmed() != owner.recTail() {
		t.Fatalf("seed %d: confirmed %d, owner tail %d after healing", s.seed, owner.c.Confirmed(), owner.recTail())
	}
	for _, p := range s.prods {
		if p.waiting {
			t.Fatalf("seed %d: producer %d's batch %d never answered", s.seed, p.id, p.seq)
		}
	}
}

// checkReply checks a produce reply against the owner's durable log: the batch at its offset is the
// producer's, with its count, and a batch answered twice got the same offset both times.
func checkReply(t tb, owner *node, prods []*producerState, r stream.Reply) {
	t.Helper()
	switch r.Kind {
	case stream.ReplyFetch:
		checkFetchAgainst(t, owner, r)
		return
	case stream.ReplyCommitCursor:
		return
	case stream.ReplyError:
		if r.Error.Code != wire.CodeOverloaded {
			t.Fatalf("refusal %d %q", r.Error.Code, r.Error.Message)
		}
		return
	}
	var p *producerState
	for _, q := range prods {
		if q.id == r.Client {
			p = q
		}
	}
	seq := r.Produce.RequestID - 1000*p.id
	if base, ok := p.acked[seq]; ok && base != r.Produce.BaseOffset {
		t.Fatalf("producer %d batch %d answered at %d and at %d", p.id, seq, base, r.Produce.BaseOffset)
	}
	p.acked[seq] = r.Produce.BaseOffset
	if r.Produce.BaseOffset+uint64(r.Produce.Count) > owner.c.Confirmed() {
		t.Fatalf("answered past the confirmed tail")
	}
	found := false
	for _, b := range owner.rec[:owner.recSync] {
		h, _, _ := decode(b)
		if h.BaseOffset == r.Produce.BaseOffset {
			found = h.ProducerID == p.id && h.Sequence == seq && h.Count == r.Produce.Count
		}
	}
	if !found {
		t.Fatalf("producer %d batch %d answered at %d, not in the owner's log there", p.id, seq, r.Produce.BaseOffset)
	}
	if p.waiting && seq == p.seq {
		p.waiting = false
		p.seq++
	}
}

// agreeAppended checks the follower's whole log, queued part included, against the owner's.
func agreeAppended(t tb, owner, f *node) {
	t.Helper()
	for i := 0; i < min(len(owner.rec), len(f.rec)); i++ {
		if !bytes.Equal(owner.rec[i], f.rec[i]) {
			t.Fatalf("node %d's batch %d differs from the owner's", f.id, i)
		}
	}
}

// checkFetchAgainst checks a fetch reply: confirmed batches only, byte for byte the owner's.
func checkFetchAgainst(t tb, owner *node, r stream.Reply) {
	t.Helper()
	checkFetch(t, r, r.Fetch.BaseOffset, r.Fetch.Count)
	if r.Fetch.ConfirmedTail > owner.c.Confirmed() {
		t.Fatalf("fetch reply claims confirmed %d past the owner's %d", r.Fetch.ConfirmedTail, owner.c.Confirmed())
	}
	data := r.Fetch.Batches
	for _, b := range owner.rec[:owner.recSync] {
		if len(data) == 0 {
			break
		}
		h, _, _ := decode(b)
		if h.BaseOffset < r.Fetch.BaseOffset {
			continue
		}
		if !bytes.HasPrefix(data, b) {
			t.Fatalf("fetched batch at %d differs from the owner's", h.BaseOffset)
		}
		data = data[len(b):]
	}
	if len(data) != 0 {
		t.Fatal("fetched bytes the owner's log does not hold")
	}
}

// historyCluster starts the assignment at epoch 3 on a history: the owner holds batches written at
// epochs 1 and 2, each follower a prefix of them, so log matching works across epoch runs.
func historyCluster(t tb, rng *rand.Rand, a meta.Assignment) *cluster {
	a.Epoch = 3
	var log [][]byte
	var off uint64
	for i := 0; i < 2+rng.IntN(6); i++ {
		epoch := uint32(1)
		if i >= 2 && rng.IntN(2) == 0 || i > 4 {
			epoch = 2
		}
		if n := len(log); n > 0 {
			h, _, _ := decode(log[n-1])
			epoch = max(epoch, h.Epoch)
		}
		count := uint32(1 + rng.IntN(3))
		log = append(log, batch(off, count, epoch, 20))
		off += uint64(count)
	}
	epochs := []wire.LogEpoch{{Epoch: 1}}
	cl := &cluster{t: t, nodes: map[uint16]*node{}}
	cl.ids = append([]uint16{a.Owner}, a.Followers...)
	for _, id := range cl.ids {
		held := log
		if id != a.Owner {
			held = log[:rng.IntN(len(log)+1)]
		}
		cl.nodes[id] = newNode(t, testConfig(id), a, append([][]byte(nil), held...), nil, epochs)
	}
	cl.settle()
	return cl
}
