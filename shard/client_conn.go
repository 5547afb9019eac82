package shard

import (
	"crypto/rand"
	"encoding/binary"
	"errors"

	"golang.org/x/sys/unix"

	"github.com/ringstream/ringstream/internal/assert"
	"github.com/ringstream/ringstream/ring"
	"github.com/ringstream/ringstream/wire"
)

// clientState is where a client connection is in its life.
type clientState uint8

const (
	clientHello   clientState = iota + 1 // reading the client's ClientHello
	clientProving                        // our ClientChallenge sent, reading the client's ClientProof
	clientOpen                           // serving requests
	clientClosing                        // shut down, waiting for the ring
)

const (
	clientTagRecv uint64 = iota + 1
	clientTagSend
)

// clientRecvBytes is a client connection's first receive buffer: requests are small, and a produce
// larger than it is received into a buffer grown for it (up to ClientConfig.FrameBytesMax).
const clientRecvBytes = 64 << 10

// clientRecvBytesKept bounds the receive buffer a client connection keeps after its frames outgrew
// clientRecvBytes (fitReader): a producer's batches up to the client's default 1 MiB, like a peer
// connection's buffer. A larger frame still gets a buffer of its own, dropped after it.
const clientRecvBytesKept = 2 << 20

// clientConn is one client connection, served for its whole life by the shard that accepted it. It
// reads the handshake a header at a time (ClientHello, then ClientProof), then requests with a
// wire.FrameReader, and sends replies from a bounded outbox.
type clientConn struct {
	s          *Shard
	id         uint64
	fd         int
	state      clientState
	acceptTick uint64
	hs         handshakeBuf // the frame of the handshake being read: one header, not a byte more
	hello      wire.ClientHello
	ch         wire.ClientChallenge
	in         *wire.FrameReader
	inSize     int // in's buffer size
	frameMax   int // the largest frame received (fitReader)

	out, sending []byte // out is filled, sending is in flight from sendOff
	sendOff      int
	recvInFlight bool
	sendInFlight bool
	pending      int  // requests handed on and not answered (ClientConfig.RequestsMax)
	pendingBytes int  // their frames' bytes (ClientConfig.PendingBytesMax)
	stalled      bool // stopped reading: a bound or a full queue; receive(0) retries
	closeAfter   bool // a refusal is queued: close once it is sent
	open         bool // counted in ClientStats.Open (KafkaStats.Open for a Kafka connection)

	// A Kafka connection (kafka.go) reads size-prefixed frames with kin instead of in, has no
	// handshake, and hands its frames to the KafkaHandler.
	kafka  bool
	kin    *kafkaReader
	takeFn func([]byte) error // takeKafka, bound once

	// Time bounds (client_limits.go), in ticks of the shard.
	lastActiveTick uint64     // the last byte received or reply queued (IdleTimeoutTicks)
	frame          frameClock // the frame being received (FrameTimeoutTicks)
	framesDone     uint64     // frames handed on or dropped: a change starts a new frame's clock
}

func (cn *clientConn) Complete(c ring.Completion) {
	switch c.Tag {
	case clientTagRecv:
		cn.recvInFlight = false
		cn.onRecv(c)
	case clientTagSend:
		cn.sendInFlight = false
		cn.onSend(c)
	default:
		assert.True(false, "shard: client completion with an unknown tag")
	}
	cn.finishClose()
}

func (cn *clientConn) onRecv(c ring.Completion) {
	if cn.state == clientClosing {
		return
	}
	if c.Res <= 0 {
		cn.onClientGone()
		return
	}
	if cn.closeAfter {
		return // refused: nothing more it sends is read
	}
	if cn.state == clientOpen {
		cn.receive(int(c.Res))
		return
	}
	cn.hs.n += int(c.Res)
	if !cn.hs.full() {
		cn.postRecv()
		return
	}
	cn.hs.n = 0
	if cn.state == clientHello {
		cn.onHello()
	} else {
		cn.onProof()
	}
}

// onHello checks the client's hello (revision, cluster, whether it authenticates as the secret
// requires) and answers with this node's challenge.
func (cn *clientConn) onHello() {
	s := cn.s
	h, body, err := wire.ParseFrame(cn.hs.buf[:])
	if err != nil {
		cn.refuseHandshake(nil, err)
		return
	}
	cn.hello, err = wire.DecodeClientHello(&h, body)
	if err == nil {
		err = cn.hello.Check(s.cfg.Cluster, s.cfg.Secret)
	}
	if err != nil {
		cn.refuseHandshake(&h, err)
		return
	}
	cn.ch = wire.ClientChallenge{RequestID: cn.hello.RequestID, Cluster: s.cfg.Cluster, Revision: wire.Revision,
		Node: s.cfg.Node}
	if len(s.cfg.Secret) > 0 {
		_, _ = rand.Read(cn.ch.Nonce[:]) // crypto/rand.Read never fails (it panics instead)
		cn.ch.Proof = wire.ClientChallengeProof(s.cfg.Secret, &cn.hello, &cn.ch)
	}
	cn.out = wire.AppendClientChallenge(cn.out, &cn.ch)
	cn.state = clientProving
	cn.kick()
	cn.postRecv()
}

// onProof checks the client's proof of the secret; the connection then serves requests.
func (cn *clientConn) onProof() {
	s := cn.s
	h, body, err := wire.ParseFrame(cn.hs.buf[:])
	if err != nil {
		cn.refuseHandshake(nil, err)
		return
	}
	p, err := wire.DecodeClientProof(&h, body)
	if err == nil {
		err = wire.VerifyClientProof(s.cfg.Secret, &cn.hello, &cn.ch, &p)
	}
	if err != nil {
		cn.refuseHandshake(&h, err)
		return
	}
	cn.state = clientOpen
	cn.open = true
	s.stats.Client.Open.Add(1)
	cn.in, cn.inSize = wire.NewFrameReader(clientRecvBytes, s.cfg.Client.FrameBytesMax), clientRecvBytes
	cn.postRecv()
}

// refuseHandshake counts and logs a refused handshake. When the frame's header held (h != nil), the
// client is told why in an error reply before the connection closes.
func (cn *clientConn) refuseHandshake(h *wire.Header, err error) {
	s := cn.s
	s.stats.Client.HandshakeErrors.Add(1)
	reason := closeClientHandshakeRefused
	if isAuthErr(err) {
		s.stats.Client.AuthRefused.Add(1)
		reason = closeClientAuthRefused
	}
	s.cl.closes.note(&s.stats, s.tick.Number, reason, "conn", cn.id, "err", err)
	if h == nil {
		cn.close()
		return
	}
	cn.refuse(h, err)
}

// refuse queues an error reply (CodeInvalidRequest, the error's text) and closes the connection
// once it is sent.
func (cn *clientConn) refuse(h *wire.Header, err error) {
	cn.replyError(h, err)
	cn.closeAfter = true
	cn.kick()
}

// replyError queues an error reply to the request h (CodeInvalidRequest, the error's text).
func (cn *clientConn) replyError(h *wire.Header, err error) {
	msg := err.Error()
	if len(msg) > wire.MessageSizeMax {
		msg = msg[:wire.MessageSizeMax]
	}
	var id, stream uint64
	if h != nil {
		id, stream = binary.LittleEndian.Uint64(h.Area[:8]), h.Group
	}
	from := wire.From{Cluster: cn.s.cfg.Cluster, Node: cn.s.cfg.Node}
	cn.out = wire.AppendErrorReply(cn.out, from, &wire.ErrorReply{RequestID: id, Stream: stream,
		Code: wire.CodeOf(err), Message: []byte(msg)})
}

// receive hands on the requests completed by n bytes just received (0: retry a stalled one) and reads
// on, unless a bound or a full queue stopped it.
func (cn *clientConn) receive(n int) {
	if cn.kafka {
		cn.receiveKafka(n)
		return
	}
	err := cn.in.Commit(n, cn)
	was := cn.stalled
	cn.stalled = errors.Is(err, wire.ErrStall)
	switch {
	case cn.stalled:
		if !was {
			cn.s.stats.Client.Pushback.Add(1) // counted once per stop, not per retry
		}
		return
	case errors.Is(err, wire.ErrFrameTooLarge):
		// The header held, so the client is told; its body cannot be skipped without reading it,
		// and the reader refuses to, so the connection closes after the reply.
		cn.s.stats.Client.BrokenFrames.Add(1)
		cn.s.cl.closes.note(&cn.s.stats, cn.s.tick.Number, closeClientFrameTooLarge, "conn", cn.id, "err", err)
		cn.refuse(nil, err)
		return
	case err != nil:
		cn.s.stats.Client.BrokenFrames.Add(1)
		cn.closeFor(closeClientBrokenFrame, "err", err)
		return
	}
	cn.markFrame()
	cn.postRecv()
}

// onClientGone closes a connection whose client closed it or failed: counted and logged when part
// of a request was received (a client that went away between requests is an ordinary end).
func (cn *clientConn) onClientGone() {
	switch {
	case cn.state != clientOpen:
		cn.close()
	case cn.unsent() > 0:
		cn.closeFor(closeClientClosedMidReply, "unsent", cn.unsent())
	case cn.buffered() > 0:
		cn.closeFor(closeClientClosedMidFrame, "received", cn.buffered(), "missing", cn.missing())
	default:
		cn.close()
	}
}

// unsent is the reply bytes queued and not sent yet.
func (cn *clientConn) unsent() int { return len(cn.sending) - cn.sendOff + len(cn.out) }

// HandleFrame takes one whole client frame, both checksums checked (wire.FrameHandler).
func (cn *clientConn) HandleFrame(h wire.Header, body, frame []byte) error {
	s := cn.s
	cfg := &s.cfg.Client
	if cn.pending >= cfg.RequestsMax || len(cn.out)+len(cn.sending)-cn.sendOff >= cfg.OutboxBytes ||
		cn.pendingBytes+len(frame) > cfg.PendingBytesMax { // validation: a lone frame always fits
		return wire.ErrStall
	}
	cn.framesDone++
	cn.frameMax = max(cn.frameMax, len(frame))
	err := checkRequest(&h, body)
	if err == nil && h.Cluster != s.cfg.Cluster {
		err = wire.ErrForeignCluster
	}
	if err == nil && s.node.clientHandler == nil {
		err = errors.New("shard: this node serves no client requests")
	}
	if err != nil {
		s.stats.Client.BadRequests.Add(1)
		cn.replyError(&h, err)
		cn.kick()
		return nil
	}
	req := ClientRequest{Shard: s.index, Conn: cn.id, RequestID: binary.LittleEndian.Uint64(h.Area[:8]), Stream: h.Group,
		Bytes: len(frame)}
	target := s.index
	if h.Group != 0 {
		target = ShardOf(h.Group, len(s.node.shards))
	}
	if target != s.index {
		m := &s.scratch
		*m = message{kind: messageClientRequest, client: req, frame: append([]byte(nil), frame...)}
		if !s.push(target, m) {
			*m = message{}
			return wire.ErrStall
		}
		s.stats.Client.Routed.Add(1)
		cn.pending++
		cn.pendingBytes += len(frame)
		return nil
	}
	cn.pending++
	cn.pendingBytes += len(frame)
	s.stats.Client.Requests.Add(1)
	s.header = h
	s.node.clientHandler.OnClientRequest(s, req, &s.header, body)
	return nil
}

// DropFrame answers a frame whose header held but whose body failed its checksum (wire.FrameHandler).
func (cn *clientConn) DropFrame(h wire.Header, err error) {
	cn.framesDone++
	cn.s.stats.Client.BadRequests.Add(1)
	cn.replyError(&h, err)
	cn.kick()
}

func (cn *clientConn) postRecv() {
	if cn.recvInFlight || cn.state == clientClosing || cn.closeAfter || cn.stalled {
		return
	}
	var buf []byte
	switch {
	case cn.kafka:
		buf = cn.kin.free()
	case cn.state == clientOpen:
		cn.fitReader()
		buf = cn.in.Free()
	default:
		buf = cn.hs.space()
	}
	err := cn.s.ring.Recv(cn, clientTagRecv, cn.fd, buf, 0, 0)
	if errors.Is(err, ring.ErrQueueFull) {
		cn.s.ring.Submit()
		err = cn.s.ring.Recv(cn, clientTagRecv, cn.fd, buf, 0, 0)
	}
	if err != nil {
		cn.close()
		return
	}
	cn.recvInFlight = true
}

// fitReader gives a connection whose frames outgrew its receive buffer a reader whose buffer holds
// them (doubled until it does, up to clientRecvBytesKept), once the reader holds no byte of a frame.
// Otherwise the FrameReader allocates a zeroed buffer for each such frame and drops it again after:
// two large allocations and a clear of the whole frame per produce, only to receive into it.
func (cn *clientConn) fitReader() {
	want := min(cn.frameMax, clientRecvBytesKept)
	if want <= cn.inSize || cn.in.Buffered() != 0 || cn.in.Err() != nil {
		return
	}
	size := cn.inSize
	for size < want {
		size *= 2
	}
	size = min(size, clientRecvBytesKept)
	cn.in, cn.inSize = wire.NewFrameReader(size, cn.s.cfg.Client.FrameBytesMax), size
}

// kick sends the outbox when no send is in flight.
func (cn *clientConn) kick() {
	if cn.sendInFlight || len(cn.out) == 0 || cn.state == clientClosing {
		return
	}
	cn.out, cn.sending = cn.sending[:0], cn.out
	cn.sendOff = 0
	cn.postSend()
}

func (cn *clientConn) postSend() {
	err := cn.s.ring.Send(cn, clientTagSend, cn.fd, cn.sending[cn.sendOff:], unix.MSG_NOSIGNAL, 0)
	if errors.Is(err, ring.ErrQueueFull) {
		cn.s.ring.Submit()
		err = cn.s.ring.Send(cn, clientTagSend, cn.fd, cn.sending[cn.sendOff:], unix.MSG_NOSIGNAL, 0)
	}
	if err != nil {
		cn.close()
		return
	}
	cn.sendInFlight = true
}

func (cn *clientConn) onSend(c ring.Completion) {
	if cn.state == clientClosing {
		return
	}
	if c.Res <= 0 {
		cn.closeFor(closeClientClosedMidReply, "unsent", cn.unsent(), "err", c.Err())
		return
	}
	cn.sendOff += int(c.Res)
	if cn.sendOff < len(cn.sending) {
		cn.postSend()
		return
	}
	cn.sending = cn.sending[:0]
	cn.sendOff = 0
	if cn.closeAfter && len(cn.out) == 0 {
		cn.close()
		return
	}
	cn.kick()
}

// close shuts the socket down; finishClose closes it once the ring holds nothing of it.
func (cn *clientConn) close() {
	if cn.state == clientClosing {
		return
	}
	cn.state = clientClosing
	cn.stalled = false
	if cn.open {
		cn.open = false
		if cn.kafka {
			cn.s.stats.Kafka.Open.Add(-1)
		} else {
			cn.s.stats.Client.Open.Add(-1)
		}
	}
	if cn.kafka {
		cn.s.node.kafkaHandler.OnKafkaClosed(cn.s, cn.id)
	}
	cn.pendingBytes = 0
	_ = unix.Shutdown(cn.fd, unix.SHUT_RDWR)
	cn.finishClose()
}

func (cn *clientConn) finishClose() {
	if cn.state != clientClosing || cn.recvInFlight || cn.sendInFlight || cn.fd < 0 {
		return
	}
	unix.Close(cn.fd)
	cn.fd = -1
	cn.s.node.clients.release()
	cn.s.cl.remove(cn)
}
