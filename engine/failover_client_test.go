package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"time"

	"github.com/ringstream/ringstream/segment"
	"github.com/ringstream/ringstream/wire"
)

// conn is a client connection whose reads report errors instead of failing the test (a node dies
// under it).
type conn struct {
	c   net.Conn
	buf []byte
}

func dialConn(addr netip.AddrPort) (*conn, error) {
	nc, err := net.DialTimeout("tcp", addr.String(), time.Second)
	if err != nil {
		return nil, err
	}
	cn := &conn{c: nc}
	hello := wire.ClientHello{RequestID: 1, Cluster: nodeTestCluster, Revision: wire.Revision}
	if err := cn.write(wire.AppendClientHello(nil, &hello)); err != nil {
		return nil, err
	}
	if _, _, err := cn.read(time.Second); err != nil {
		return nil, err
	}
	if err := cn.write(wire.AppendClientProof(nil, nodeTestCluster, &wire.ClientProof{RequestID: 2})); err != nil {
		return nil, err
	}
	return cn, nil
}

func (cn *conn) write(b []byte) error {
	_, err := cn.c.Write(b)
	return err
}

func (cn *conn) read(wait time.Duration) (wire.Header, []byte, error) {
	_ = cn.c.SetReadDeadline(time.Now().Add(wait))
	cn.buf = append(cn.buf[:0], make([]byte, wire.HeaderSize)...)
	if _, err := io.ReadFull(cn.c, cn.buf); err != nil {
		return wire.Header{}, nil, err
	}
	h, err := wire.ParseHeader(cn.buf)
	if err != nil {
		return wire.Header{}, nil, err
	}
	cn.buf = append(cn.buf, make([]byte, h.BodySize)...)
	if _, err := io.ReadFull(cn.c, cn.buf[wire.HeaderSize:]); err != nil {
		return wire.Header{}, nil, err
	}
	return wire.ParseFrame(cn.buf)
}

func (cn *conn) close() { _ = cn.c.Close() }

// lookupOwner asks node via for the owner of name: its id, epoch and client address.
func lookupOwner(via netip.AddrPort, name string) (wire.LookupStreamReply, error) {
	cn, err := dialConn(via)
	if err != nil {
		return wire.LookupStreamReply{}, err
	}
	defer cn.close()
	if err := cn.write(wire.AppendLookupStream(nil, wire.From{Cluster: nodeTestCluster},
		&wire.LookupStream{RequestID: 3, Name: []byte(name)})); err != nil {
		return wire.LookupStreamReply{}, err
	}
	h, body, err := cn.read(time.Second)
	if err != nil {
		return wire.LookupStreamReply{}, err
	}
	if h.Command == wire.CommandErrorReply {
		e, _ := wire.DecodeErrorReply(&h, body)
		return wire.LookupStreamReply{}, fmt.Errorf("lookup refused: %v %s", e.Code, e.Message)
	}
	return wire.DecodeLookupStreamReply(&h, body)
}

// errRefused is a produce the owner refused (not owner, unavailable, fenced): the producer looks
// the owner up again.
var errRefused = errors.New("produce refused")

const (
	failoverRecords = 4  // records per batch
	failoverWindow  = 4  // produces in flight (below the five batches a producer table remembers)
	failoverRecord  = 64 // bytes per record
)

// batchPayload is batch seq's records, each starting with seq.
func batchPayload(seq uint64) []byte {
	b := make([]byte, failoverRecords*failoverRecord)
	for j := range failoverRecords {
		binary.LittleEndian.PutUint64(b[j*failoverRecord:], seq)
	}
	return b
}

// producer produces batches of one producer id with confirm, failoverWindow in flight, to whoever
// owns the stream. A refused produce or a broken connection sends it to look the owner up again (never
// through a node it knows dead) and to send what was not answered again with the same sequences: a
// new owner that holds a batch answers it from its producer table, at the offset it has.
type producer struct {
	c      *failoverCluster
	name   string
	stream uint64
	conn   *conn
	owner  uint16
	epoch  uint32
	next   uint64            // next sequence
	sent   []uint64          // sequences sent and not answered, ascending
	rids   map[uint64]uint64 // request id -> sequence, on this connection
	rid    uint64
	acked  map[uint64]uint64 // sequence -> base offset
	dead   map[uint16]bool
	// lastAck is when the last answer came, with the epoch it came in.
	lastAck      time.Time
	ackEpoch     uint32
	reconnects   int
	firstNewAck  time.Time // the first answer in an epoch above the one the producer started in
	startedEpoch uint32
}

func newProducer(c *failoverCluster, name string, stream uint64) *producer {
	p := &producer{c: c, name: name, stream: stream, rids: map[uint64]uint64{}, acked: map[uint64]uint64{},
		dead: map[uint16]bool{}}
	p.reconnect()
	p.startedEpoch = p.epoch
	return p
}

// reconnect finds the live owner through a live node, connects, and sends the unanswered again.
func (p *producer) reconnect() {
	t := p.c.t
	if p.conn != nil {
		p.conn.close()
		p.conn = nil
		p.reconnects++
	}
	deadline := time.Now().Add(waitBound)
	for time.Now().Before(deadline) {
		for id := uint16(1); id <= 3 && p.conn == nil; id++ {
			if p.dead[id] {
				continue
			}
			r, err := lookupOwner(p.c.client[id], p.name)
			if err != nil || r.Owner == 0 || p.dead[r.Owner] {
				continue // a recovery is pending: no owner yet
			}
			addr, err := netip.ParseAddrPort(string(r.OwnerAddr))
			if err != nil {
				t.Fatalf("lookup through %d gave %+v: %v", id, r, err)
			}
			if p.conn, err = dialConn(addr); err != nil {
				p.conn = nil
				continue
			}
			p.owner, p.epoch = r.Owner, r.Epoch
		}
		if p.conn != nil {
			break
		}
		time.Sleep(2 * time.Millisecond) // the recovery has not committed yet: nothing to wait on here
	}
	if p.conn == nil {
		t.Fatalf("no live owner of %s found within %v", p.name, waitBound)
	}
	clear(p.rids)
	for _, seq := range p.sent {
		p.send(seq)
	}
}

func (p *producer) send(seq uint64) {
	p.rid++
	p.rids[p.rid] = seq
	m := wire.Produce{RequestID: p.rid, Stream: p.stream, Incarnation: 1, ProducerID: 7, Sequence: seq,
		Count: failoverRecords, Batch: batchPayload(seq)}
	_ = p.conn.write(wire.AppendProduce(nil, wire.From{Cluster: nodeTestCluster}, &m)) // a failed write shows in the read
}

// step fills the window (unless draining) and takes one answer.
func (p *producer) step(drain bool) {
	t := p.c.t
	for !drain && len(p.sent) < failoverWindow {
		p.sent = append(p.sent, p.next)
		p.send(p.next)
		p.next++
	}
	if len(p.sent) == 0 {
		return
	}
	h, body, err := p.conn.read(time.Second)
	if err != nil {
		p.reconnect()
		return
	}
	if h.Command == wire.CommandErrorReply {
		e, _ := wire.DecodeErrorReply(&h, body)
		switch e.Code {
		case wire.CodeNotOwner, wire.CodeUnavailable, wire.CodeNotYet, wire.CodeFenced, wire.CodeUnknownStream, wire.CodeLogFailed:
			time.Sleep(time.Millisecond) // the owner is moving: nothing to wait on from outside
			p.reconnect()
			return
		}
		t.Fatalf("produce refused: %v %s", e.Code, e.Message)
	}
	r, err := wire.DecodeProduceReply(&h, body)
	if err != nil {
		t.Fatal(err)
	}
	seq, ok := p.rids[r.RequestID]
	if !ok {
		return // an answer to a request of an earlier connection's numbering
	}
	delete(p.rids, r.RequestID)
	if old, again := p.acked[seq]; again && old != r.BaseOffset {
		t.Fatalf("batch %d confirmed at %d and at %d", seq, old, r.BaseOffset)
	}
	p.acked[seq] = r.BaseOffset
	for i, s := range p.sent {
		if s == seq {
			p.sent = append(p.sent[:i], p.sent[i+1:]...)
			break
		}
	}
	p.lastAck, p.ackEpoch = time.Now(), r.Epoch
	if r.Epoch > p.startedEpoch && p.firstNewAck.IsZero() {
		p.firstNewAck = p.lastAck
	}
}

// produceFor produces until at least n more batches were answered and d passed.
func (p *producer) produceFor(n int, d time.Duration) {
	want, until := len(p.acked)+n, time.Now().Add(d)
	for len(p.acked) < want || time.Now().Before(until) {
		p.step(false)
	}
}

// drain waits for every produce sent to be answered.
func (p *producer) drain() {
	for len(p.sent) > 0 {
		p.step(true)
	}
}

// readBack fetches the whole stream from its owner and checks that every answered batch is at its
// answered offset and that no batch is there twice. It returns the confirmed tail.
func (p *producer) readBack() uint64 {
	t := p.c.t
	seen := map[uint64]uint64{} // sequence -> offset
	var off, confirmed uint64
	for rid := uint64(1000); ; rid++ {
		m := wire.Fetch{RequestID: rid, Stream: p.stream, Incarnation: 1, Offset: off, BytesMax: 1 << 20}
		if err := p.conn.write(wire.AppendFetch(nil, wire.From{Cluster: nodeTestCluster}, &m)); err != nil {
			t.Fatal(err)
		}
		h, body, err := p.conn.read(waitBound)
		if err != nil {
			t.Fatal(err)
		}
		if h.Command != wire.CommandFetchReply {
			e, _ := wire.DecodeErrorReply(&h, body)
			t.Fatalf("fetch at %d refused: %v %s", off, e.Code, e.Message)
		}
		r, err := wire.DecodeFetchReply(&h, body)
		if err != nil {
			t.Fatal(err)
		}
		confirmed = r.ConfirmedTail
		if r.Count == 0 {
			break
		}
		it := segment.NewBatchIter(r.Batches, off)
		for bh, payload, ok := it.Next(); ok; bh, payload, ok = it.Next() {
			seq := binary.LittleEndian.Uint64(payload)
			if bh.ProducerSeq != seq || bh.RecordCount != failoverRecords {
				t.Fatalf("batch at %d: sequence %d, payload of %d, %d records", bh.BaseOffset, bh.ProducerSeq, seq, bh.RecordCount)
			}
			if at, twice := seen[seq]; twice {
				t.Fatalf("batch %d read at %d and at %d", seq, at, bh.BaseOffset)
			}
			seen[seq] = bh.BaseOffset
			off = bh.NextOffset()
		}
		if err := it.Err(); err != nil {
			t.Fatal(err)
		}
	}
	if off != confirmed {
		t.Fatalf("read up to %d, confirmed tail %d", off, confirmed)
	}
	for seq, at := range p.acked {
		if got, ok := seen[seq]; !ok || got != at {
			t.Fatalf("confirmed batch %d at %d read back at %d (%v)", seq, at, got, ok)
		}
	}
	return confirmed
}
