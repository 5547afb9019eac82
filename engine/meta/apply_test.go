package meta

import (
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestRegisterNode_AddsNodeAndUpdatesAddress(t *testing.T) {
	f := newFixture(t)
	f.mustApply(RegisterNode{Node: 3, Address: "a:1"})
	if n, ok := f.s.Node(3); !ok || n.Address != "a:1" || n.Status != NodeRegistered {
		t.Fatalf("node 3 = %+v, %v", n, ok)
	}
	before := f.s.Digest()
	f.mustApply(RegisterNode{Node: 3, Address: "a:1"})
	if f.s.Digest() != before {
		t.Fatal("registering the same address again changed the state")
	}
	f.mustApply(RegisterNode{Node: 3, Address: "b:2"})
	if n, _ := f.s.Node(3); n.Address != "b:2" {
		t.Fatalf("address not updated: %+v", n)
	}
}

func TestRegisterNode_RefusedAfterDecommission(t *testing.T) {
	f := newFixture(t)
	f.mustApply(RegisterNode{Node: 3, Address: "a:1"})
	f.mustApply(DecommissionNode{Node: 3})
	f.refused(RegisterNode{Node: 3, Address: "a:1"}, ResultNodeDecommissioned)
}

func TestDecommissionNode_RetiresIdleNode(t *testing.T) {
	f := newFixture(t).withCluster()
	f.createStream("s", 1, 2, 3)
	f.mustApply(DecommissionNode{Node: 6})
	if n, _ := f.s.Node(6); n.Status != NodeDecommissioned {
		t.Fatalf("node 6 = %+v", n)
	}
}

func TestDecommissionNode_Guards(t *testing.T) {
	f := newFixture(t).withCluster()
	st := f.createStream("s", 1, 2, 3)
	f.recordRecovery(st, 2, 2, 3, 5)
	f.refused(DecommissionNode{Node: 2}, ResultNodeInUse) // a follower
	f.refused(DecommissionNode{Node: 1}, ResultNodeInUse) // the owner
	f.refused(DecommissionNode{Node: 5}, ResultNodeInUse) // proposed by the recovery
	f.refused(DecommissionNode{Node: 40}, ResultNodeNotRegistered)
	f.mustApply(DecommissionNode{Node: 6})
	f.refused(DecommissionNode{Node: 6}, ResultNodeDecommissioned)
}

func TestCreateStream_FirstAssignmentAtEpochOne(t *testing.T) {
	f := newFixture(t).withCluster()
	f.mustApply(CreateStream{Name: "orders", Copies: 3, Policy: Policy{Kind: PolicyMajorityDurable},
		Owner: 2, Followers: []uint16{1, 3}, Stamped: Policy{Kind: PolicyLocalDurable}})
	st, ok := f.s.StreamByName("orders")
	if !ok || st.ID != 1 || st.Incarnation != 1 || st.Copies != 3 {
		t.Fatalf("stream = %+v, %v", st, ok)
	}
	if byID, _ := f.s.StreamByID(st.ID); byID != st {
		t.Fatalf("by id %+v, by name %+v", byID, st)
	}
	want := Assignment{Epoch: 1, Owner: 2, Followers: []uint16{1, 3}, Policy: Policy{Kind: PolicyLocalDurable}}
	if a := f.assignment(st); !reflect.DeepEqual(a, want) {
		t.Fatalf("assignment %+v, want %+v", a, want)
	}
	if s := f.starts(st); s.Version != 0 || len(s.List) != 0 {
		t.Fatalf("a new stream has starts %+v", s)
	}
	if _, ok := f.s.RecoveryOf(st.ID); ok {
		t.Fatal("a new stream has a recovery")
	}
	second := f.createStream("payments", 4, 5)
	if second.ID != 2 {
		t.Fatalf("second stream id %d, want 2", second.ID)
	}
	if got := f.s.Streams(); len(got) != 2 || got[0].ID != 1 || got[1].ID != 2 {
		t.Fatalf("Streams() = %+v", got)
	}
}

func TestCreateStream_Guards(t *testing.T) {
	f := newFixture(t).withCluster()
	f.createStream("orders", 1, 2, 3)
	majority := Policy{Kind: PolicyMajorityDurable}
	f.refused(CreateStream{Name: "orders", Copies: 1, Policy: majority, Owner: 4, Stamped: majority},
		ResultNameInUse)
	f.refused(CreateStream{Name: "other", Copies: 2, Policy: majority, Owner: 4, Followers: []uint16{40},
		Stamped: majority}, ResultNodeNotRegistered)
	f.mustApply(DecommissionNode{Node: 6})
	f.refused(CreateStream{Name: "other", Copies: 1, Policy: majority, Owner: 6, Stamped: majority},
		ResultNodeNotRegistered)
}

func TestCreateStream_RefusedWhenStreamIDsRunOut(t *testing.T) {
	f := newFixture(t).withCluster()
	f.s.nextStreamID = math.MaxUint64
	majority := Policy{Kind: PolicyMajorityDurable}
	f.refused(CreateStream{Name: "late", Copies: 1, Policy: majority, Owner: 1, Stamped: majority},
		ResultIDsExhausted)
}

// Spec 000, "Copies with a longer tail": history starts of a stream without an assignment are dropped,
// so a recreated stream does not inherit them. Its recovery goes with it too.
func TestDeleteStream_DropsStartsAndRecovery_RecreatedStreamInheritsNone(t *testing.T) {
	f := newFixture(t).withCluster()
	st := f.createStream("orders", 1, 2, 3)
	rec := f.recordRecovery(st, 2, 2, 3)
	f.mustApply(CommitRecovery{Stream: st.ID, Incarnation: 1, Recovery: rec.ID, ExpectedEpoch: 1,
		Owner: 2, RecordTail: 100, CursorTail: 7, Sealed: []uint16{2, 3}})
	f.recordRecovery(st, 3, 3)
	if s := f.starts(st); len(s.List) != 1 {
		t.Fatalf("starts before delete: %+v", s)
	}

	f.mustApply(DeleteStream{Stream: st.ID, Incarnation: 1})
	if _, ok := f.s.StreamByName("orders"); ok {
		t.Fatal("deleted stream still found by name")
	}
	if _, ok := f.s.Starts(st.ID); ok {
		t.Fatal("deleted stream still has starts")
	}
	if got := f.s.Recoveries(); len(got) != 0 {
		t.Fatalf("deleted stream's recovery still listed: %+v", got)
	}

	again := f.createStream("orders", 4, 5)
	if again.ID != st.ID || again.Incarnation != 2 {
		t.Fatalf("recreated stream %+v, want id %d incarnation 2", again, st.ID)
	}
	if s := f.starts(again); s.Version != 0 || len(s.List) != 0 {
		t.Fatalf("recreated stream inherited starts %+v", s)
	}
	if _, ok := f.s.LatestStart(again.ID); ok {
		t.Fatal("recreated stream inherited a latest start")
	}
	if _, ok := f.s.RecoveryOf(again.ID); ok {
		t.Fatal("recreated stream inherited a recovery")
	}
	if a := f.assignment(again); a.Epoch != 1 || a.Owner != 4 {
		t.Fatalf("recreated stream's assignment %+v", a)
	}
	if other := f.createStream("fresh", 1); other.ID != 2 {
		t.Fatalf("a new name reused id: %+v", other)
	}
}

func TestDeleteStream_Guards(t *testing.T) {
	f := newFixture(t).withCluster()
	st := f.createStream("orders", 1, 2, 3)
	f.refused(DeleteStream{Stream: st.ID + 1, Incarnation: 1}, ResultStreamNotFound)
	f.refused(DeleteStream{Stream: st.ID, Incarnation: 2}, ResultIncarnationMismatch)
	f.mustApply(DeleteStream{Stream: st.ID, Incarnation: 1})
	f.refused(DeleteStream{Stream: st.ID, Incarnation: 1}, ResultStreamNotFound)
	// An op for the first incarnation cannot touch the second.
	f.createStream("orders", 1, 2, 3)
	f.refused(DeleteStream{Stream: st.ID, Incarnation: 1}, ResultIncarnationMismatch)
}

// Spec 000, the change that commits without recovery: it keeps the owner and every follower and needs
// no more copies to confirm (W' <= W); that covers adding a replacement follower after a failover and
// moving from every copy to a majority.
func TestNeedsNoRecovery_Rule(t *testing.T) {
	local, majority := Policy{Kind: PolicyLocalDurable}, Policy{Kind: PolicyMajorityDurable}
	assign := func(p Policy, owner uint16, followers ...uint16) Assignment {
		return Assignment{Epoch: 1, Owner: owner, Followers: followers, Policy: p}
	}
	cases := []struct {
		name      string
		old, next Assignment
		ok        bool
	}{
		{"same set, same policy", assign(majority, 1, 2, 3), assign(majority, 1, 2, 3), true},
		{"replacement follower after failover (2 copies W=2 -> 3 copies W=2)",
			assign(majority, 1, 2), assign(majority, 1, 2, 3), true},
		{"every copy to a majority", assign(local, 1, 2, 3), assign(majority, 1, 2, 3), true},
		{"every copy to a majority with a follower added", assign(local, 1, 2, 3), assign(majority, 1, 2, 3, 4), true},
		{"unset policy (every copy) to a majority", assign(Policy{}, 1, 2, 3), assign(majority, 1, 2, 3), true},
		{"count capped at the set stays within W", assign(Policy{Kind: PolicyCountDurable, Count: 5}, 1, 2),
			assign(Policy{Kind: PolicyCountDurable, Count: 2}, 1, 2, 3), true},
		{"majority to every copy needs more to confirm", assign(majority, 1, 2, 3), assign(local, 1, 2, 3), false},
		{"4th copy on majority moves W from 2 to 3", assign(majority, 1, 2, 3), assign(majority, 1, 2, 3, 4), false},
		{"follower added under every-copy policy", assign(local, 1, 2), assign(local, 1, 2, 3), false},
		{"owner changes", assign(majority, 1, 2, 3), assign(majority, 2, 1, 3), false},
		{"follower dropped", assign(majority, 1, 2, 3), assign(majority, 1, 2), false},
		{"follower swapped", assign(majority, 1, 2, 3), assign(majority, 1, 2, 4), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			why, ok := NeedsNoRecovery(c.old, c.next)
			if ok != c.ok {
				t.Fatalf("NeedsNoRecovery = %v (%s), want %v", ok, why, c.ok)
			}
			if !ok && why == "" {
				t.Fatal("refusal without a reason")
			}
		})
	}
}

func TestSetAssignment_AddsFollowerAtNextEpochWithoutStart(t *testing.T) {
	f := newFixture(t).withCluster()
	st := f.createStream("s", 1, 2) // 2 copies, majority: W = 2
	f.mustApply(SetAssignment{Stream: st.ID, Incarnation: 1, ExpectedEpoch: 1, Owner: 1,
		Followers: []uint16{2, 5}, Policy: Policy{Kind: PolicyMajorityDurable}})
	want := Assignment{Epoch: 2, Owner: 1, Followers: []uint16{2, 5}, Policy: Policy{Kind: PolicyMajorityDurable}}
	if a := f.assignment(st); !reflect.DeepEqual(a, want) {
		t.Fatalf("assignment %+v, want %+v", a, want)
	}
	if s := f.starts(st); s.Version != 0 || len(s.List) != 0 {
		t.Fatalf("a change without recovery recorded starts %+v", s)
	}
}

func TestSetAssignment_Guards(t *testing.T) {
	f := newFixture(t).withCluster()
	st := f.createStream("s", 1, 2, 3)
	majority := Policy{Kind: PolicyMajorityDurable}
	set := func(epoch uint32, owner uint16, followers ...uint16) SetAssignment {
		return SetAssignment{Stream: st.ID, Incarnation: 1, ExpectedEpoch: epoch, Owner: owner,
			Followers: followers, Policy: majority}
	}
	f.refused(set(2, 1, 2, 3), ResultEpochMismatch)
	f.refused(set(1, 2, 1, 3), ResultNeedsRecovery)
	f.refused(set(1, 1, 2), ResultNeedsRecovery)
	f.refused(set(1, 1, 2, 3, 4), ResultNeedsRecovery)
	f.refused(set(1, 1, 2, 3, 40), ResultNodeNotRegistered)
	stale := set(1, 1, 2, 3)
	stale.Incarnation = 9
	f.refused(stale, ResultIncarnationMismatch)

	rec := f.recordRecovery(st, 2, 2, 3)
	f.refused(set(1, 1, 2, 3), ResultRecoveryRecorded)
	f.mustApply(WithdrawRecovery{Stream: st.ID, Incarnation: 1, Recovery: rec.ID})
	f.refused(set(1, 1, 2, 3), ResultRecoveryRecorded)
}

func TestApply_MalformedOpChangesNothing(t *testing.T) {
	f := newFixture(t).withCluster()
	f.createStream("s", 1, 2, 3)
	before := f.s.Digest()
	cases := [][]byte{nil, {opVersion}, {opVersion + 1, byte(OpRegisterNode)}, {opVersion, 200},
		{opVersion, byte(OpRegisterNode), 1, 0, 0}}
	for _, b := range cases {
		f.op++
		r := f.s.applyOp(b, f.op)
		if r.Code != ResultMalformed || r.Message == "" {
			t.Fatalf("%x: result %s, want malformed with a reason", b, r)
		}
	}
	if f.s.Digest() != before {
		t.Fatal("a malformed op changed the state")
	}
	if f.s.AppliedOp() != f.op {
		t.Fatalf("applied op %d, want %d", f.s.AppliedOp(), f.op)
	}
}

func TestApply_AppendsEncodedResult(t *testing.T) {
	s := NewState()
	buf := make([]byte, 0, 64)
	out := s.Apply(AppendOp(nil, RegisterNode{Node: 1, Address: "x:1"}), 1, buf)
	r, err := DecodeResult(out)
	if err != nil || r.Code != ResultOK || !strings.Contains(r.Message, "node 1") {
		t.Fatalf("result %+v, %v", r, err)
	}
	out = s.Apply([]byte{0xff}, 2, out[:0])
	if r, err := DecodeResult(out); err != nil || r.Code != ResultMalformed {
		t.Fatalf("result %+v, %v", r, err)
	}
}

func TestApply_PanicsWhenOpNumberDoesNotGrow(t *testing.T) {
	s := NewState()
	s.Apply(AppendOp(nil, RegisterNode{Node: 1, Address: "x:1"}), 5, nil)
	defer func() {
		if recover() == nil {
			t.Fatal("Apply took op 5 twice")
		}
	}()
	s.Apply(AppendOp(nil, RegisterNode{Node: 2, Address: "x:2"}), 5, nil)
}

func TestResultCodec(t *testing.T) {
	long := Result{Code: ResultTooFewSealed, Message: strings.Repeat("m", ResultMessageBytesMax+10)}
	for _, r := range []Result{{Code: ResultOK}, {Code: ResultOKNoStart, Message: "no start"}, long} {
		got, err := DecodeResult(AppendResult(nil, r))
		if err != nil {
			t.Fatal(err)
		}
		if got.Code != r.Code || !strings.HasPrefix(r.Message, got.Message) || len(got.Message) > ResultMessageBytesMax {
			t.Fatalf("round trip %s -> %s", r, got)
		}
	}
	b := AppendResult(nil, Result{Code: ResultOK, Message: "abc"})
	for n := range len(b) {
		if _, err := DecodeResult(b[:n]); err == nil {
			t.Fatalf("a result cut to %d bytes decoded", n)
		}
	}
	if _, err := DecodeResult(append(b, 0)); err == nil {
		t.Fatal("a result with a trailing byte decoded")
	}
}

func TestNodes_ListedInIDOrder(t *testing.T) {
	f := newFixture(t)
	for _, id := range []uint16{9, 2, 5} {
		f.mustApply(RegisterNode{Node: id, Address: "h:1"})
	}
	var ids []uint16
	for _, n := range f.s.Nodes() {
		ids = append(ids, n.ID)
	}
	if !slices.Equal(ids, []uint16{2, 5, 9}) {
		t.Fatalf("Nodes() ids %v", ids)
	}
}

// Result codes travel in replies, so each has its own stable name.
func TestResultCode_EveryCodeNamedOnce(t *testing.T) {
	seen := map[string]ResultCode{}
	for c := ResultCode(0); c < 255; c++ {
		name := c.String()
		if strings.HasPrefix(name, "result(") {
			continue
		}
		if other, dup := seen[name]; dup {
			t.Fatalf("codes %d and %d share the name %q", other, c, name)
		}
		seen[name] = c
	}
	if len(seen) != 22 {
		t.Fatalf("%d named codes, want 22", len(seen))
	}
}
