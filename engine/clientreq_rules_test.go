package engine

import (
	"encoding/binary"
	"strings"
	"testing"

	"github.com/ringstream/ringstream/wire"
)

// rawNameRequest is a create (copies and majority) or a name request (delete, lookup) for name, built
// by hand: wire's encoders refuse a name that breaks the rule, and a hostile client does not use them.
func rawNameRequest(c wire.Command, rid uint64, name string, copies uint8) []byte {
	h := wire.Header{Command: c, Cluster: nodeTestCluster}
	binary.LittleEndian.PutUint64(h.Area[:8], rid)
	if c == wire.CommandCreateStream {
		h.Area[8], h.Area[9] = copies, uint8(wire.PolicyMajority)
	}
	frame := wire.BeginFrame(nil, &h)
	frame = append(frame, name...)
	wire.EndFrame(frame, 0)
	return frame
}

// refusedWith sends frame and wants an error reply with code whose message states rule.
func (tc *testClient) refusedWith(what string, frame []byte, code wire.ErrorCode, rule string) {
	tc.t.Helper()
	tc.write(frame)
	h, body := tc.read()
	e := errorOf(tc.t, h, body)
	switch {
	case e == nil:
		tc.t.Errorf("%s: answered %s, want a refusal", what, h.Command)
	case e.Code != code:
		tc.t.Errorf("%s: code %d (%s), want %d", what, e.Code, e.Message, code)
	case !strings.Contains(string(e.Message), rule):
		tc.t.Errorf("%s: message %q does not state the rule %q", what, e.Message, rule)
	}
}

// TestNode_BadStreamNamesRefusedWithTheRuleAndEveryNodeStaysUp is issue 21's finding 1: a create of
// 'orders/eu' took the metadata primary down (an assertion on a name off the socket), and the client's
// retry took the next one. Now each name that breaks wire.StreamNameRule is refused with
// CodeBadStreamName and the rule's text by every node (the primary, and the backups that forward), for
// create, delete and lookup; a create of more copies than nodes is refused with CodeBadCopies; and the
// cluster still creates a stream afterwards on the same metadata primary.
func TestNode_BadStreamNamesRefusedWithTheRuleAndEveryNodeStaysUp(t *testing.T) {
	c := newTestCluster(t, "")
	c.waitRegistered()
	primary := uint16(0)
	for id, n := range c.nodes {
		if n.Meta().Status().Primary {
			primary = id
		}
	}
	view := c.nodes[primary].Meta().Status().View
	for _, id := range []uint16{1, 2, 3} {
		tc := dialNode(t, c.nodes[id].ClientAddr(), "")
		for _, name := range []string{"orders/eu", "a b/c", "naïve", ".", ".."} {
			tc.refusedWith("create "+name, rawNameRequest(wire.CommandCreateStream, tc.next(), name, 3),
				wire.CodeBadStreamName, wire.StreamNameRule)
			tc.refusedWith("delete "+name, rawNameRequest(wire.CommandDeleteStream, tc.next(), name, 0),
				wire.CodeBadStreamName, wire.StreamNameRule)
			tc.refusedWith("lookup "+name, rawNameRequest(wire.CommandLookupStream, tc.next(), name, 0),
				wire.CodeBadStreamName, wire.StreamNameRule)
		}
		tc.refusedWith("create x2 with 5 copies", rawNameRequest(wire.CommandCreateStream, tc.next(), "x2", 5),
			wire.CodeBadCopies, wire.CopiesRule)
	}
	tc := dialNode(t, c.nodes[2].ClientAddr(), "")
	if _, e := tc.create("orders-eu", 3); e != nil {
		t.Fatalf("create after the refusals: %+v", e)
	}
	for id, n := range c.nodes {
		if st := n.Meta().Status(); !st.Normal || st.View != view {
			t.Errorf("node %d: metadata status %+v, want normal in view %d (no primary lost)", id, st, view)
		}
	}
}
