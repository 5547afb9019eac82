package engine

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ringstream/ringstream/engine/metahost"
	"github.com/ringstream/ringstream/wire"
)

// TestNode_DataDirOfAnotherClusterOrNodeRefused: a data directory records its cluster and node at first
// boot; a node of another cluster, or another node id, is refused naming both ids, and a damaged
// identity file is refused as unreadable. Nothing is bound or opened.
func TestNode_DataDirOfAnotherClusterOrNodeRefused(t *testing.T) {
	dir := t.TempDir()
	if err := CheckIdentity(dir, 42, 1); err != nil {
		t.Fatal(err)
	}
	if err := CheckIdentity(dir, 42, 1); err != nil {
		t.Fatalf("the same identity again: %v", err)
	}
	for _, tc := range []struct {
		cluster uint64
		node    uint16
	}{{43, 1}, {42, 2}} {
		err := CheckIdentity(dir, tc.cluster, tc.node)
		if !errors.Is(err, ErrIdentity) {
			t.Fatalf("cluster %d node %d: %v, want ErrIdentity", tc.cluster, tc.node, err)
		}
		for _, want := range []string{"cluster 42 node 1", "this node is cluster " + itoa(tc.cluster) + " node " + itoa(uint64(tc.node))} {
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("error %q does not name %q", err, want)
			}
		}
	}
	if _, err := NewNode(nodeTestConfig(t, 2, dir, "", 50), quietLogger()); !errors.Is(err, ErrIdentity) {
		t.Fatalf("NewNode of node 2 on node 1's directory: %v", err)
	}
	// A node that cannot be built (its metadata directory was never formatted) records nothing, so a
	// corrected configuration is not refused for a mistyped first attempt.
	fresh := t.TempDir()
	if _, err := NewNode(nodeTestConfig(t, 1, fresh, "", 50), quietLogger()); !errors.Is(err, metahost.ErrUnformatted) {
		t.Fatalf("NewNode on an unformatted directory: %v", err)
	}
	if _, err := os.Stat(filepath.Join(fresh, IdentityFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("identity recorded by a node that did not start: %v", err)
	}
	b, err := os.ReadFile(filepath.Join(dir, IdentityFile))
	if err != nil {
		t.Fatal(err)
	}
	b[9] ^= 1
	if err := os.WriteFile(filepath.Join(dir, IdentityFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := CheckIdentity(dir, 42, 1); !errors.Is(err, ErrIdentityFile) || !errors.Is(err, ErrIdentity) {
		t.Fatalf("damaged identity: %v", err)
	}
}

func itoa(v uint64) string {
	if v == 0 {
		return "0"
	}
	var b []byte
	for ; v > 0; v /= 10 {
		b = append([]byte{byte('0' + v%10)}, b...)
	}
	return string(b)
}

// FuzzDecodeIdentity: the identity decoder never panics, and what it accepts encodes back the same.
func FuzzDecodeIdentity(f *testing.F) {
	f.Add(appendIdentity(nil, Identity{Cluster: 42, Node: 1}))
	f.Add([]byte("RSID"))
	f.Fuzz(func(t *testing.T, b []byte) {
		id, err := DecodeIdentity(b)
		if err != nil {
			return
		}
		if got := appendIdentity(nil, id); string(got) != string(b) {
			t.Fatalf("%x decoded to %+v, which encodes to %x", b, id, got)
		}
	})
}

// TestNode_BadInputAtTheClientEdge: each bad input is answered or closed on its own connection, and
// a well-behaved client of the same node is served after each: a wrong cluster secret (refused and
// counted), a request with a sound header and bad contents, a create of more copies than nodes, a
// frame past client.frame_bytes_max, a
// client that connects and sends nothing (closed after the handshake bound), a produce to a stream
// that does not exist, and a produce to a node that does not own the stream (CodeNotOwner naming
// the owner).
func TestNode_BadInputAtTheClientEdge(t *testing.T) {
	const secret = "a-cluster-secret-of-some-length"
	c := newTestCluster(t, secret)
	c.waitRegistered()
	n := c.nodes[2]
	good := dialNode(t, n.ClientAddr(), secret)
	served := func(what string) {
		t.Helper()
		if _, e := good.lookup("missing"); e == nil || e.Code != wire.CodeUnknownStream {
			t.Fatalf("after %s: the good client's lookup got %+v", what, e)
		}
	}

	// Wrong secret: the proof is refused with an error reply, counted, and the connection closes.
	bad := dialNode(t, n.ClientAddr(), "not-the-cluster-secret-at-all")
	h, body := bad.read()
	if e := errorOf(t, h, body); e == nil || e.Code != wire.CodeInvalidRequest {
		t.Fatalf("wrong secret: %s %+v", h.Command, e)
	}
	expectClosed(t, bad.c)
	var refused uint64
	for _, s := range n.Shards().Shards() {
		refused += s.Stats().Client.AuthRefused.Load()
	}
	if refused == 0 {
		t.Fatal("the wrong secret was not counted")
	}
	served("a wrong secret")

	// A create with 0 copies: a sound frame whose contents break the rules.
	hd := wire.Header{Command: wire.CommandCreateStream, Cluster: nodeTestCluster}
	hd.Area[0] = 99 // request id 99, copies 0
	frame := wire.BeginFrame(nil, &hd)
	frame = append(frame, "orders"...)
	wire.EndFrame(frame, 0)
	good.write(frame)
	h, body = good.read()
	if e := errorOf(t, h, body); e == nil || e.Code != wire.CodeBadCopies || e.RequestID != 99 ||
		!strings.Contains(string(e.Message), wire.CopiesRule) {
		t.Fatalf("create with 0 copies: %s %+v", h.Command, e)
	}
	served("a malformed request")

	// More copies than the cluster has nodes can never be placed: refused, not left to retry.
	if _, e := good.create("too-wide", 4); e == nil || e.Code != wire.CodeBadCopies ||
		!strings.Contains(string(e.Message), "a cluster of 3 nodes") {
		t.Fatalf("create with 4 copies on 3 nodes: %+v", e)
	}

	// A frame past frame_bytes_max: answered with its size and the limit, then the connection closes.
	big := dialNode(t, n.ClientAddr(), secret)
	batch := make([]byte, 9<<20)
	go func() { // the node closes the connection before it read the whole frame: the write may fail
		_, _ = big.c.Write(wire.AppendProduce(nil, wire.From{Cluster: nodeTestCluster}, &wire.Produce{RequestID: 5,
			Stream: 1, Count: 1, Batch: batch}))
	}()
	h, body = big.read()
	if e := errorOf(t, h, body); e == nil || !strings.Contains(string(e.Message), "limit") {
		t.Fatalf("oversized frame: %s %+v", h.Command, e)
	}
	expectClosed(t, big.c)
	served("an oversized frame")

	// A client that connects and sends nothing is closed after the handshake bound.
	silent, err := net.Dial("tcp", n.ClientAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	served("a silent client's connect")
	expectClosed(t, silent)
	served("a silent client's close")

	// A produce to a stream id nobody created: unknown on the metadata primary's node; a backup's node,
	// whose state may trail the primary's, sends the client to look it up.
	for _, node := range c.nodes {
		tc := dialNode(t, node.ClientAddr(), secret)
		rid := tc.next()
		tc.write(wire.AppendProduce(nil, wire.From{Cluster: nodeTestCluster}, &wire.Produce{RequestID: rid, Stream: 999,
			Count: 1, Batch: []byte("x")}))
		h, body = tc.read()
		e := errorOf(t, h, body)
		want := wire.CodeNotOwner
		if node.Meta().Status().Primary {
			want = wire.CodeUnknownStream
		}
		if e == nil || e.Code != want || e.Owner != 0 || e.RequestID != rid || e.Stream != 999 {
			t.Fatalf("produce to an unknown stream through node %d: %s %+v", node.ID(), h.Command, e)
		}
	}

	// A produce to a node that holds no copy: one copy, placed on the least loaded node.
	r, e := good.create("solo", 1)
	if e != nil {
		t.Fatalf("create: %+v", e)
	}
	owner, e := good.lookup("solo")
	if e != nil {
		t.Fatal(e)
	}
	other := c.nodes[owner.Owner%3+1]
	waitForTB(t, "the stream in the other node's metadata", func() bool { return len(other.Status().Streams) == 1 })
	oc := dialNode(t, other.ClientAddr(), secret)
	rid := oc.next()
	oc.write(wire.AppendProduce(nil, wire.From{Cluster: nodeTestCluster}, &wire.Produce{RequestID: rid, Stream: r.Stream,
		Count: 1, Batch: []byte("x")}))
	h, body = oc.read()
	if e := errorOf(t, h, body); e == nil || e.Code != wire.CodeNotOwner || e.Owner != owner.Owner || e.RequestID != rid {
		t.Fatalf("produce to node %d, owner %d: %s %+v", other.ID(), owner.Owner, h.Command, e)
	}
	served("a produce to a non-owner")
}

// expectClosed waits until the node closed c (a read ends with EOF or a reset), within waitBound.
func expectClosed(t *testing.T, c net.Conn) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(waitBound))
	buf := make([]byte, 4096)
	for {
		_, err := c.Read(buf)
		if err == nil {
			continue
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatal("the node did not close the connection")
		}
		if errors.Is(err, io.EOF) || strings.Contains(err.Error(), "reset") {
			return
		}
		t.Fatalf("read: %v", err)
	}
}

// TestNode_ShutdownSendsNoticeAndStopsInBoundedTime: a clean shutdown of one node tells the controller:
// with the eager failover grace at 400 ms (the most the view change timeout allows at 2 ms ticks) and
// the liveness timeout at 3 s, the controller counts the node lost before either (the notice, not its
// links closing); the node stops in bounded time.
func TestNode_ShutdownSendsNoticeAndStopsInBoundedTime(t *testing.T) {
	c := newTestClusterGrace(t, "", 400)
	c.waitRegistered()
	var primary *Node
	for _, n := range c.nodes {
		if n.Meta().Status().Primary {
			primary = n
		}
	}
	waitForTB(t, "heartbeats from every node", func() bool { return primary.Controller().Status().Stats.Heartbeats >= 9 })
	victim := c.nodes[primary.ID()%3+1]
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := victim.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("shutdown took %v", took)
	}
	waitForTB(t, "the victim lost at the controller", func() bool { return primary.Controller().Status().Stats.NodesLost == 1 })
	if took := time.Since(start); took >= 400*time.Millisecond {
		t.Fatalf("the node was lost after %v, not before the 400 ms grace: no shutdown notice", took)
	}
	if st := victim.Status(); st.State != "stopped" {
		t.Fatalf("victim state %q", st.State)
	}
}

// TestNode_ShutdownAnswersEveryProduceInFlight: 64 produces pipelined to the owner, then its node shut
// down cleanly at once: every produce the node read is answered exactly once before the connection
// closes, confirmed at its own offset or refused as unavailable (the node was shutting down); the
// confirmed ones are a prefix of the requests, and nothing else was appended (the followers hold
// exactly those), so a produce left unanswered was never taken.
func TestNode_ShutdownAnswersEveryProduceInFlight(t *testing.T) {
	c := newTestCluster(t, "")
	c.waitRegistered()
	tc := dialNode(t, c.nodes[1].ClientAddr(), "")
	created, look := tc.createLooked("draining")
	var e *wire.ErrorReply
	owner := c.nodes[look.Owner]
	oc := dialNode(t, owner.ClientAddr(), "")
	waitForTB(t, "the owner's copy serving", func() bool {
		_, e = oc.produce(created.Stream, 0, 0, 1, []byte("warm-up"))
		return e == nil
	})
	const produces = 64
	var frames []byte
	for i := range uint64(produces) {
		frames = wire.AppendProduce(frames, wire.From{Cluster: nodeTestCluster}, &wire.Produce{RequestID: 1000 + i,
			Stream: created.Stream, ProducerID: 1, Sequence: 1 + i, Count: 1, Batch: []byte("r")})
	}
	oc.write(frames)
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		done <- owner.Shutdown(ctx)
	}()
	answered := map[uint64]bool{}
	confirmed, refused, lastConfirmed := 0, 0, uint64(0)
	for range produces {
		h, body, ok := oc.tryRead()
		if !ok {
			break // the node closed the connection: the rest it never read
		}
		if e := errorOf(t, h, body); e != nil {
			if e.Code != wire.CodeUnavailable || answered[e.RequestID] {
				t.Fatalf("refusal %+v", e)
			}
			answered[e.RequestID] = true
			refused++
			continue
		}
		r, err := wire.DecodeProduceReply(&h, body)
		if err != nil || answered[r.RequestID] || r.BaseOffset != r.RequestID-1000+1 {
			t.Fatalf("reply %+v: %v", r, err)
		}
		answered[r.RequestID] = true
		confirmed++
		lastConfirmed = max(lastConfirmed, r.RequestID)
	}
	// Replies may arrive in any order (refusals at once, confirmations when the followers answer), but
	// the shutdown refuses every produce after the first it refused: the confirmed ones come first.
	if confirmed > 0 && lastConfirmed != 1000+uint64(confirmed)-1 {
		t.Fatalf("%d confirmed, the last of them request %d: not a prefix", confirmed, lastConfirmed)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	expectClosed(t, oc.c)
	t.Logf("%d produces confirmed, %d refused by the shutdown, %d never read", confirmed, refused,
		produces-confirmed-refused)
	// Nothing but the confirmed produces was appended: the followers hold the warm-up and those.
	for _, n := range c.nodes {
		if n == owner {
			continue
		}
		waitForTB(t, "the follower's tail", func() bool {
			st := n.Status()
			return len(st.Copies) == 1 && st.Copies[0].Durable >= uint64(1+confirmed)
		})
		if got := n.Status().Copies[0].Durable; got != uint64(1+confirmed) {
			t.Fatalf("node %d holds %d records, want the warm-up and %d confirmed", n.ID(), got, confirmed)
		}
	}
}

// TestNode_StopInEveryState: Stop of a node never started, Stop twice, Shutdown after Stop, and Start
// after Stop all return at once, and the node reports itself stopped.
func TestNode_StopInEveryState(t *testing.T) {
	dir := t.TempDir()
	if err := metahost.Format(metahost.FormatConfig{Dir: filepath.Join(dir, "meta"), Cluster: nodeTestCluster, Node: 1}); err != nil {
		t.Fatal(err)
	}
	n, err := NewNode(nodeTestConfig(t, 1, dir, "", 50), quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := n.Stop(ctx); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if err := n.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown after Stop: %v", err)
	}
	if err := n.Start(ctx); !errors.Is(err, ErrNodeState) {
		t.Fatalf("Start after Stop: %v", err)
	}
	if st := n.Status(); st.State != "stopped" {
		t.Fatalf("state %q", st.State)
	}
}
