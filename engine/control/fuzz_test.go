package control

import (
	"slices"
	"testing"

	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/wire"
)

// FuzzController drives a controller over a real meta.State with a fuzzed sequence of heartbeats,
// shutdown notices, link events, ticks, seal answers, dropped and applied proposals, operator
// actions and primary changes. It checks after every Ready: at most one proposal per stream; seals
// only for the current transition; every CommitRecovery names sealed copies of the old assignment, at
// least R of them, the furthest answer (record, cursor, lowest id), and a tail at or past the latest
// history start; and meta applies every proposal without breaking its invariants (its asserts).
func FuzzController(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 0x15, 5, 7, 0x17, 0x27, 5, 4, 5})
	f.Add([]byte{1, 5, 5, 7, 0x17, 0x27, 0x37, 5, 8, 5, 5, 7, 0x17, 0x27, 5, 10, 5, 7, 5})
	f.Add([]byte{0x11, 5, 5, 9, 5, 0x12, 2, 4, 4, 4, 5, 5, 0x47, 0x37, 6, 5, 5})
	// A second owner loss before a follower caught up: the answers are below the latest start.
	f.Add([]byte{0xA0, 0x10, 0x20, 0x30, 0x40, 0x1B, 0x01, 5, 5, 0x17, 0x27, 0x37, 0x47, 5, 5,
		0x11, 5, 5, 0x27, 0x37, 0x47, 5, 5})
	f.Fuzz(func(t *testing.T, script []byte) {
		h := newFuzzHarness(t)
		for i, b := range script {
			if i >= 400 {
				break
			}
			h.step(b)
			h.f.c.CheckInvariants()
		}
	})
}

type fuzzHarness struct {
	f       *fixture
	tails   map[[2]uint64]uint64 // (stream, node) -> the copy's record tail
	answers map[[3]uint64]uint64 // (stream, transition, node) -> record tail answered; a batch's recoveries share an id
	seals   []Seal               // the last seals handed out
	failed  map[uint16]bool      // nodes whose copies publish a failed log
}

func newFuzzHarness(t *testing.T) *fuzzHarness {
	cfg := testConfig()
	f := newFixture(t, cfg, 5)
	f.createStream("a", 3, majority, 1, 2, 3)
	f.createStream("b", 3, meta.Policy{Kind: meta.PolicyLocalDurable}, 2, 3, 4)
	f.createStream("c", 1, majority, 5)
	return &fuzzHarness{f: f, tails: make(map[[2]uint64]uint64), answers: make(map[[3]uint64]uint64),
		failed: make(map[uint16]bool)}
}

func (h *fuzzHarness) step(b byte) {
	f, c := h.f, h.f.c
	node := uint16(b>>4)%5 + 1
	switch b & 0xf {
	case 0: // the node's owned streams grow; it publishes every copy it holds
		var tails []wire.CopyTail
		for _, st := range f.s.Streams() {
			a, _ := f.s.Assignment(st.ID)
			key := [2]uint64{st.ID, uint64(node)}
			if a.Owner == node {
				h.tails[key] += uint64(b >> 4)
			}
			if a.Includes(node) {
				t := tail(st, a.Epoch, wire.RoleFollower, h.tails[key], 0)
				if h.failed[node] {
					t.Flags, t.Cause = wire.CopyLogFailed, wire.LogFailNoSpace
				}
				tails = append(tails, t)
			}
		}
		f.heartbeat(node, 0, tails...)
	case 11: // the node catches up with the owner of every stream it follows
		for _, st := range f.s.Streams() {
			if a, _ := f.s.Assignment(st.ID); a.Includes(node) && a.Owner != node {
				h.tails[[2]uint64{st.ID, uint64(node)}] = h.tails[[2]uint64{st.ID, uint64(a.Owner)}]
			}
		}
	case 1:
		f.heartbeat(node, wire.FlagShuttingDown)
	case 2:
		c.OnLinkDown(node)
	case 3:
		c.OnLinkUp(node)
	case 4:
		for range 1 + b>>4 {
			c.Tick()
		}
	case 5, 6:
		h.ready(b&0xf == 5)
	case 7:
		for _, s := range h.seals {
			if s.To == node {
				t := h.tails[[2]uint64{s.Seal.Stream, uint64(node)}]
				h.answers[[3]uint64{s.Seal.Stream, s.Seal.TransitionID, uint64(node)}] = t
				f.reply(node, s.Seal, t, 0)
			}
		}
	case 8, 9:
		for _, st := range f.s.Streams() {
			if b&0xf == 8 {
				if op, err := c.Withdraw(st.ID); err == nil {
					f.apply(op)
				}
			} else if op, err := c.AcceptOwnerLoss(st.ID, node); err == nil {
				f.apply(op)
			}
		}
		c.StateChanged()
	case 10:
		c.BecomePrimary()
	case 12: // the node's logs fail, or heal (published from its next heartbeat on)
		h.failed[node] = !h.failed[node]
	}
}

// ready collects effects, checks them, and applies (or drops) the proposals.
func (h *fuzzHarness) ready(apply bool) {
	f, t := h.f, h.f.t
	fx := f.ready()
	h.seals = slices.Clone(fx.Seals)
	for _, s := range fx.Seals {
		rec, ok := f.s.RecoveryOf(s.Seal.Stream)
		if !ok || rec.Status != meta.RecoveryPending || rec.ID != s.Seal.TransitionID || rec.FromEpoch+1 != s.Seal.FenceEpoch {
			t.Fatalf("seal %+v for recovery %+v (%v)", s.Seal, rec, ok)
		}
	}
	seen := map[uint64]bool{}
	for _, p := range fx.Proposals {
		for _, s := range p.For() {
			if seen[s] {
				t.Fatalf("two proposals for stream %d in one Ready", s)
			}
			seen[s] = true
		}
		switch op := p.Op.(type) {
		case meta.CommitRecovery:
			h.checkCommit(op)
		case meta.CommitRecoveries:
			for _, e := range op.Entries {
				h.checkCommit(e)
			}
		}
	}
	for _, p := range fx.Proposals {
		if !apply {
			for _, s := range p.For() {
				f.c.ProposalDropped(s)
			}
			continue
		}
		f.c.ProposalApplied(p.For(), f.apply(p.Op))
	}
	f.c.StateChanged()
}

func (h *fuzzHarness) checkCommit(op meta.CommitRecovery) {
	f, t := h.f, h.f.t
	a, _ := f.s.Assignment(op.Stream)
	rec, _ := f.s.RecoveryOf(op.Stream)
	if len(op.Sealed) < int(rec.SealThreshold) {
		t.Fatalf("commit %+v with fewer than R = %d", op, rec.SealThreshold)
	}
	for _, n := range op.Sealed {
		got, ok := h.answers[[3]uint64{op.Stream, op.Recovery, uint64(n)}]
		if !a.Includes(n) || !ok {
			t.Fatalf("commit %+v: %d is not an answered copy of %+v", op, n, a)
		}
		// A copy whose log failed is never promoted, so it may tie the owner whatever its id.
		_, failed := f.c.logFailed(n, op.Stream, incarnationOf(f, op.Stream))
		if got > op.RecordTail || got == op.RecordTail && n < op.Owner && !failed {
			t.Fatalf("commit %+v: copy %d answered %d, further than the owner", op, n, got)
		}
	}
	st, _ := f.s.StreamByID(op.Stream)
	if _, failed := f.c.logFailed(op.Owner, op.Stream, st.Incarnation); failed {
		t.Fatalf("commit %+v promotes a copy whose log failed", op)
	}
	if latest, ok := f.s.LatestStart(op.Stream); ok && op.RecordTail < latest.RecordStart {
		t.Fatalf("commit %+v below the latest start %+v", op, latest)
	}
}

func incarnationOf(f *fixture, stream uint64) uint32 {
	st, _ := f.s.StreamByID(stream)
	return st.Incarnation
}
