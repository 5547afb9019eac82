package clientreq

import (
	"context"
	"errors"
	"testing"

	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/wire"
)

// TestWirePolicyCapsTheCountAtTheCopies: a stream whose metadata carries a count above its copies
// (allowed by meta, and by the wire before PolicyRule bounded it) is listed with the count capped, so
// the list reply's encoder, which asserts wire's rule, never sees it.
func TestWirePolicyCapsTheCountAtTheCopies(t *testing.T) {
	p, n := wirePolicy(meta.Policy{Kind: meta.PolicyCountDurable, Count: 200}, 3)
	if p != wire.PolicyCount || n != 3 {
		t.Fatalf("count 200 of 3 copies: %d %d, want count 3", p, n)
	}
	info := wire.StreamInfo{Stream: 1, Incarnation: 1, Copies: 3, Policy: p, ConfirmCount: n, Name: []byte("s")}
	wire.AppendListStreamsReply(nil, wire.From{Cluster: 1, Node: 1}, &wire.ListStreamsReply{RequestID: 1}, []wire.StreamInfo{info})
	if p, n := wirePolicy(meta.Policy{Kind: meta.PolicyCountAccepted, Count: 2}, 3); p != wire.PolicyCount || n != 2 {
		t.Fatalf("count 2 of 3: %d %d", p, n)
	}
}

// TestProposeOpRefusesAnInvalidOp: an op that breaks a rule is refused by ProposeOp with the rule's
// error before anything is proposed (it used to reach AppendOp's assertion and take the primary down).
func TestProposeOpRefusesAnInvalidOp(t *testing.T) {
	m := &Service{} // no node: the op must be refused before the service touches it
	_, err := m.ProposeOp(context.Background(), meta.CreateStream{Name: "orders/eu", Copies: 3,
		Policy: meta.Policy{Kind: meta.PolicyMajorityDurable}, Owner: 1, Followers: []uint16{2, 3}})
	if !errors.Is(err, meta.ErrOpInvalid) || wire.CodeOf(err) != wire.CodeBadStreamName {
		t.Fatalf("ProposeOp of a bad name: %v (code %d)", err, wire.CodeOf(err))
	}
}
