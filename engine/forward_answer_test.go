package engine

import (
	"io"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ringstream/ringstream/ring"
	"github.com/ringstream/ringstream/wire"
)

// connectGate wraps a node's rings: while blocked reports true for a destination port, connects to it
// fail with ECONNREFUSED (the peer is not listening yet), and the link retries as it would.
type connectGate struct {
	ring.Ring
	blocked func(port int) bool
}

type refusedConnect struct{ h ring.Handler }

func (r refusedConnect) Complete(c ring.Completion) {
	c.Res, c.Op = -int32(unix.ECONNREFUSED), ring.OpConnect
	r.h.Complete(c)
}

func (g connectGate) Connect(h ring.Handler, tag uint64, fd int, sa unix.Sockaddr, fl ring.Flags) error {
	if in4, ok := sa.(*unix.SockaddrInet4); ok && g.blocked(in4.Port) {
		return g.Ring.Nop(refusedConnect{h}, tag, fl)
	}
	return g.Ring.Connect(h, tag, fd, sa, fl)
}

// A backup forwards a metadata request over its own link to the primary while the primary's link back
// is not up yet (links are one per direction: after a start or a reconnect one side can be up before
// the other). The primary sends its answer again until the link is up, instead of dropping it and
// leaving the client to wait out MetaRequestTimeout (3 s here) for CodeUnavailable.
func TestForward_AnswerWaitsForTheLinkBack(t *testing.T) {
	var closed atomic.Bool
	closed.Store(true)
	var node2Port atomic.Int32 // 0 until the cluster is built: node 1 then connects nowhere
	blockedToNode2 := func(port int) bool {
		p := node2Port.Load()
		return closed.Load() && (p == 0 || port == int(p))
	}
	c := newTestClusterOpts(t, 3, "", 50, func(id uint16) NodeOptions {
		o := NodeOptions{DrainTimeout: 50 * time.Millisecond, MetaRequestTimeout: 3 * time.Second}
		if id == 1 {
			o.WrapRing = func(_ int, r ring.Ring) ring.Ring { return connectGate{Ring: r, blocked: blockedToNode2} }
		}
		return o
	}, "commit_heartbeat_timeout = 5000", "commit_idle_heartbeat_interval = 500", "commit_idle_heartbeat_timeout = 10000")
	n1, n2 := c.nodes[1], c.nodes[2]
	node2Port.Store(int32(n2.PeerAddr().Port()))
	linkUp := func(from *Node, to uint16) bool {
		for _, l := range from.Shards().Status() {
			if l.Peer == to && l.Up {
				return true
			}
		}
		return false
	}
	waitForTB(t, "node 1 primary, node 2 a backup in its view, node 2's link to it up", func() bool {
		p, b := n1.Meta().Status(), n2.Meta().Status()
		return p.Primary && p.Normal && b.Normal && b.View == p.View && linkUp(n2, 1)
	})
	if linkUp(n1, 2) {
		t.Fatal("node 1's link to node 2 came up through the gate")
	}
	tc := dialNode(t, n2.ClientAddr(), "")
	tc.write(wire.AppendListStreams(nil, wire.From{Cluster: nodeTestCluster}, &wire.ListStreams{RequestID: 7, Limit: 10}))
	type reply struct {
		h    wire.Header
		body []byte
	}
	replies := make(chan reply, 1)
	go func() {
		_ = tc.c.SetReadDeadline(time.Now().Add(waitBound))
		buf := make([]byte, wire.HeaderSize)
		if _, err := io.ReadFull(tc.c, buf); err != nil {
			close(replies)
			return
		}
		h, err := wire.ParseHeader(buf)
		if err != nil {
			close(replies)
			return
		}
		body := make([]byte, h.BodySize)
		if _, err := io.ReadFull(tc.c, body); err != nil {
			close(replies)
			return
		}
		replies <- reply{h, body}
	}()
	waitForTB(t, "node 1 sending its answer again", func() bool {
		select {
		case r, ok := <-replies:
			t.Fatalf("answered before node 1's link to node 2 was up (%v): command %d (node 2: %+v)", ok, r.h.Command,
				n2.Meta().Status())
		default:
		}
		v, _ := strconv.ParseFloat(metricLine(t, n1, "ringstream_meta_forward_replies_retried_total"), 64)
		return v >= 1
	})
	closed.Store(false)
	r, ok := <-replies
	if !ok {
		t.Fatal("no answer: the connection closed")
	}
	h, body := r.h, r.body
	if e := errorOf(t, h, body); e != nil {
		t.Fatalf("the forwarded list was answered %d: %s", e.Code, e.Message)
	}
	if h.Command != wire.CommandListStreamsReply {
		t.Fatalf("answered with command %d, want a list-streams reply", h.Command)
	}
}
