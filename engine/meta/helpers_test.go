package meta

import (
	"testing"
)

// fixture drives one State through encoded ops, the way the replica does, and checks every
// invariant after each op.
type fixture struct {
	t  testing.TB
	s  *State
	op uint64
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	return &fixture{t: t, s: NewState()}
}

// withCluster registers nodes 1..6.
func (f *fixture) withCluster() *fixture {
	f.t.Helper()
	for id := uint16(1); id <= 6; id++ {
		f.mustApply(RegisterNode{Node: id, Address: "127.0.0.1:700" + string(rune('0'+id))})
	}
	return f
}

func (f *fixture) apply(op Op) Result {
	f.t.Helper()
	f.op++
	r := f.s.applyOp(AppendOp(nil, op), f.op)
	if err := f.s.validate(); err != nil {
		f.t.Fatalf("after %s (%s): invariant broken: %v", op.Kind(), r, err)
	}
	return r
}

func (f *fixture) mustApply(op Op) Result {
	f.t.Helper()
	r := f.apply(op)
	if !r.OK() {
		f.t.Fatalf("%s refused: %s", op.Kind(), r)
	}
	return r
}

// refused applies op, wants code, and checks that the state did not change.
func (f *fixture) refused(op Op, code ResultCode) Result {
	f.t.Helper()
	before := f.s.Digest()
	r := f.apply(op)
	if r.Code != code {
		f.t.Fatalf("%s: got %s, want code %s", op.Kind(), r, code)
	}
	if after := f.s.Digest(); after != before {
		f.t.Fatalf("%s refused with %s but the state changed (digest %x -> %x)", op.Kind(), code, before, after)
	}
	return r
}

// createStream creates a stream on owner with followers, policy majority_durable.
func (f *fixture) createStream(name string, owner uint16, followers ...uint16) Stream {
	f.t.Helper()
	majority := Policy{Kind: PolicyMajorityDurable}
	f.mustApply(CreateStream{Name: name, Copies: uint8(1 + len(followers)), Policy: majority,
		Owner: owner, Followers: followers, Stamped: majority})
	st, ok := f.s.StreamByName(name)
	if !ok {
		f.t.Fatalf("stream %q not found after create", name)
	}
	return st
}

// recordRecovery records a liveness-expiry recovery of st from its current epoch and returns it.
func (f *fixture) recordRecovery(st Stream, proposedOwner uint16, members ...uint16) Recovery {
	f.t.Helper()
	a := f.assignment(st)
	f.mustApply(RecordRecovery{Stream: st.ID, Incarnation: st.Incarnation, ExpectedEpoch: a.Epoch,
		ProposedOwner: proposedOwner, Members: members, Policy: Policy{Kind: PolicyMajorityDurable},
		Reason: ReasonLivenessExpiry})
	r, ok := f.s.RecoveryOf(st.ID)
	if !ok {
		f.t.Fatalf("no recovery after record")
	}
	return r
}

func (f *fixture) assignment(st Stream) Assignment {
	f.t.Helper()
	a, ok := f.s.Assignment(st.ID)
	if !ok {
		f.t.Fatalf("stream %d has no assignment", st.ID)
	}
	return a
}

func (f *fixture) starts(st Stream) Starts {
	f.t.Helper()
	s, ok := f.s.Starts(st.ID)
	if !ok {
		f.t.Fatalf("stream %d has no starts", st.ID)
	}
	return s
}
