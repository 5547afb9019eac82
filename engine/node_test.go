package engine

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/ringstream/ringstream/engine/config"
	"github.com/ringstream/ringstream/engine/metahost"
	"github.com/ringstream/ringstream/wire"
)

const nodeTestCluster = 42

// quietLogger drops the nodes' logs; RINGSTREAM_TEST_LOG=1 shows them.
func quietLogger() *slog.Logger {
	if os.Getenv("RINGSTREAM_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// nodeTestConfig is node id's configuration in a three-node test cluster: every listener on
// 127.0.0.1 port 0 (the real ports are handed round with SetPeer before Start), two shards, 2 ms
// ticks. The peers' addresses in the file are placeholders.
func nodeTestConfig(t testing.TB, id uint16, dir, secret string, graceMs int, clusterExtra ...string) *config.Config {
	t.Helper()
	return nodeTestConfigN(t, 3, id, dir, secret, graceMs, clusterExtra...)
}

// nodeTestConfigN is nodeTestConfig in a cluster of count nodes (replicas 1, 2 and 3).
func nodeTestConfigN(t testing.TB, count int, id uint16, dir, secret string, graceMs int, clusterExtra ...string) *config.Config {
	t.Helper()
	var peers []string
	for i := 1; i <= count; i++ {
		peers = append(peers, fmt.Sprintf("%d = \"127.0.0.1:%d\"", i, i))
	}
	toml := fmt.Sprintf(`
[node]
id = %d
data_dir = %q
listen = "127.0.0.1:0"
[cluster]
id = %d
peers = { %s }
secret = %q
tick_ms = 2
eager_failover_grace = %d
%s
[shards]
count = 2
[storage]
segment_bytes = 8388608
[admin]
listen = "127.0.0.1:0"
[client]
listen = "127.0.0.1:0"
`, id, dir, nodeTestCluster, strings.Join(peers, ", "), secret, graceMs, strings.Join(clusterExtra, "\n"))
	cfg, err := config.Parse([]byte(toml), dir)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// testCluster is three (or more) engine.Nodes on loopback with real disks.
type testCluster struct {
	t     testing.TB
	root  string
	nodes map[uint16]*Node
}

// newTestCluster formats three nodes' metadata directories (a cluster being created), builds the
// nodes, hands them each other's addresses and starts them. Cleanup stops them.
func newTestCluster(t testing.TB, secret string) *testCluster {
	return newTestClusterGrace(t, secret, 50)
}

// newTestClusterGrace is newTestCluster with eager_failover_grace in milliseconds and more [cluster]
// lines.
func newTestClusterGrace(t testing.TB, secret string, graceMs int, clusterExtra ...string) *testCluster {
	t.Helper()
	return newTestClusterN(t, 3, secret, graceMs, clusterExtra...)
}

// newTestClusterN is newTestClusterGrace with count nodes; nodes 1 to 3 are the metadata replicas.
func newTestClusterN(t testing.TB, count int, secret string, graceMs int, clusterExtra ...string) *testCluster {
	t.Helper()
	return newTestClusterOpts(t, count, secret, graceMs, nil, clusterExtra...)
}

// newTestClusterOpts is newTestClusterN with each node's NodeOptions from opts (nil: the defaults).
func newTestClusterOpts(t testing.TB, count int, secret string, graceMs int, opts func(id uint16) NodeOptions,
	clusterExtra ...string) *testCluster {
	t.Helper()
	c := &testCluster{t: t, root: t.TempDir(), nodes: map[uint16]*Node{}}
	for id := uint16(1); id <= uint16(count); id++ {
		dir := c.dir(id)
		if id <= 3 {
			if err := metahost.Format(metahost.FormatConfig{Dir: filepath.Join(dir, "meta"), Cluster: nodeTestCluster, Node: id,
				Replica: uint8(id - 1)}); err != nil {
				t.Fatal(err)
			}
		}
		o := NodeOptions{DrainTimeout: 50 * time.Millisecond}
		if opts != nil {
			o = opts(id)
		}
		n, err := NewNodeWithOptions(nodeTestConfigN(t, count, id, dir, secret, graceMs, clusterExtra...), quietLogger(), o)
		if err != nil {
			t.Fatal(err)
		}
		c.nodes[id] = n
	}
	t.Cleanup(c.stop)
	for _, n := range c.nodes {
		for _, o := range c.nodes {
			if err := n.SetPeer(o.ID(), o.PeerAddr(), o.ClientAddr()); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, n := range c.nodes {
		if err := n.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

func (c *testCluster) dir(id uint16) string { return filepath.Join(c.root, fmt.Sprint(id)) }

func (c *testCluster) stop() {
	for _, n := range c.nodes {
		n.Kill()
	}
}

// waitRegistered waits until the metadata primary registered every node and every node's links to
// the others are up: a metadata request forwarded over a link not up yet is answered CodeUnavailable
// (the client retries; the tests that send one request and expect its answer do not).
func (c *testCluster) waitRegistered() {
	c.t.Helper()
	waitForTB(c.t, "every link up", func() bool {
		for _, n := range c.nodes {
			for _, l := range n.Shards().Status() {
				if !l.Up {
					return false
				}
			}
		}
		return true
	})
	waitForTB(c.t, "every node registered", func() bool {
		for _, n := range c.nodes {
			if n.Meta() != nil && n.Meta().Status().Primary {
				st := n.Status()
				return len(st.Heartbeats.Nodes) == len(c.nodes)
			}
		}
		return false
	})
}

func waitForTB(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitBound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never reached: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// testClient is a bare client connection speaking the wire protocol.
type testClient struct {
	t   testing.TB
	c   net.Conn
	rid uint64
}

// dialNode connects to addr and runs the client handshake with secret.
func dialNode(t testing.TB, addr netip.AddrPort, secret string) *testClient {
	t.Helper()
	c, err := net.Dial("tcp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	tc := &testClient{t: t, c: c, rid: 10}
	hello := wire.ClientHello{RequestID: 1, Cluster: nodeTestCluster, Revision: wire.Revision}
	if secret != "" {
		_, _ = rand.Read(hello.Nonce[:])
	}
	tc.write(wire.AppendClientHello(nil, &hello))
	h, body := tc.read()
	ch, err := wire.DecodeClientChallenge(&h, body)
	if err != nil {
		t.Fatalf("challenge: %v (%s)", err, h.Command)
	}
	p := wire.ClientProof{RequestID: 2}
	if secret != "" {
		p.Proof = wire.ClientHelloProof([]byte(secret), &hello, &ch)
	}
	tc.write(wire.AppendClientProof(nil, nodeTestCluster, &p))
	return tc
}

func (tc *testClient) write(b []byte) {
	tc.t.Helper()
	if _, err := tc.c.Write(b); err != nil {
		tc.t.Fatal(err)
	}
}

// read reads one frame, checked.
func (tc *testClient) read() (wire.Header, []byte) {
	tc.t.Helper()
	_ = tc.c.SetReadDeadline(time.Now().Add(waitBound))
	buf := make([]byte, wire.HeaderSize)
	if _, err := io.ReadFull(tc.c, buf); err != nil {
		tc.t.Fatalf("reading a reply: %v", err)
	}
	h, err := wire.ParseHeader(buf)
	if err != nil {
		tc.t.Fatal(err)
	}
	buf = append(buf, make([]byte, h.BodySize)...)
	if _, err := io.ReadFull(tc.c, buf[wire.HeaderSize:]); err != nil {
		tc.t.Fatal(err)
	}
	h, body, err := wire.ParseFrame(buf)
	if err != nil {
		tc.t.Fatal(err)
	}
	return h, body
}

// tryRead reads one frame, checked; false when the node closed the connection first.
func (tc *testClient) tryRead() (wire.Header, []byte, bool) {
	tc.t.Helper()
	_ = tc.c.SetReadDeadline(time.Now().Add(waitBound))
	buf := make([]byte, wire.HeaderSize)
	if _, err := io.ReadFull(tc.c, buf); err != nil {
		if errors.Is(err, io.EOF) || strings.Contains(err.Error(), "reset") {
			return wire.Header{}, nil, false
		}
		tc.t.Fatalf("reading a reply: %v", err)
	}
	h, err := wire.ParseHeader(buf)
	if err != nil {
		tc.t.Fatal(err)
	}
	buf = append(buf, make([]byte, h.BodySize)...)
	if _, err := io.ReadFull(tc.c, buf[wire.HeaderSize:]); err != nil {
		tc.t.Fatal(err)
	}
	h, body, err := wire.ParseFrame(buf)
	if err != nil {
		tc.t.Fatal(err)
	}
	return h, body, true
}

// next is the next request id.
func (tc *testClient) next() uint64 { tc.rid++; return tc.rid }

// errorOf decodes h as an error reply, or returns nil.
func errorOf(t testing.TB, h wire.Header, body []byte) *wire.ErrorReply {
	t.Helper()
	if h.Command != wire.CommandErrorReply {
		return nil
	}
	e, err := wire.DecodeErrorReply(&h, body)
	if err != nil {
		t.Fatal(err)
	}
	return &e
}

// create asks for stream name with copies copies (majority) and returns the reply or the error.
func (tc *testClient) create(name string, copies uint8) (wire.StreamIDReply, *wire.ErrorReply) {
	tc.t.Helper()
	rid := tc.next()
	tc.write(wire.AppendCreateStream(nil, wire.From{Cluster: nodeTestCluster}, &wire.CreateStream{RequestID: rid,
		Name: []byte(name), Copies: copies, Policy: wire.PolicyMajority}))
	h, body := tc.read()
	if e := errorOf(tc.t, h, body); e != nil {
		if e.RequestID != rid {
			tc.t.Fatalf("error reply for request %d, want %d", e.RequestID, rid)
		}
		return wire.StreamIDReply{}, e
	}
	r, err := wire.DecodeCreateStreamReply(&h, body)
	if err != nil {
		tc.t.Fatal(err)
	}
	if r.RequestID != rid {
		tc.t.Fatalf("reply for request %d, want %d", r.RequestID, rid)
	}
	return r, nil
}

// createLooked creates a 3-copy stream name and looks up its owner, failing the test on a refusal.
func (tc *testClient) createLooked(name string) (wire.StreamIDReply, wire.LookupStreamReply) {
	tc.t.Helper()
	created, e := tc.create(name, 3)
	if e != nil {
		tc.t.Fatalf("create %s: %+v", name, e)
	}
	look, e := tc.lookup(name)
	if e != nil {
		tc.t.Fatalf("lookup %s: %+v", name, e)
	}
	return created, look
}

// lookup asks who owns name.
func (tc *testClient) lookup(name string) (wire.LookupStreamReply, *wire.ErrorReply) {
	tc.t.Helper()
	rid := tc.next()
	tc.write(wire.AppendLookupStream(nil, wire.From{Cluster: nodeTestCluster}, &wire.LookupStream{RequestID: rid,
		Name: []byte(name)}))
	h, body := tc.read()
	if e := errorOf(tc.t, h, body); e != nil {
		return wire.LookupStreamReply{}, e
	}
	r, err := wire.DecodeLookupStreamReply(&h, body)
	if err != nil || r.RequestID != rid {
		tc.t.Fatalf("lookup reply %+v: %v (want request %d)", r, err, rid)
	}
	r.OwnerAddr = append([]byte(nil), r.OwnerAddr...)
	return r, nil
}

// TestNode_ThreeNodesCreateStreamThroughAnyNode: three nodes with real rings, disks and loopback
// links elect a metadata primary, which registers every node at its client address; a stream created
// through a client connection to each node in turn (the node that is not the primary forwards the
// request over its peer link) commits once, and a second create of the name is refused as existing.
// Lookup and list answer from every node.
func TestNode_ThreeNodesCreateStreamThroughAnyNode(t *testing.T) {
	c := newTestCluster(t, "")
	c.waitRegistered()
	var created wire.StreamIDReply
	for id := uint16(1); id <= 3; id++ {
		tc := dialNode(t, c.nodes[id].ClientAddr(), "")
		name := fmt.Sprintf("orders-%d", id)
		r, e := tc.create(name, 3)
		if e != nil {
			t.Fatalf("create %s through node %d: %v %s", name, id, e.Code, e.Message)
		}
		if r.Stream != uint64(id) || r.Incarnation != 1 {
			t.Fatalf("create through node %d: stream %d incarnation %d", id, r.Stream, r.Incarnation)
		}
		created = r
		if _, e := tc.create(name, 3); e == nil || e.Code != wire.CodeStreamExists {
			t.Fatalf("second create of %s through node %d: %+v", name, id, e)
		}
	}
	forwards := 0.0
	for _, n := range c.nodes {
		var m dto.Metric
		if err := n.clients.Metrics().Forwards().Write(&m); err != nil {
			t.Fatal(err)
		}
		forwards += m.GetCounter().GetValue()
	}
	if forwards < 4 { // two nodes are not the primary: a create and its repeat each
		t.Fatalf("%v requests forwarded to the metadata primary, want at least 4", forwards)
	}
	for id := uint16(1); id <= 3; id++ {
		tc := dialNode(t, c.nodes[id].ClientAddr(), "")
		r, e := tc.lookup("orders-3")
		if e != nil {
			t.Fatalf("lookup through node %d: %v %s", id, e.Code, e.Message)
		}
		want := c.nodes[r.Owner].ClientAddr().String()
		if r.Stream != created.Stream || r.Epoch != 1 || string(r.OwnerAddr) != want {
			t.Fatalf("lookup through node %d: %+v, owner address %q want %q", id, r, r.OwnerAddr, want)
		}
		if _, e := tc.lookup("missing"); e == nil || e.Code != wire.CodeUnknownStream {
			t.Fatalf("lookup of a missing stream through node %d: %+v", id, e)
		}
	}
}

// TestNode_MetadataRequestsFollowANewPrimary: the node of the metadata primary is killed; a create
// sent to a survivor is answered CodeUnavailable or CodeNotYet while the group changes view (never lost, never
// applied twice), then commits through the new primary, forwarded or served locally, on the two
// nodes it reaches: never on the killed one.
func TestNode_MetadataRequestsFollowANewPrimary(t *testing.T) {
	c := newTestCluster(t, "")
	c.waitRegistered()
	var old *Node
	for _, n := range c.nodes {
		if n.Meta().Status().Primary {
			old = n
		}
	}
	old.Kill()
	survivor := c.nodes[old.ID()%3+1]
	tc := dialNode(t, survivor.ClientAddr(), "")
	unavailable := 0
	var created wire.StreamIDReply
	waitForTB(t, "a create through the new primary", func() bool {
		r, e := tc.create("after-failover", 2)
		if e != nil {
			if e.Code != wire.CodeUnavailable && e.Code != wire.CodeNotYet {
				t.Fatalf("create: %v %s", e.Code, e.Message)
			}
			unavailable++
			return false
		}
		created = r
		return true
	})
	t.Logf("created stream %d after %d unavailable answers", created.Stream, unavailable)
	if _, e := tc.create("after-failover", 2); e == nil || e.Code != wire.CodeStreamExists {
		t.Fatalf("second create: %+v", e)
	}
	var primary *Node
	for _, n := range c.nodes {
		if n != old && n.Meta().Status().Primary {
			primary = n
		}
	}
	if primary == nil || primary.Meta().Status().View == 0 {
		t.Fatal("no new primary")
	}
	for _, s := range primary.Status().Streams {
		if s.Owner == old.ID() || slices.Contains(s.Followers, old.ID()) {
			t.Fatalf("stream placed on the killed node %d: %+v", old.ID(), s)
		}
	}
}

// TestNode_NodeWithoutReplicaForwardsAndServes: node 4 holds no metadata replica. Its metadata
// requests reach the primary through a backup replica (its guess): a second hop, which only a request
// from a node without a replica may take; node 4 is registered, placed, and opens its copies; a produce for a stream it holds no copy of
// sends the client to look the owner up; its status lists its copies without a metadata part.
func TestNode_NodeWithoutReplicaForwardsAndServes(t *testing.T) {
	c := newTestClusterN(t, 4, "", 50)
	c.waitRegistered()
	n4 := c.nodes[4]
	if n4.Meta() != nil || n4.Controller() != nil {
		t.Fatal("node 4 holds a metadata replica")
	}
	// Node 4 forwards to a backup replica: the backup forwards once more, to its primary.
	var backup *Node
	for id := uint16(1); id <= 3; id++ {
		if !c.nodes[id].Meta().Status().Primary {
			backup = c.nodes[id]
		}
	}
	n4.metaSvc.ForwardTo(int(backup.ID() - 1))
	tc := dialNode(t, n4.ClientAddr(), "")
	for i := range 4 {
		name := fmt.Sprintf("s%d", i)
		if _, e := tc.create(name, 4); e != nil {
			t.Fatalf("create %s through node 4: %v %s", name, e.Code, e.Message)
		}
		if _, e := tc.lookup(name); e != nil {
			t.Fatalf("lookup %s through node 4: %v %s", name, e.Code, e.Message)
		}
	}
	var m dto.Metric
	if err := backup.clients.Metrics().Forwards().Write(&m); err != nil || m.GetCounter().GetValue() < 8 {
		t.Fatalf("backup node %d forwarded %v requests, want the 8 node 4 sent it: %v", backup.ID(), m.GetCounter().GetValue(), err)
	}
	waitForTB(t, "node 4 holding its four copies", func() bool { return len(n4.Status().Copies) == 4 })
	st := n4.Status()
	if st.Meta != nil || st.Controller != nil || len(st.Streams) != 0 {
		t.Fatalf("node 4 status: %+v", st)
	}
	rid := tc.next()
	tc.write(wire.AppendProduce(nil, wire.From{Cluster: nodeTestCluster}, &wire.Produce{RequestID: rid, Stream: 999,
		Count: 1, Batch: []byte("x")}))
	h, body := tc.read()
	if e := errorOf(t, h, body); e == nil || e.Code != wire.CodeNotOwner || e.Owner != 0 {
		t.Fatalf("produce to a stream node 4 holds no copy of: %s %+v", h.Command, e)
	}
}
