package shard

import (
	"errors"
	"fmt"
	"net/netip"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/ringstream/ringstream/internal/assert"
	"github.com/ringstream/ringstream/ring"
	"github.com/ringstream/ringstream/wire"
)

// linkState is where an outbound peer link is in its life.
type linkState uint8

const (
	linkDown        linkState = iota // no socket; reconnect at retryTick
	linkConnecting                   // Connect in flight
	linkHandshaking                  // our handshake sent, the peer's awaited (R18)
	linkUp                           // batches flow
	linkClosing                      // shut down, waiting for the ring to finish its operations
)

// Tags of a link's operations.
const (
	linkTagConnect uint64 = iota + 1
	linkTagSend
	linkTagRecv
	linkTagData
)

// link is this shard's TCP link to one peer node: it dials, handshakes, and sends this shard's batches
// and group frames to the peer from a per-peer outbox. It also reads what the peer sends back on it.
// When it fails it closes, drops what was not sent (counted) and reconnects after a capped exponential
// backoff with jitter.
type link struct {
	s     *Shard
	peer  Peer
	sa    unix.Sockaddr
	state linkState
	up    atomic.Bool // mirrors state == linkUp for Status readers on other goroutines
	fd    int

	// out is filled this tick; sending is in flight (two buffers of OutboxBytes capacity, swapped).
	out          []byte
	sending      []byte
	sendOff      int
	sendInFlight bool
	connInFlight bool
	recvInFlight bool

	// data holds the frames of SendData, sent from the owner's bytes; the head is in flight while
	// dataInFlight. iov is the in-flight SENDMSG's vector, kept here until its completion.
	data         dataQueue
	dataInFlight bool
	iov          [2][]byte
	dataNext     bool // the next send takes a data frame before the outbox (they alternate)
	refused      bool // a frame was refused for room: OnOutboxDrained is owed once all is sent

	// records are the Commit entries in out, sendingRecords those in sending: each group records
	// whether its member was reached when the send that carries its entry ends (R25).
	records        []sendRecord
	sendingRecords []sendRecord

	batch     wire.BatchWriter
	batchOpen bool
	replies   []wire.CommitReplyEntry // the reply outbox (R27), capacity ReplyOutboxEntries

	hello     handshakeBuf   // the peer's handshake, while handshaking
	in        peerReader     // frames, once up
	ours      wire.Handshake // the handshake sent on this connection (fresh nonce with a secret)
	handshake []byte         // its frame, kept until its send completes
	// proofPending: the outbox starts with the proof of the cluster secret; nothing else may be sent
	// before it (no data frame jumps ahead of it).
	proofPending bool

	attempts  uint
	retryTick uint64
	dialTick  uint64 // tick of the last connect: connect and handshake must finish in time
	lastErr   error
}

func newLink(s *Shard, p Peer) (*link, error) {
	sa, err := sockaddrOf(p.Addr)
	if err != nil {
		return nil, err
	}
	l := &link{
		s: s, peer: p, sa: sa, fd: -1,
		out:     make([]byte, 0, s.cfg.OutboxBytes),
		sending: make([]byte, 0, s.cfg.OutboxBytes),
		replies: make([]wire.CommitReplyEntry, 0, s.cfg.ReplyOutboxEntries),
		data:    newDataQueue(s.cfg.DataQueueFrames),
		in:      newPeerReader(s, p.Node, linkRecvBytes),
	}
	return l, nil
}

func sockaddrOf(ap netip.AddrPort) (unix.Sockaddr, error) {
	if !ap.IsValid() || ap.Port() == 0 {
		return nil, fmt.Errorf("%w: peer address %v", ErrConfig, ap)
	}
	if ap.Addr().Is4() {
		return &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}, nil
	}
	return &unix.SockaddrInet6{Port: int(ap.Port()), Addr: ap.Addr().As16()}, nil
}

func (l *link) isUp() bool { return l.state == linkUp }

// onTick reconnects a link whose backoff has passed, and gives up on a connect or handshake that
// took longer than HandshakeTimeoutTicks.
func (l *link) onTick() {
	now := l.s.tick.Number
	switch l.state {
	case linkDown:
		if now >= l.retryTick {
			l.connect()
		}
	case linkConnecting, linkHandshaking:
		if now-l.dialTick >= l.s.cfg.HandshakeTimeoutTicks {
			l.s.stats.HandshakeErrors.Add(1)
			l.fail(errHandshakeTimeout)
		}
	}
}

func (l *link) connect() {
	domain := unix.AF_INET
	if _, ok := l.sa.(*unix.SockaddrInet6); ok {
		domain = unix.AF_INET6
	}
	fd, err := unix.Socket(domain, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		l.backoff(fmt.Errorf("shard: socket: %w", err))
		return
	}
	_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	l.fd = fd
	if err := l.s.ring.Connect(l, linkTagConnect, fd, l.sa, 0); err != nil {
		unix.Close(fd)
		l.fd = -1
		l.backoff(fmt.Errorf("shard: connect: %w", err))
		return
	}
	l.connInFlight = true
	l.state = linkConnecting
	l.dialTick = l.s.tick.Number
	l.s.stats.LinkConnects.Add(1)
}

// Complete handles the link's ring operations.
func (l *link) Complete(c ring.Completion) {
	switch c.Tag {
	case linkTagConnect:
		l.connInFlight = false
		l.onConnect(c)
	case linkTagSend:
		l.sendInFlight = false
		l.onSend(c)
	case linkTagRecv:
		l.recvInFlight = false
		l.onRecv(c)
	case linkTagData:
		l.sendInFlight = false
		l.onDataSend(c)
		l.checkDrained()
	default:
		assert.True(false, "shard: link completion with an unknown tag")
	}
	l.finishClose()
}

func (l *link) onConnect(c ring.Completion) {
	if l.state != linkConnecting {
		return
	}
	if err := c.Err(); err != nil {
		l.fail(err)
		return
	}
	l.state = linkHandshaking
	l.hello.n = 0
	l.ours = l.s.handshake() // a fresh nonce for each connection
	l.handshake = wire.AppendHandshake(l.handshake[:0], l.ours)
	l.sending = append(l.sending[:0], l.handshake...)
	l.sendOff = 0
	l.postSend()
	l.postRecv()
}

func (l *link) onSend(c ring.Completion) {
	if l.state != linkUp && l.state != linkHandshaking {
		return
	}
	if c.Res <= 0 {
		l.fail(c.Err())
		return
	}
	l.s.stats.BytesSent.Add(uint64(c.Res))
	l.sendOff += int(c.Res)
	if l.sendOff < len(l.sending) {
		l.postSend() // a short send: the rest of the same buffer
		return
	}
	l.sending = l.sending[:0]
	l.sendOff = 0
	recordSends(l.sendingRecords, true)
	l.sendingRecords = l.sendingRecords[:0]
	l.kick()
	l.checkDrained()
}

func (l *link) onRecv(c ring.Completion) {
	if l.state != linkUp && l.state != linkHandshaking {
		return
	}
	if c.Res <= 0 {
		l.fail(c.Err())
		return
	}
	l.s.stats.BytesReceived.Add(uint64(c.Res))
	if l.state == linkHandshaking {
		l.hello.n += int(c.Res)
		if !l.hello.full() {
			l.postRecv()
			return
		}
		proof, err := l.checkHandshake()
		if err != nil {
			l.s.stats.HandshakeErrors.Add(1)
			if isAuthErr(err) {
				l.s.stats.AuthRefused.Add(1)
				l.s.log.Warn("shard: peer refused", "shard", l.s.index, "peer", l.peer.Node, "err", err)
			}
			l.fail(err)
			return
		}
		if len(l.s.cfg.Secret) > 0 {
			// The outbox is empty while the link is not up: the proof goes first, ahead of any batch.
			assert.True(len(l.out) == 0, "shard: outbox filled before the link was up")
			l.out = wire.AppendHandshakeProof(l.out, l.s.cfg.Cluster, l.s.cfg.Node, proof)
			l.proofPending = true
		}
		l.state = linkUp
		l.up.Store(true)
		l.attempts = 0
		l.s.stats.LinksUp.Add(1)
		l.s.log.Info("shard: link up", "shard", l.s.index, "peer", l.peer.Node)
		l.postRecv()
		l.kick()
		l.s.onLinkUp(l.peer.Node)
		return
	}
	l.receive(int(c.Res))
}

// receive hands the frames completed by n bytes just received (0: retry a stalled frame) to the shard
// and reads on, unless a full queue stalled it. A corrupt header fails the link.
func (l *link) receive(n int) {
	if err := l.in.receive(n); err != nil {
		l.fail(err)
		return
	}
	if !l.in.stalled {
		l.postRecv()
	}
}

func (l *link) postRecv() {
	if l.recvInFlight {
		return
	}
	var buf []byte
	if l.state == linkHandshaking {
		buf = l.hello.space() // the handshake and not a byte more
	} else {
		buf = l.in.free()
	}
	err := l.s.ring.Recv(l, linkTagRecv, l.fd, buf, 0, 0)
	if errors.Is(err, ring.ErrQueueFull) {
		l.s.ring.Submit()
		err = l.s.ring.Recv(l, linkTagRecv, l.fd, buf, 0, 0)
	}
	if err != nil {
		l.fail(err)
		return
	}
	l.recvInFlight = true
}

func (l *link) postSend() {
	err := l.s.ring.Send(l, linkTagSend, l.fd, l.sending[l.sendOff:], unix.MSG_NOSIGNAL, 0)
	if errors.Is(err, ring.ErrQueueFull) {
		l.s.ring.Submit()
		err = l.s.ring.Send(l, linkTagSend, l.fd, l.sending[l.sendOff:], unix.MSG_NOSIGNAL, 0)
	}
	if err != nil {
		l.fail(err)
		return
	}
	l.sendInFlight = true
}

// kick starts the next send when the link is up and no send is in flight: the outbox (batches and
// SendFrame frames, one buffer) or the head data frame, taking turns when both wait.
func (l *link) kick() {
	if l.state != linkUp || l.sendInFlight {
		return
	}
	outReady := len(l.out) > 0 && !l.batchOpen
	if l.proofPending && !outReady {
		return // the proof leaves first, with the batches appended behind it
	}
	if l.data.n > 0 && (l.dataNext || !outReady) && !l.proofPending {
		l.dataNext = false
		l.sendOff = 0
		l.postData()
		return
	}
	if !outReady {
		return
	}
	l.dataNext = true
	l.proofPending = false
	l.out, l.sending = l.sending[:0], l.out
	l.records, l.sendingRecords = l.sendingRecords[:0], l.records
	l.sendOff = 0
	l.postSend()
}

// checkDrained tells the groups that the link sent everything, once after a refusal for room.
func (l *link) checkDrained() {
	if !l.refused || l.state != linkUp || l.sendInFlight || len(l.out) > 0 || l.data.n > 0 {
		return
	}
	l.refused = false
	l.s.onOutboxDrained(l.peer.Node)
}

// sendFrame appends a whole frame to the outbox (Sender.SendFrame).
func (l *link) sendFrame(frame []byte) error {
	assert.True(!l.batchOpen, "shard: frame appended inside an open batch")
	if l.state != linkUp {
		l.s.stats.FramesDroppedLinkDown.Add(1)
		return ErrLinkDown
	}
	room := cap(l.out) - l.s.cfg.batchReserve() // the tick's batches always fit (R13)
	if len(frame) > room {
		return fmt.Errorf("%w: %d bytes, an outbox takes %d", ErrFrameTooLarge, len(frame), room)
	}
	if len(l.out)+len(frame) > room {
		l.refused = true
		return ErrOutboxFull
	}
	l.out = append(l.out, frame...)
	return nil
}

// fail closes the link after an error: the socket is shut down so operations in flight complete, what
// was not sent is dropped and counted (R30), and a reconnect is scheduled.
func (l *link) fail(err error) {
	if l.state == linkDown || l.state == linkClosing {
		return
	}
	if l.state == linkUp {
		l.s.stats.LinksUp.Add(-1)
		l.s.log.Warn("shard: link down", "shard", l.s.index, "peer", l.peer.Node, "err", err)
	}
	l.up.Store(false)
	l.s.stats.LinkFailures.Add(1)
	l.lastErr = err
	st := &l.s.stats
	st.BytesDroppedSendFail.Add(uint64(len(l.out) + len(l.sending) - l.sendOff))
	st.RepliesDroppedLinkDown.Add(uint64(len(l.replies)))
	l.out = l.out[:0]
	l.proofPending = false
	l.replies = l.replies[:0]
	l.batchOpen = false
	l.refused = false
	recordSends(l.records, false) // R25: these entries never reached the peer
	recordSends(l.sendingRecords, false)
	l.records, l.sendingRecords = l.records[:0], l.sendingRecords[:0]
	l.dropData()
	l.in.reset() // the old connection's bytes are gone with it
	wasUp := l.state == linkUp
	l.state = linkClosing
	if l.fd >= 0 {
		_ = unix.Shutdown(l.fd, unix.SHUT_RDWR)
	}
	l.finishClose()
	if wasUp {
		l.s.onLinkDown(l.peer.Node)
	}
}

// finishClose closes the socket once the ring holds no operation on it.
func (l *link) finishClose() {
	if l.state != linkClosing || l.sendInFlight || l.recvInFlight || l.connInFlight {
		return
	}
	if l.fd >= 0 {
		unix.Close(l.fd)
		l.fd = -1
	}
	l.sending = l.sending[:0]
	l.sendOff = 0
	l.backoff(l.lastErr)
}

// backoff schedules the next connect: base << attempts ticks, capped, then a jitter of up to half of
// it from the shard's seeded source.
func (l *link) backoff(err error) {
	l.state = linkDown
	l.lastErr = err
	cfg := l.s.cfg
	delay := cfg.ReconnectMaxTicks
	if l.attempts < 32 {
		delay = min(cfg.ReconnectMaxTicks, cfg.ReconnectBaseTicks<<l.attempts)
	}
	l.attempts++
	half := delay / 2
	l.retryTick = l.s.tick.Number + delay - half + l.s.rng.Uint64N(half+1)
}

// shutdown starts closing the link for Stop.
func (l *link) shutdown() {
	switch l.state {
	case linkDown:
		return
	case linkClosing:
		return
	}
	l.fail(errStopping)
}

// Reasons a link closes that are not I/O errors; they are logged and kept as the link's last error.
var (
	errStopping         = errors.New("shard: stopping")
	errHandshakeTimeout = errors.New("shard: connect and handshake took longer than HandshakeTimeoutTicks")
)
