package client

import (
	"crypto/rand"
	"encoding/binary"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/ringstream/ringstream/wire"
)

const testCluster = 0x5eed

// fakeNode is an in-test TCP peer that speaks the client side of wire: it runs the node's half of the
// client handshake and answers each request with what handle returns. Test helper only: the real node
// is engine's.
type fakeNode struct {
	t      testing.TB
	id     uint16
	secret []byte
	ln     net.Listener
	addr   string
	handle func(h *wire.Header, body []byte) (reply []byte, drop bool)
	quit   chan struct{} // closed by stop: long polls end
	// raw, if set, serves each connection after the handshake instead of handle (allocation tests).
	raw func(c net.Conn)

	mu       sync.Mutex
	conns    map[net.Conn]struct{}
	requests map[wire.Command]int
	wg       sync.WaitGroup
}

func startFake(t testing.TB, id uint16, handle func(h *wire.Header, body []byte) ([]byte, bool)) *fakeNode {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n := &fakeNode{t: t, id: id, ln: ln, addr: ln.Addr().String(), handle: handle,
		conns: make(map[net.Conn]struct{}), requests: make(map[wire.Command]int), quit: make(chan struct{})}
	n.wg.Add(1)
	go n.accept()
	t.Cleanup(n.stop)
	return n
}

func (n *fakeNode) from() wire.From { return wire.From{Cluster: testCluster, Node: n.id} }

func (n *fakeNode) stop() {
	select {
	case <-n.quit:
		return
	default:
		close(n.quit)
	}
	_ = n.ln.Close()
	n.mu.Lock()
	for c := range n.conns {
		_ = c.Close()
	}
	n.mu.Unlock()
	n.wg.Wait()
}

// dropAll closes every connection the node has open (a crashed node's sockets).
func (n *fakeNode) dropAll() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for c := range n.conns {
		_ = c.Close()
	}
}

func (n *fakeNode) count(c wire.Command) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.requests[c]
}

func (n *fakeNode) accept() {
	defer n.wg.Done()
	for {
		c, err := n.ln.Accept()
		if err != nil {
			return
		}
		n.mu.Lock()
		n.conns[c] = struct{}{}
		n.mu.Unlock()
		n.wg.Add(1)
		go n.serve(c)
	}
}

func readFrame(r io.Reader) (wire.Header, []byte, error) {
	hdr := make([]byte, wire.HeaderSize)
	if _, err := io.ReadFull(r, hdr); err != nil {
		return wire.Header{}, nil, err
	}
	h, err := wire.ParseHeader(hdr)
	if err != nil {
		return wire.Header{}, nil, err
	}
	buf := make([]byte, wire.HeaderSize+int(h.BodySize))
	copy(buf, hdr)
	if _, err := io.ReadFull(r, buf[wire.HeaderSize:]); err != nil {
		return wire.Header{}, nil, err
	}
	return wire.ParseFrame(buf)
}

func (n *fakeNode) serve(c net.Conn) {
	defer n.wg.Done()
	defer func() {
		n.mu.Lock()
		delete(n.conns, c)
		n.mu.Unlock()
		_ = c.Close()
	}()
	if !n.handshake(c) {
		return
	}
	if n.raw != nil {
		n.raw(c)
		return
	}
	var wmu sync.Mutex
	var reqs sync.WaitGroup
	defer reqs.Wait()
	for {
		h, body, err := readFrame(c)
		if err != nil {
			return
		}
		n.mu.Lock()
		n.requests[h.Command]++
		n.mu.Unlock()
		serve := func() {
			reply, drop := n.handle(&h, body)
			if drop {
				_ = c.Close()
				return
			}
			if reply != nil {
				wmu.Lock()
				_, _ = c.Write(reply)
				wmu.Unlock()
			}
		}
		if h.Command != wire.CommandFetch {
			serve() // in arrival order, as a node appends one connection's produces
			continue
		}
		reqs.Add(1)
		go func() { // a long-polled fetch holds up nothing else
			defer reqs.Done()
			serve()
		}()
	}
}

func (n *fakeNode) handshake(c net.Conn) bool {
	h, body, err := readFrame(c)
	if err != nil {
		return false
	}
	hello, err := wire.DecodeClientHello(&h, body)
	if err == nil {
		err = hello.Check(testCluster, n.secret)
	}
	if err != nil {
		_, _ = c.Write(n.refuse(&h, wire.CodeInvalidRequest, err.Error()))
		return false
	}
	ch := wire.ClientChallenge{RequestID: hello.RequestID, Cluster: testCluster, Revision: wire.Revision, Node: n.id}
	if len(n.secret) != 0 {
		_, _ = rand.Read(ch.Nonce[:])
		ch.Proof = wire.ClientChallengeProof(n.secret, &hello, &ch)
	}
	if _, err := c.Write(wire.AppendClientChallenge(nil, &ch)); err != nil {
		return false
	}
	h, body, err = readFrame(c)
	if err != nil {
		return false
	}
	p, err := wire.DecodeClientProof(&h, body)
	if err == nil {
		err = wire.VerifyClientProof(n.secret, &hello, &ch, &p)
	}
	if err != nil {
		_, _ = c.Write(n.refuse(&h, wire.CodeInvalidRequest, err.Error()))
		return false
	}
	return true
}

// refuse builds an error reply to request h.
func (n *fakeNode) refuse(h *wire.Header, code wire.ErrorCode, msg string) []byte {
	return wire.AppendErrorReply(nil, n.from(), &wire.ErrorReply{RequestID: reqID(h), Stream: h.Group, Code: code,
		Message: []byte(msg)})
}

func reqID(h *wire.Header) uint64 { return binary.LittleEndian.Uint64(h.Area[:8]) }

// lookupReply answers a lookup with stream 7 owned by owner at addr (owner 0: none).
func (n *fakeNode) lookupReply(h *wire.Header, owner uint16, addr string) []byte {
	return wire.AppendLookupStreamReply(nil, n.from(), &wire.LookupStreamReply{RequestID: reqID(h), Stream: 7,
		Incarnation: 1, Epoch: 1, Owner: owner, OwnerAddr: []byte(addr)})
}

// appendTestBatch encodes one FormatValues batch in the nodes' format (segment's), as an owner stores it.
func appendTestBatch(dst []byte, base uint64, count uint32, codec Codec, pid, seq uint64, payload []byte) []byte {
	return appendTestBatchAt(dst, base, count, codec, FormatValues, pid, seq, 0, payload)
}

// appendTestBatchAt is appendTestBatch with a record format and an append time (unix ms).
func appendTestBatchAt(dst []byte, base uint64, count uint32, codec Codec, format Format, pid, seq uint64, ts int64,
	payload []byte) []byte {
	le := binary.LittleEndian
	start := len(dst)
	dst = append(dst, make([]byte, batchHeaderSize)...)
	b := dst[start:]
	le.PutUint32(b[8:], batchMagic)
	le.PutUint16(b[12:], uint16(format))
	b[14] = uint8(codec)
	le.PutUint64(b[16:], xxhash.Sum64(payload))
	le.PutUint64(b[24:], base)
	le.PutUint32(b[32:], count)
	le.PutUint32(b[36:], uint32(len(payload)))
	le.PutUint64(b[40:], 1)
	le.PutUint64(b[48:], pid)
	le.PutUint64(b[56:], seq)
	le.PutUint64(b[64:], uint64(ts))
	le.PutUint64(b[72:], uint64(ts))
	le.PutUint64(b[0:], xxhash.Sum64(b[8:batchHeaderSize]))
	return append(dst, payload...)
}

// fakeStream is a toy owner of stream 7: a log of batches in the nodes' format, a producer table that
// answers a retried batch from it, long-polled fetches and cursors.
type fakeStream struct {
	node *fakeNode

	mu       sync.Mutex
	grew     chan struct{} // closed and replaced on each append
	log      []byte
	bases    []uint64 // each batch's base offset and start in log
	starts   []int
	tail     uint64
	lastSeq  map[uint64]uint64
	batchAt  map[[2]uint64]uint64 // (pid, seq) -> base
	countOf  map[[2]uint64]uint32
	cursors  map[string]uint64
	produces []wire.Produce // every produce request, as received (Batch copied)
	// dropAfterAppend closes the connection instead of answering the next n produces it appended.
	dropAfterAppend int
	// overloadAt refuses the produce with this sequence once with CodeOverloaded (0: never).
	overloadAt uint64
	// now is the append time of a batch, unix ms (nil: the clock).
	now func() int64
}

func newFakeStream(n *fakeNode) *fakeStream {
	return &fakeStream{node: n, grew: make(chan struct{}), lastSeq: make(map[uint64]uint64),
		batchAt: make(map[[2]uint64]uint64), countOf: make(map[[2]uint64]uint32), cursors: make(map[string]uint64)}
}

func (s *fakeStream) handle(h *wire.Header, body []byte) ([]byte, bool) {
	n := s.node
	switch h.Command {
	case wire.CommandProduce:
		m, err := wire.DecodeProduce(h, body)
		if err != nil {
			return n.refuse(h, wire.CodeInvalidRequest, err.Error()), false
		}
		return s.produce(h, m)
	case wire.CommandFetch:
		m, err := wire.DecodeFetch(h, body)
		if err != nil {
			return n.refuse(h, wire.CodeInvalidRequest, err.Error()), false
		}
		return s.fetch(m), false
	case wire.CommandListCursors:
		m, err := wire.DecodeListCursors(h, body)
		if err != nil {
			return n.refuse(h, wire.CodeInvalidRequest, err.Error()), false
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		r := wire.ListCursorsReply{RequestID: m.RequestID, Stream: 7, Incarnation: 1, ConfirmedTail: s.tail}
		return wire.AppendListCursorsReply(nil, n.from(), &r, nil), false
	case wire.CommandCommitCursor, wire.CommandGetCursor:
		var m wire.CursorRequest
		var err error
		if h.Command == wire.CommandCommitCursor {
			m, err = wire.DecodeCommitCursor(h, body)
		} else {
			m, err = wire.DecodeGetCursor(h, body)
		}
		if err != nil {
			return n.refuse(h, wire.CodeInvalidRequest, err.Error()), false
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		r := wire.CursorReply{RequestID: m.RequestID, Stream: 7, Incarnation: 1}
		if h.Command == wire.CommandCommitCursor {
			s.cursors[string(m.Consumer)] = m.Offset
			r.Offset, r.Found = m.Offset, true
			return wire.AppendCommitCursorReply(nil, n.from(), &r), false
		}
		r.Offset, r.Found = s.cursors[string(m.Consumer)]
		return wire.AppendGetCursorReply(nil, n.from(), &r), false
	}
	return n.refuse(h, wire.CodeInvalidRequest, "fake stream: unexpected "+h.Command.String()), false
}

func (s *fakeStream) produce(h *wire.Header, m wire.Produce) ([]byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cp := m
	cp.Batch = append([]byte(nil), m.Batch...)
	s.produces = append(s.produces, cp)
	key := [2]uint64{m.ProducerID, m.Sequence}
	reply := wire.ProduceReply{RequestID: m.RequestID, Stream: 7, Incarnation: 1, Epoch: 1, Count: m.Count}
	if base, ok := s.batchAt[key]; ok {
		reply.BaseOffset, reply.Duplicate = base, true
		return wire.AppendProduceReply(nil, s.node.from(), &reply), false
	}
	if s.overloadAt != 0 && m.Sequence == s.overloadAt {
		s.overloadAt = 0
		return s.node.refuse(h, wire.CodeOverloaded, "fake stream: overloaded"), false
	}
	if last, ok := s.lastSeq[m.ProducerID]; ok && m.Sequence != last+1 {
		return s.node.refuse(h, wire.CodeSequenceGap, "fake stream: sequence gap"), false
	}
	s.bases = append(s.bases, s.tail)
	s.starts = append(s.starts, len(s.log))
	ts := time.Now().UnixMilli()
	if s.now != nil {
		ts = s.now()
	}
	s.log = appendTestBatchAt(s.log, s.tail, m.Count, Codec(m.Codec), Format(m.Format), m.ProducerID, m.Sequence, ts,
		m.Batch)
	s.batchAt[key] = s.tail
	s.lastSeq[m.ProducerID] = m.Sequence
	reply.BaseOffset = s.tail
	s.tail += uint64(m.Count)
	close(s.grew)
	s.grew = make(chan struct{})
	if s.dropAfterAppend > 0 {
		s.dropAfterAppend--
		return nil, true
	}
	return wire.AppendProduceReply(nil, s.node.from(), &reply), false
}

// fetch answers whole batches from the one holding m.Offset, up to BytesMax, after waiting up to
// WaitMs for records there.
func (s *fakeStream) fetch(m wire.Fetch) []byte {
	deadline := time.After(time.Duration(m.WaitMs) * time.Millisecond)
	s.mu.Lock()
	for s.tail <= m.Offset {
		grew := s.grew
		s.mu.Unlock()
		select {
		case <-grew:
		case <-s.node.quit:
			return nil
		case <-deadline:
			s.mu.Lock()
			r := wire.FetchReply{RequestID: m.RequestID, Stream: 7, Incarnation: 1, BaseOffset: min(m.Offset, s.tail),
				ConfirmedTail: s.tail}
			s.mu.Unlock()
			return wire.AppendFetchReply(nil, s.node.from(), &r)
		}
		s.mu.Lock()
	}
	defer s.mu.Unlock()
	i := len(s.bases) - 1
	for s.bases[i] > m.Offset {
		i--
	}
	j := i + 1
	for j < len(s.bases) && s.starts[j]-s.starts[i] < int(m.BytesMax) {
		j++
	}
	end, tail := len(s.log), s.tail
	if j < len(s.bases) {
		end, tail = s.starts[j], s.bases[j]
	}
	r := wire.FetchReply{RequestID: m.RequestID, Stream: 7, Incarnation: 1, BaseOffset: s.bases[i],
		Count: uint32(tail - s.bases[i]), ConfirmedTail: s.tail, Batches: s.log[s.starts[i]:end]}
	return wire.AppendFetchReply(nil, s.node.from(), &r)
}

// ownerCluster is one fake node that answers lookups with itself as stream 7's owner and serves it.
func ownerCluster(t *testing.T) (*fakeNode, *fakeStream) { return ownerClusterB(t) }

func ownerClusterB(t testing.TB) (*fakeNode, *fakeStream) {
	var s *fakeStream
	var n *fakeNode
	n = startFake(t, 1, func(h *wire.Header, body []byte) ([]byte, bool) {
		if h.Command == wire.CommandLookupStream {
			return n.lookupReply(h, 1, n.addr), false
		}
		return s.handle(h, body)
	})
	s = newFakeStream(n)
	return n, s
}

func testConfig(addrs ...string) Config {
	return Config{Addrs: addrs, Cluster: testCluster, Retries: 4, BackoffMin: time.Millisecond,
		BackoffMax: 5 * time.Millisecond, RequestTimeout: 5 * time.Second}
}
