package engine

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringstream/ringstream/wire"
)

// Whole-node fuzz targets: bytes from a client after its handshake, from an authenticated peer, and
// admin HTTP requests, each fed to a real three-node cluster in this process (real rings, disks and
// loopback sockets). After every input the node must still answer, and a reference stream, whose
// name no input can guess, must still take and confirm a produce. A panic anywhere in the node ends
// the fuzz run. `go test` runs the seeds in testdata/fuzz; `go test -fuzz FuzzNode_X` explores.

// fuzzCluster is the cluster one fuzz target runs against, started once per process.
type fuzzCluster struct {
	c       *testCluster
	node    *Node // the node every input reaches
	good    *testClient
	owner   *testClient // a connection to the reference stream's owner
	stream  uint64
	seq     uint64 // the reference producer's last sequence
	rid     uint64 // request ids of the checks
	inputs  uint64
	produce sync.Mutex
}

// referenceStream is the stream that must keep serving: no seed names it, and a fuzzer that built
// its name byte by byte would still have to delete it through a sound frame.
const referenceStream = "reference-8d1e4f0b7a2c"

func newFuzzCluster(f *testing.F) *fuzzCluster {
	f.Helper()
	c := newTestCluster(f, "")
	c.waitRegistered()
	fc := &fuzzCluster{c: c, node: c.nodes[1], good: dialNode(f, c.nodes[1].ClientAddr(), "")}
	created, look := fc.good.createLooked(referenceStream)
	fc.stream = created.Stream
	fc.owner = dialNode(f, netip.MustParseAddrPort(string(look.OwnerAddr)), "")
	waitForTB(f, "the reference stream serving", func() bool {
		fc.seq++
		_, e := fc.owner.produce(fc.stream, 1, fc.seq, 1, []byte("x"))
		if e != nil && e.Code != wire.CodeUnavailable && e.Code != wire.CodeNotYet && e.Code != wire.CodeNotOwner {
			f.Fatalf("produce: %v %s", e.Code, e.Message)
		}
		return e == nil
	})
	return fc
}

// produceEvery is how often (in inputs) the reference stream must confirm a produce: each one waits
// for fsyncs on three nodes, which on a loaded disk would take most of a fuzz run's time. Every input
// is followed by a lookup.
const produceEvery = 16

// stillServes fails t unless the node answers a lookup and, every produceEvery inputs (and after
// every data request), the reference stream confirms a produce. answered says the node already
// answered a lookup sent behind the input on the input's own connection: that is the lookup, and
// the one on the good connection is skipped but every produceEvery inputs.
func (fc *fuzzCluster) stillServes(t *testing.T, data, answered bool) {
	t.Helper()
	fc.produce.Lock()
	defer fc.produce.Unlock()
	fc.inputs++
	due := fc.inputs%produceEvery == 0
	if !answered || due {
		fc.lookupAnswered(t)
	}
	if !data && !due {
		return
	}
	fc.seq++
	fc.rid++
	h, body := roundTrip(t, fc.owner.c, "the reference produce", wire.AppendProduce(nil, wire.From{Cluster: nodeTestCluster},
		&wire.Produce{RequestID: fc.rid, Stream: fc.stream, ProducerID: 1, Sequence: fc.seq, Count: 1, Batch: []byte("x")}))
	if e := errorOf(t, h, body); e != nil {
		t.Fatalf("produce to the reference stream after the input: %v %s", e.Code, e.Message)
	}
}

// lookupAnswered fails t unless the node answers a lookup of the reference stream.
func (fc *fuzzCluster) lookupAnswered(t *testing.T) {
	t.Helper()
	fc.rid++
	h, body := roundTrip(t, fc.good.c, "the reference lookup", wire.AppendLookupStream(nil, wire.From{Cluster: nodeTestCluster},
		&wire.LookupStream{RequestID: fc.rid, Name: []byte(referenceStream)}))
	if e := errorOf(t, h, body); e != nil {
		t.Fatalf("lookup of the reference stream after the input: %v %s", e.Code, e.Message)
	}
}

// roundTrip writes req on c and reads one reply within fuzzAnswerBound.
func roundTrip(t *testing.T, c net.Conn, what string, req []byte) (wire.Header, []byte) {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(fuzzAnswerBound))
	defer c.SetDeadline(time.Time{})
	if _, err := c.Write(req); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	head := make([]byte, wire.HeaderSize)
	if _, err := io.ReadFull(c, head); err != nil {
		t.Fatalf("%s: no answer: %v", what, err)
	}
	h, err := wire.ParseHeader(head)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	frame := append(head, make([]byte, h.BodySize)...)
	if _, err := io.ReadFull(c, frame[wire.HeaderSize:]); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	h, body, err := wire.ParseFrame(frame)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return h, body
}

// fuzzDial connects to the node's client listener and runs the handshake, within fuzzAnswerBound.
func fuzzDial(t *testing.T, addr netip.AddrPort) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr.String(), fuzzAnswerBound)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	hello := wire.ClientHello{RequestID: 1, Cluster: nodeTestCluster, Revision: wire.Revision}
	h, body := roundTrip(t, c, "the handshake", wire.AppendClientHello(nil, &hello))
	if _, err := wire.DecodeClientChallenge(&h, body); err != nil {
		t.Fatalf("challenge: %v (%s)", err, h.Command)
	}
	if _, err := c.Write(wire.AppendClientProof(nil, nodeTestCluster, &wire.ClientProof{RequestID: 2})); err != nil {
		t.Fatal(err)
	}
	return c
}

// fuzzFrame builds a frame with sound checksums from the fuzzer's fields, so that inputs reach the
// decoders and handlers behind the header checks; corrupt bit 0 flips a body byte after the checksum
// (the body check), bit 1 sends the fields' bytes raw instead (the header check).
func fuzzFrame(cmd uint16, group uint64, incarnation uint32, sender uint16, entries uint32, area, body []byte, corrupt uint8) []byte {
	if corrupt&2 != 0 {
		return append(append([]byte(nil), area...), body...)
	}
	c := wire.Command(cmd)
	if !c.Known() {
		return append(append([]byte(nil), area...), body...)
	}
	h := wire.Header{Command: c, Cluster: nodeTestCluster, Group: group, Incarnation: incarnation, Sender: sender}
	if c.NodeLevel() {
		h.Group, h.Incarnation = 0, 0
	}
	if !c.Client() && h.Sender == 0 {
		h.Sender = 3
	}
	copy(h.Area[:], area)
	body = body[:min(len(body), 1<<20)]
	frame := append(wire.BeginFrame(nil, &h), body...)
	wire.EndFrame(frame, entries)
	if corrupt&1 != 0 && len(body) > 0 {
		frame[wire.HeaderSize] ^= 0x5a
	}
	return frame
}

// fuzzAnswerBound bounds each wait for the node in one input (the dial, the answer, the reference
// produce): the fuzz worker gives up on an input after 10 s without saying why, so a slow answer must
// fail first, with the step that waited.
const fuzzAnswerBound = 3 * time.Second

// answeredOrClosed sends a lookup behind the input on c and reads until its reply, or until the node
// closes c: either way the node has dealt with the input. It reports whether the lookup was answered.
func answeredOrClosed(t *testing.T, c net.Conn) bool {
	t.Helper()
	const rid = 1<<63 + 12345
	_ = c.SetWriteDeadline(time.Now().Add(fuzzAnswerBound))
	if _, err := c.Write(wire.AppendLookupStream(nil, wire.From{Cluster: nodeTestCluster},
		&wire.LookupStream{RequestID: rid, Name: []byte(referenceStream)})); err != nil {
		return false // closed already
	}
	_ = c.SetReadDeadline(time.Now().Add(fuzzAnswerBound))
	head := make([]byte, wire.HeaderSize)
	for {
		if _, err := io.ReadFull(c, head); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatal("the node neither answered nor closed the connection")
			}
			return false
		}
		h, err := wire.ParseHeader(head)
		if err != nil {
			t.Fatalf("the node sent a bad header: %v", err)
		}
		body := make([]byte, h.BodySize)
		if _, err := io.ReadFull(c, body); err != nil {
			return false
		}
		if h.Command == wire.CommandLookupStreamReply || h.Command == wire.CommandErrorReply {
			if r, err := wire.DecodeLookupStreamReply(&h, body); err == nil && r.RequestID == rid {
				return true
			}
			if e, err := wire.DecodeErrorReply(&h, body); err == nil && e.RequestID == rid {
				return false // an error answer: the lookup on the good connection checks again
			}
		}
	}
}

// FuzzNode_ClientFrames: arbitrary frames from a client after a good handshake.
func FuzzNode_ClientFrames(f *testing.F) {
	for _, s := range clientSeeds() {
		f.Add(s.cmd, s.group, s.inc, uint16(0), s.entries, s.area, s.body, s.corrupt)
	}
	fc := newFuzzCluster(f)
	f.Fuzz(func(t *testing.T, cmd uint16, group uint64, inc uint32, sender uint16, entries uint32, area, body []byte, corrupt uint8) {
		c := fuzzDial(t, fc.node.ClientAddr())
		defer c.Close()
		_ = c.SetWriteDeadline(time.Now().Add(fuzzAnswerBound))
		answered := false
		if _, err := c.Write(fuzzFrame(cmd, group, inc, sender, entries, area, body, corrupt)); err == nil {
			answered = answeredOrClosed(t, c)
		}
		k := wire.Command(cmd)
		fc.stillServes(t, k == wire.CommandProduce || k == wire.CommandFetch || k == wire.CommandCommitCursor, answered)
	})
}

type frameSeed struct {
	cmd     uint16
	group   uint64
	inc     uint32
	entries uint32
	area    []byte
	body    []byte
	corrupt uint8
}

// clientSeeds are a sound frame of each client request, a few broken ones, and non-requests.
func clientSeeds() []frameSeed {
	from := wire.From{Cluster: nodeTestCluster}
	frames := [][]byte{
		wire.AppendCreateStream(nil, from, &wire.CreateStream{RequestID: 1, Name: []byte("seed"), Copies: 3, Policy: wire.PolicyMajority}),
		wire.AppendDeleteStream(nil, from, &wire.StreamNameRequest{RequestID: 2, Name: []byte("seed")}),
		wire.AppendListStreams(nil, from, &wire.ListStreams{RequestID: 3, Limit: 10}),
		wire.AppendLookupStream(nil, from, &wire.LookupStream{RequestID: 4, Name: []byte("seed")}),
		wire.AppendProduce(nil, from, &wire.Produce{RequestID: 5, Stream: 1, ProducerID: 9, Sequence: 1, Count: 1, Batch: []byte("x")}),
		wire.AppendFetch(nil, from, &wire.Fetch{RequestID: 6, Stream: 1, BytesMax: 1 << 20, WaitMs: 1}),
		wire.AppendCommitCursor(nil, from, &wire.CursorRequest{RequestID: 7, Stream: 1, Consumer: []byte("c"), Offset: 5}),
		wire.AppendGetCursor(nil, from, &wire.CursorRequest{RequestID: 8, Stream: 1, Consumer: []byte("c")}),
		wire.AppendListCursors(nil, from, &wire.ListCursors{RequestID: 10, Stream: 1, From: []byte("c"), Limit: 10}),
		wire.AppendDeleteCursor(nil, from, &wire.CursorRequest{RequestID: 11, Stream: 1, Consumer: []byte("c")}),
		wire.AppendClientHello(nil, &wire.ClientHello{RequestID: 9, Cluster: nodeTestCluster, Revision: wire.Revision}),
	}
	var seeds []frameSeed
	for i, fr := range frames {
		h, body, err := wire.ParseFrame(fr)
		if err != nil {
			panic(err)
		}
		seeds = append(seeds, frameSeed{cmd: uint16(h.Command), group: h.Group, inc: h.Incarnation, entries: h.EntryCount,
			area: append([]byte(nil), h.Area[:]...), body: append([]byte(nil), body...), corrupt: uint8(i % 2 * (i % 3))})
	}
	seeds = append(seeds, frameSeed{cmd: 0xffff, area: []byte("garbage"), body: bytes.Repeat([]byte{0xff}, 300), corrupt: 2})
	return seeds
}

// FuzzNode_PeerFrames: arbitrary frames from a peer that passed the handshake (node 3's id, a second
// link). A frame whose header fails closes the link; others are checked by their handlers; the node
// never panics and keeps serving its clients.
func FuzzNode_PeerFrames(f *testing.F) {
	for _, s := range peerSeeds() {
		f.Add(s.cmd, s.group, s.inc, uint16(3), s.entries, s.area, s.body, s.corrupt)
	}
	fc := newFuzzCluster(f)
	f.Fuzz(func(t *testing.T, cmd uint16, group uint64, inc uint32, sender uint16, entries uint32, area, body []byte, corrupt uint8) {
		c := dialPeer(t, fc.node.PeerAddr(), 3)
		defer c.Close()
		if sender == 0 {
			sender = 3
		}
		_ = c.SetWriteDeadline(time.Now().Add(fuzzAnswerBound))
		_, _ = c.Write(fuzzFrame(cmd, group, inc, sender, entries, area, body, corrupt))
		// The link only receives. Closing the write side ends it once the node has read the frame
		// (a receive of 0 bytes closes a link), so the close we wait for follows the frame's handling.
		_ = c.(*net.TCPConn).CloseWrite()
		_ = c.SetReadDeadline(time.Now().Add(fuzzAnswerBound))
		if _, err := io.Copy(io.Discard, c); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatal("the node kept a peer link open after its end")
			}
		}
		fc.stillServesPeer(t)
	})
}

// stillServesPeer is stillServes for forged peer frames: a forged protocol message from an
// authenticated peer may delay a stream (the cluster is not Byzantine-tolerant), so only the node's
// own answer is required, and a produce that is refused must be refused with a code.
func (fc *fuzzCluster) stillServesPeer(t *testing.T) {
	t.Helper()
	fc.produce.Lock()
	defer fc.produce.Unlock()
	fc.lookupAnswered(t)
}

// dialPeer connects to a node's peer listener as node id (no cluster secret) and reads its answer.
func dialPeer(t *testing.T, addr netip.AddrPort, id uint16) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr.String(), fuzzAnswerBound)
	if err != nil {
		t.Fatal(err)
	}
	hs := wire.Handshake{Node: id, Cluster: nodeTestCluster, Revision: wire.Revision, Shard: 1, ShardCount: 2}
	if _, err := c.Write(wire.AppendHandshake(nil, hs)); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(fuzzAnswerBound))
	if _, err := io.ReadFull(c, make([]byte, wire.HeaderSize)); err != nil {
		t.Fatalf("the node's handshake: %v", err)
	}
	return c
}

// peerSeeds are node frames: a Commit batch, a node heartbeat, VSR messages, data frames.
func peerSeeds() []frameSeed {
	seeds := []frameSeed{
		{cmd: uint16(wire.CommandCommit), entries: 1, body: make([]byte, wire.CommitEntrySize)},
		{cmd: uint16(wire.CommandCommitReply), entries: 1, body: make([]byte, wire.CommitReplyEntrySize)},
		{cmd: uint16(wire.CommandHandshake)},
	}
	for c := uint16(1); c < 128; c++ {
		if cmd := wire.Command(c); cmd.Known() && !cmd.Client() {
			seeds = append(seeds, frameSeed{cmd: c, group: 1, area: []byte{1, 0, 0, 0, 2}, body: []byte("seed-body"), corrupt: uint8(c % 2)})
		}
	}
	return seeds
}

// FuzzNode_AdminHTTP: arbitrary admin requests (method, path and query, body) to the node's admin
// handler. Each is answered with a status below 500 but for the node's own unavailability (503),
// and the node keeps serving.
func FuzzNode_AdminHTTP(f *testing.F) {
	for _, s := range []struct{ method, target, body string }{
		{"GET", "/v1/status", ""},
		{"GET", "/v1/attention", ""},
		{"GET", "/metrics", ""},
		{"POST", "/v1/recovery/accept-loss?stream=orders&owner=2", ""},
		{"POST", "/v1/recovery/withdraw?stream=orders", `{"x":1}`},
		{"POST", "/v1/recovery/accept-loss?stream=&owner=99999999", ""},
		{"GET", "/debug/pprof/cmdline", ""},
		{"GET", "/debug/pprof/heap?debug=1", ""},
		{"DELETE", "/v1/status", ""},
		{"GET", "/v1/../v1/status?%zz", ""},
	} {
		f.Add(s.method, s.target, []byte(s.body))
	}
	fc := newFuzzCluster(f)
	handler := fc.node.admin.Handler()
	f.Fuzz(func(t *testing.T, method, target string, body []byte) {
		if !strings.HasPrefix(target, "/") || strings.ContainsAny(target, " \r\n\t") || method == "" ||
			strings.ContainsAny(method, " \r\n\t/") || strings.HasPrefix(target, "/debug/pprof/profile") ||
			strings.HasPrefix(target, "/debug/pprof/trace") {
			return // not a request line net/http would hand a handler; or a profile that runs for seconds
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, method, "http://admin"+target, bytes.NewReader(body))
		if err != nil {
			return
		}
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, req)
		if rec.Code >= 500 && rec.Code != http.StatusServiceUnavailable {
			t.Fatalf("%s %s: status %d: %s", method, target, rec.Code, rec.Body.String())
		}
		// The handler returned: the admin path served. The data path is checked every produceEvery
		// inputs (an admin request that wedged a shard is found within that many).
		fc.stillServes(t, false, true)
	})
}
