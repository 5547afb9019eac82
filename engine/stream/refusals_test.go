package stream_test

import (
	"testing"

	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/engine/stream"
	"github.com/ringstream/ringstream/wire"
)

func produceMsg(mod func(p *wire.Produce)) stream.Message {
	m := stream.Message{Kind: stream.KindProduce, Client: 4}
	m.Produce = wire.Produce{RequestID: 11, Stream: testStream, Incarnation: testIncarnation, Count: 1, Batch: payload(0, 10)}
	if mod != nil {
		mod(&m.Produce)
	}
	return m
}

// TestRefusals: each refusal answers with its own code (and the owner's node for not-the-owner).
func TestRefusals(t *testing.T) {
	a := assignment(1, 1, 2, 3)
	for _, tc := range []struct {
		name  string
		node  func(t *testing.T) *node
		msg   stream.Message
		code  wire.ErrorCode
		owner uint16
	}{
		{"not the owner", func(t *testing.T) *node { return newNode(t, testConfig(2), a, nil, nil, nil) },
			produceMsg(nil), wire.CodeNotOwner, 1},
		{"unknown stream", ownerNode(a), produceMsg(func(p *wire.Produce) { p.Stream = 8 }), wire.CodeUnknownStream, 0},
		{"newer incarnation", ownerNode(a), produceMsg(func(p *wire.Produce) { p.Incarnation = testIncarnation + 1 }), wire.CodeUnknownStream, 0},
		{"stale incarnation", ownerNode(a), produceMsg(func(p *wire.Produce) { p.Incarnation = testIncarnation - 1 }), wire.CodeStaleIncarnation, 0},
		{"batch too large", ownerNode(a), produceMsg(func(p *wire.Produce) { p.Batch = payload(0, 64<<10+1) }), wire.CodeBatchTooLarge, 0},
		{"sequence gap", func(t *testing.T) *node {
			n := ownerNode(a)(t)
			m := produceMsg(func(p *wire.Produce) { p.ProducerID, p.Sequence = 5, 1 })
			n.c.Step(&m)
			n.ready(t)
			n.takeReplies()
			return n
		}, produceMsg(func(p *wire.Produce) { p.ProducerID, p.Sequence = 5, 3 }), wire.CodeSequenceGap, 0},
		{"copy sealed", func(t *testing.T) *node {
			n := ownerNode(a)(t)
			n.c.Sealed(2)
			return n
		}, produceMsg(nil), wire.CodeFenced, 0},
		{"fenced at open", func(t *testing.T) *node {
			c, _ := stream.New(testConfig(1), a, nil)
			c.OpenDone(stream.OpenState{Fence: 2})
			return &node{id: 1, c: c}
		}, produceMsg(nil), wire.CodeFenced, 0},
		{"log failed", func(t *testing.T) *node {
			n := ownerNode(a)(t)
			n.c.LogFailed(wire.LogRecords)
			return n
		}, produceMsg(nil), wire.CodeLogFailed, 0},
		{"opening", func(t *testing.T) *node {
			c, _ := stream.New(testConfig(1), a, nil)
			return &node{id: 1, c: c}
		}, produceMsg(nil), wire.CodeUnavailable, 0},
		{"owner restarted within its epoch", func(t *testing.T) *node {
			return newNode(t, testConfig(1), a, nil, nil, []wire.LogEpoch{{Epoch: 1}})
		}, produceMsg(nil), wire.CodeUnavailable, 0},
		{"owner lost its quorum (R24)", func(t *testing.T) *node {
			n := ownerNode(a)(t)
			n.c.QuorumLost()
			return n
		}, produceMsg(nil), wire.CodeUnavailable, 0},
		{"fetch at an owner that lost its quorum (R24)", func(t *testing.T) *node {
			n := ownerNode(a)(t)
			n.c.QuorumLost()
			return n
		}, stream.Message{Kind: stream.KindFetch, Client: 4, Fetch: wire.Fetch{RequestID: 11, Stream: testStream,
			Incarnation: testIncarnation}}, wire.CodeUnavailable, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := tc.node(t)
			n.c.Step(&tc.msg)
			fx := n.c.Ready()
			if len(fx.Appends) != 0 {
				t.Fatalf("refused produce appended")
			}
			if len(fx.Replies) != 1 || fx.Replies[0].Kind != stream.ReplyError {
				t.Fatalf("replies %+v", fx.Replies)
			}
			e := fx.Replies[0].Error
			if e.Code != tc.code || e.Owner != tc.owner || e.RequestID != 11 || len(e.Message) == 0 || fx.Replies[0].Client != 4 {
				t.Fatalf("refusal %+v (%q), want code %d owner %d", e, e.Message, tc.code, tc.owner)
			}
			// The refusal encodes as a valid error reply.
			frame := wire.AppendErrorReply(nil, wire.From{Cluster: 1, Node: 1}, &e)
			h, body, err := wire.ParseFrame(frame)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := wire.DecodeErrorReply(&h, body); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// ownerNode opens node 1 as the owner at a.
func ownerNode(a meta.Assignment) func(t *testing.T) *node {
	return func(t *testing.T) *node { return newNode(t, testConfig(1), a, nil, nil, nil) }
}

// Produces waiting for confirmation when the copy is sealed or its log fails are refused, not left
// hanging.
func TestRefusals_WaitingProducesAnswered(t *testing.T) {
	for _, tc := range []struct {
		name string
		do   func(c *stream.Copy)
		code wire.ErrorCode
	}{
		{"sealed", func(c *stream.Copy) { c.Sealed(2) }, wire.CodeFenced},
		{"log failed", func(c *stream.Copy) { c.LogFailed(wire.LogRecords) }, wire.CodeLogFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t, testConfig(1), assignment(1, 1, 2, 3), nil, nil, nil)
			m := produceMsg(nil)
			n.c.Step(&m)
			n.ready(t)
			if len(n.replies) != 0 {
				t.Fatalf("answered without followers: %+v", n.replies)
			}
			tc.do(n.c)
			n.ready(t)
			if len(n.replies) != 1 || n.replies[0].Error.Code != tc.code {
				t.Fatalf("replies %+v", n.replies)
			}
		})
	}
}

// TestR24_OwnerServesAgainOnceQuorumHeard: an owner that lost its quorum refuses a produce; once it
// heard a quorum again it appends the same produce.
func TestR24_OwnerServesAgainOnceQuorumHeard(t *testing.T) {
	n := ownerNode(assignment(1, 1, 2, 3))(t)
	n.c.QuorumLost()
	if !n.c.LostQuorum() {
		t.Fatal("owner does not report its lost quorum")
	}
	m := produceMsg(nil)
	n.c.Step(&m)
	if fx := n.c.Ready(); len(fx.Appends) != 0 || len(fx.Replies) != 1 || fx.Replies[0].Error.Code != wire.CodeUnavailable {
		t.Fatalf("produce at an owner without quorum: appends %d, replies %+v", len(fx.Appends), fx.Replies)
	}
	n.c.QuorumHeard()
	m = produceMsg(nil)
	n.c.Step(&m)
	if fx := n.c.Ready(); len(fx.Appends) != 1 {
		t.Fatalf("produce after the quorum came back: appends %d, replies %+v", len(fx.Appends), fx.Replies)
	}
}
