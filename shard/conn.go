package shard

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/ringstream/ringstream/internal/assert"
	"github.com/ringstream/ringstream/ring"
	"github.com/ringstream/ringstream/wire"
)

// connState is where an accepted connection is in its life.
type connState uint8

const (
	connHandshaking connState = iota + 1 // reading the dialer's handshake (on the accepting shard)
	connReplying                         // sending ours back, then handing the socket on
	connProving                          // with a secret: reading the dialer's proof, then handing on
	connOpen                             // receiving frames on the shard that owns it
	connClosing                          // shut down, waiting for the ring
)

const (
	connTagRecv uint64 = iota + 1
	connTagSend
)

// conn is a connection a peer's shard dialed to this node. The accepting shard (shard 0) reads the
// dialer's handshake, answers with its own, with a cluster secret reads the dialer's proof, and hands
// the socket to shard (dialer's shard mod S) of this node through the cross-shard queue; that shard
// reads Commit batches, reply batches and group frames from it. Nothing is sent on it after the
// handshake: this node answers on its own links.
type conn struct {
	s            *Shard
	fd           int
	state        connState
	peer         wire.Handshake // the dialer's handshake (only Node once handed on)
	ours         wire.Handshake // our answer, kept for the proof's transcript
	hello        handshakeBuf   // the dialer's handshake, on the accepting shard
	in           peerReader     // frames, on the shard that owns the connection
	reply        []byte
	replyOff     int
	recvInFlight bool
	sendInFlight bool
	acceptTick   uint64     // the handshake must finish within HandshakeTimeoutTicks of it
	frame        frameClock // the frame being received, once open (PeerFrameTimeoutTicks)
}

// armAccept posts an Accept on the node's listener.
func (s *Shard) armAccept() {
	if s.draining || s.accepts {
		return
	}
	if err := s.ring.Accept(s, tagAccept, s.node.listenFD, 0); err != nil {
		s.log.Warn("shard: accept could not be queued, retrying next tick", "err", err)
		s.acceptRetry = true
		return
	}
	s.accepts = true
}

func (s *Shard) onAccept(c ring.Completion) {
	if c.Res < 0 {
		if !s.draining {
			// Out of fds or a transient error: try again on the next tick, not in a tight loop.
			s.log.Warn("shard: accept failed", "err", c.Err())
			s.acceptRetry = true
		}
		return
	}
	fd := int(c.Res)
	if s.draining {
		unix.Close(fd)
		return
	}
	s.armAccept()
	_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	setPeerKeepalive(fd)
	cn := &conn{s: s, fd: fd, state: connHandshaking, acceptTick: s.tick.Number}
	s.conns = append(s.conns, cn)
	cn.postRecv()
}

// adoptConn takes over a connection from node peer, handed on by the accepting shard.
func (s *Shard) adoptConn(fd int, peer uint16) {
	if s.draining {
		unix.Close(fd)
		return
	}
	cn := &conn{s: s, fd: fd, state: connOpen, peer: wire.Handshake{Node: peer},
		in: newPeerReader(s, peer, s.cfg.RecvBufferBytes)}
	s.conns = append(s.conns, cn)
	cn.postRecv()
}

func (cn *conn) Complete(c ring.Completion) {
	switch c.Tag {
	case connTagRecv:
		cn.recvInFlight = false
		cn.onRecv(c)
	case connTagSend:
		cn.sendInFlight = false
		cn.onSend(c)
	default:
		assert.True(false, "shard: conn completion with an unknown tag")
	}
	cn.finishClose()
}

func (cn *conn) onRecv(c ring.Completion) {
	if cn.state != connHandshaking && cn.state != connProving && cn.state != connOpen {
		return
	}
	if c.Res < 0 && cn.state == connOpen && !cn.s.draining {
		cn.closeFor(closePeerRecvError, "err", c.Err())
		return
	}
	if c.Res <= 0 {
		cn.close()
		return
	}
	cn.s.stats.BytesReceived.Add(uint64(c.Res))
	if cn.state != connOpen {
		cn.hello.n += int(c.Res)
		if !cn.hello.full() {
			cn.postRecv()
			return
		}
		if cn.state == connHandshaking {
			cn.onHandshake()
		} else {
			cn.onProof()
		}
		return
	}
	cn.receive(int(c.Res))
}

// onHandshake checks the dialer's handshake (R18) and answers with this node's.
func (cn *conn) onHandshake() {
	s := cn.s
	h, body, err := wire.ParseFrame(cn.hello.buf[:])
	var hs wire.Handshake
	if err == nil {
		hs, err = wire.DecodeHandshake(&h, body)
	}
	if err == nil {
		err = hs.Check(s.cfg.Cluster)
	}
	if err == nil && s.byNode[hs.Node] == nil {
		err = fmt.Errorf("%w: node %d", ErrUnknownPeer, hs.Node)
	}
	if err == nil {
		err = hs.CheckAuth(s.cfg.Secret)
	}
	if err != nil {
		cn.refuse(err)
		return
	}
	cn.peer = hs
	cn.state = connReplying
	cn.ours = s.handshake()
	if len(s.cfg.Secret) > 0 {
		cn.ours.Proof = wire.AcceptorProof(s.cfg.Secret, &cn.peer, &cn.ours)
	}
	cn.reply = wire.AppendHandshake(nil, cn.ours)
	cn.postSend()
}

func (cn *conn) onSend(c ring.Completion) {
	if cn.state != connReplying {
		return
	}
	if c.Res <= 0 {
		cn.close()
		return
	}
	cn.replyOff += int(c.Res)
	if cn.replyOff < len(cn.reply) {
		cn.postSend()
		return
	}
	if len(cn.s.cfg.Secret) > 0 {
		cn.state = connProving
		cn.hello.n = 0
		cn.postRecv()
		return
	}
	cn.handOn()
}

// handOn gives the handshaken socket to shard (dialer's shard mod S). The accepting shard forgets it;
// if the target's queue is full the connection is closed and the dialer reconnects.
func (cn *conn) handOn() {
	s := cn.s
	target := 0
	if cn.peer.ShardCount != 0 {
		target = int(cn.peer.Shard) % len(s.node.shards)
	}
	s.removeConn(cn)
	if target == s.index {
		s.adoptConn(cn.fd, cn.peer.Node)
		return
	}
	m := &s.scratch
	*m = message{kind: messageConn, fd: cn.fd, peer: cn.peer.Node}
	if !s.push(target, m) {
		s.log.Warn("shard: connection dropped, target shard's queue is full", "target", target)
		unix.Close(cn.fd)
	}
}

// receive hands the frames completed by n bytes just received (0: retry a stalled frame) to the shard
// and reads on, unless a full queue stalled it. A corrupt header closes the connection.
func (cn *conn) receive(n int) {
	if err := cn.in.receive(n); err != nil {
		cn.s.stats.FramesDropped.Add(1)
		cn.closeFor(closePeerBrokenFrame, "err", err)
		return
	}
	cn.frame.mark(cn.s.tick.Number, cn.in.frames.Buffered(), cn.in.done)
	if !cn.in.stalled {
		cn.postRecv()
	}
}

func (cn *conn) postRecv() {
	if cn.recvInFlight {
		return
	}
	var buf []byte
	if cn.state == connHandshaking || cn.state == connProving {
		buf = cn.hello.space() // the handshake (or the proof) and not a byte more
	} else {
		buf = cn.in.free()
	}
	err := cn.s.ring.Recv(cn, connTagRecv, cn.fd, buf, 0, 0)
	if errors.Is(err, ring.ErrQueueFull) {
		cn.s.ring.Submit()
		err = cn.s.ring.Recv(cn, connTagRecv, cn.fd, buf, 0, 0)
	}
	if err != nil {
		cn.close()
		return
	}
	cn.recvInFlight = true
}

func (cn *conn) postSend() {
	err := cn.s.ring.Send(cn, connTagSend, cn.fd, cn.reply[cn.replyOff:], unix.MSG_NOSIGNAL, 0)
	if errors.Is(err, ring.ErrQueueFull) {
		cn.s.ring.Submit()
		err = cn.s.ring.Send(cn, connTagSend, cn.fd, cn.reply[cn.replyOff:], unix.MSG_NOSIGNAL, 0)
	}
	if err != nil {
		cn.close()
		return
	}
	cn.sendInFlight = true
}

// close shuts the socket down; finishClose closes it once the ring holds nothing of it.
func (cn *conn) close() {
	if cn.state == connClosing {
		return
	}
	cn.state = connClosing
	cn.in.stalled = false
	_ = unix.Shutdown(cn.fd, unix.SHUT_RDWR)
	cn.finishClose()
}

func (cn *conn) finishClose() {
	if cn.state != connClosing || cn.recvInFlight || cn.sendInFlight {
		return
	}
	unix.Close(cn.fd)
	cn.fd = -1
	cn.s.removeConn(cn)
}

func (s *Shard) removeConn(cn *conn) {
	for i, c := range s.conns {
		if c == cn {
			s.conns = append(s.conns[:i], s.conns[i+1:]...)
			return
		}
	}
}

// expireConns closes, at a tick, the accepted peer connections past a time bound: a handshake that did
// not finish within HandshakeTimeoutTicks of the accept (on the accepting shard), and a frame whose
// rest did not come within PeerFrameTimeoutTicks of its first byte (on the shard that owns the
// connection; not while the shard itself holds the connection stalled).
func (s *Shard) expireConns() {
	now := s.tick.Number
	for i := len(s.conns) - 1; i >= 0; i-- { // backwards: close may remove s.conns[i]
		cn := s.conns[i]
		switch {
		case cn.state == connHandshaking || cn.state == connReplying || cn.state == connProving:
			if now-cn.acceptTick >= s.cfg.HandshakeTimeoutTicks {
				s.stats.HandshakeErrors.Add(1)
				s.cl.closes.note(&s.stats, now, closePeerHandshakeTimeout, "ticks", now-cn.acceptTick)
				cn.close()
			}
		case cn.state != connOpen || cn.in.stalled:
		case cn.frame.expired(now, s.cfg.PeerFrameTimeoutTicks):
			cn.closeFor(closePeerFrameTimeout, "ticks", now-cn.frame.startTick,
				"received", cn.in.frames.Buffered(), "missing", cn.in.frames.Pending())
		}
	}
}

// closeFor closes the connection for reason r: counted by reason and logged (rate-limited).
func (cn *conn) closeFor(r closeReason, attrs ...any) {
	cn.s.cl.closes.note(&cn.s.stats, cn.s.tick.Number, r, append(attrs, "peer", cn.peer.Node)...)
	cn.close()
}

// Keepalive of accepted peer connections: a peer whose host vanished (no FIN, no reset) is found by
// the kernel within peerKeepaliveIdleS + peerKeepaliveCount × peerKeepaliveIntervalS seconds of
// silence, and its receive fails (closePeerRecvError). Accepted peer connections have no idle
// timeout of their own: a link with nothing to send sends nothing (empty batches are not sent).
const (
	peerKeepaliveIdleS     = 30
	peerKeepaliveIntervalS = 10
	peerKeepaliveCount     = 3
)

// setPeerKeepalive turns TCP keepalive on for an accepted peer socket. A failure only leaves the
// socket without it: the connection still works, and a dialer that reconnects replaces it.
func setPeerKeepalive(fd int) {
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1)
	_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, peerKeepaliveIdleS)
	_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, peerKeepaliveIntervalS)
	_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPCNT, peerKeepaliveCount)
}

// handshakeBuf receives a peer's handshake: exactly one header and not a byte more, so no frame after
// it is read before the handshake is checked (R18).
type handshakeBuf struct {
	buf [wire.HeaderSize]byte
	n   int
}

// space is where the next bytes of the handshake are received.
func (b *handshakeBuf) space() []byte { return b.buf[b.n:] }

func (b *handshakeBuf) full() bool { return b.n == wire.HeaderSize }
