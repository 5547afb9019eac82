package shard

import (
	"fmt"
	"net/netip"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/ringstream/ringstream/ring"
	"github.com/ringstream/ringstream/wire"
)

// ClientConfig bounds what one client connection may hold on the node, how long it may take, and
// how many connections the node takes. Zero values take the defaults.
type ClientConfig struct {
	// OutboxBytes bounds a connection's unsent replies (default 4 MiB): while they reach it, the
	// connection reads no more requests, so a client that does not read its replies is pushed back
	// on through TCP.
	OutboxBytes int
	// RequestsMax bounds a connection's requests handed on and not answered yet (default 64); the
	// connection reads no more until one is answered.
	RequestsMax int
	// PendingBytesMax bounds the bytes of a connection's requests handed on and not answered yet
	// (default 16 MiB, at least FrameBytesMax so that the largest frame can always be taken): routed
	// requests are copies, and 64 large produces would otherwise hold 64 frames. The connection reads
	// no more until replies bring it below the bound.
	PendingBytesMax int
	// FrameBytesMax is the largest client frame, header included (default 8 MiB + 256). A larger
	// one is answered with an error and closes the connection.
	FrameBytesMax int
	// ConnectionsMax bounds the node's client connections, handshaking ones included, over all of its
	// shards (default 10000). A connection accepted past it is closed at once, counted and logged.
	// The process's descriptor limit must leave room for it beside the node's own files.
	ConnectionsMax int
	// HandshakeTimeoutTicks bounds a client's handshake from its accept (default: Config's
	// HandshakeTimeoutTicks, 500).
	HandshakeTimeoutTicks uint64
	// IdleTimeoutTicks closes an open connection with nothing under way (no request unanswered, no
	// reply unsent, no part of a frame received) for this long (default 30000, 5 minutes at 10 ms).
	// A long-poll fetch is a request unanswered: its connection is not idle. TimeoutNever: never.
	IdleTimeoutTicks uint64
	// FrameTimeoutTicks bounds a frame from its first byte to its last (default 3000, 30 s at 10 ms):
	// a header promising a body that does not come closes the connection. Time the connection spends
	// not reading by the node's choice (a bound, a full queue) is not counted. TimeoutNever: never.
	FrameTimeoutTicks uint64
}

// TimeoutNever turns a client timeout in ticks off.
const TimeoutNever = ^uint64(0)

func (c ClientConfig) withDefaults(handshakeTicks uint64) ClientConfig {
	if c.OutboxBytes == 0 {
		c.OutboxBytes = 4 << 20
	}
	if c.RequestsMax == 0 {
		c.RequestsMax = 64
	}
	if c.FrameBytesMax == 0 {
		c.FrameBytesMax = 8<<20 + wire.HeaderSize
	}
	if c.PendingBytesMax == 0 {
		c.PendingBytesMax = max(16<<20, c.FrameBytesMax)
	}
	if c.ConnectionsMax == 0 {
		c.ConnectionsMax = 10000
	}
	if c.HandshakeTimeoutTicks == 0 {
		c.HandshakeTimeoutTicks = handshakeTicks
	}
	if c.IdleTimeoutTicks == 0 {
		c.IdleTimeoutTicks = 30000
	}
	if c.FrameTimeoutTicks == 0 {
		c.FrameTimeoutTicks = 3000
	}
	return c
}

func (c ClientConfig) validate() error {
	switch {
	case c.OutboxBytes < 4096:
		return fmt.Errorf("%w: client outbox bytes %d is below 4096", ErrConfig, c.OutboxBytes)
	case c.RequestsMax < 1:
		return fmt.Errorf("%w: client requests max %d is below 1", ErrConfig, c.RequestsMax)
	case c.FrameBytesMax < wire.HeaderSize || c.FrameBytesMax > wire.FrameSizeMax:
		return fmt.Errorf("%w: client frame bytes max %d, want %d..%d", ErrConfig, c.FrameBytesMax,
			wire.HeaderSize, wire.FrameSizeMax)
	case c.PendingBytesMax < c.FrameBytesMax:
		return fmt.Errorf("%w: client pending bytes max %d is below client frame bytes max %d: the largest "+
			"frame could never be taken", ErrConfig, c.PendingBytesMax, c.FrameBytesMax)
	case c.ConnectionsMax < 1:
		return fmt.Errorf("%w: client connections max %d is below 1", ErrConfig, c.ConnectionsMax)
	case c.IdleTimeoutTicks < c.HandshakeTimeoutTicks:
		return fmt.Errorf("%w: client idle timeout (%d ticks) is below the client handshake timeout (%d ticks)",
			ErrConfig, c.IdleTimeoutTicks, c.HandshakeTimeoutTicks)
	}
	return nil
}

// ClientRequest names a client request and where its reply goes: the shard holding the connection,
// the connection (an id never reused on that shard), the request id the reply echoes, and the stream
// the request addresses (the header's Group; 0 for requests that name no stream id).
type ClientRequest struct {
	Shard     int
	Conn      uint64
	RequestID uint64
	Stream    uint64
	// Bytes is the request frame's size, counted against ClientConfig.PendingBytesMax until the
	// reply: pass the request back to Shard.ReplyClient as it came.
	Bytes int
	// Kafka marks a request the KafkaHandler submitted for a Kafka request (SubmitClientRequest):
	// its reply goes to KafkaHandler.OnKafkaReply, and Conn is the Kafka connection.
	Kafka bool
}

// ClientHandler serves client requests. The node sets it with SetClientHandler before Start.
type ClientHandler interface {
	// OnClientRequest runs on the shard that owns req.Stream (ShardOf), or on the connection's shard
	// when the request names no stream. h and body are valid only during the call. Every request
	// is answered exactly once with Shard.ReplyClient (an error reply at least): the connection
	// counts its unanswered requests against ClientConfig.RequestsMax.
	OnClientRequest(s *Shard, req ClientRequest, h *wire.Header, body []byte)
}

// ClientStats counts the client listener's work on one shard.
type ClientStats struct {
	Accepted          atomic.Uint64
	Open              atomic.Int64  // connections past the handshake
	HandshakeErrors   atomic.Uint64 // handshakes refused (bad frame, revision, cluster, secret)
	AuthRefused       atomic.Uint64 // of those, refused for the cluster secret
	HandshakeTimeouts atomic.Uint64 // closed for not finishing the handshake within HandshakeTimeoutTicks
	// Connections closed by the node for a bound or a fault are counted by reason in
	// Stats.ConnectionsClosed (client_limits.go).
	Requests       atomic.Uint64 // requests handed to the handler on this shard
	Routed         atomic.Uint64 // requests this shard sent to the shard owning their stream
	BadRequests    atomic.Uint64 // frames answered with CodeInvalidRequest (sound header, bad contents)
	BrokenFrames   atomic.Uint64 // connections closed for a header that fails its checks or a frame too large
	RepliesDropped atomic.Uint64 // replies for a connection that had closed
	Pushback       atomic.Uint64 // times a connection stopped reading: outbox, requests or queue full
}

// SetClientHandler sets the handler of client requests. Call it before Start.
func (n *Node) SetClientHandler(h ClientHandler) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.started {
		return ErrStarted
	}
	n.clientHandler = h
	return nil
}

// ClientAddr is the address clients connect to (the zero value when there is no client listener).
func (n *Node) ClientAddr() netip.AddrPort { return n.clientAddr }

// listenClients binds one listening socket per shard to ClientListen with SO_REUSEPORT: the kernel
// spreads new connections over them and each shard accepts on its own.
func (n *Node) listenClients() error {
	if !n.cfg.ClientListen.IsValid() {
		return nil
	}
	want := n.cfg.ClientListen
	for range n.cfg.Shards {
		fd, bound, err := listenReusePort(want)
		if err != nil {
			n.closeClientListeners()
			return fmt.Errorf("shard: client listener %v: %w", n.cfg.ClientListen, err)
		}
		n.clientFDs = append(n.clientFDs, fd)
		want, n.clientAddr = bound, bound // port 0: the others join the port the first one got
	}
	return nil
}

func listenReusePort(ap netip.AddrPort) (int, netip.AddrPort, error) {
	domain := unix.AF_INET
	var sa unix.Sockaddr = &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}
	if !ap.Addr().Is4() {
		domain = unix.AF_INET6
		sa = &unix.SockaddrInet6{Port: int(ap.Port()), Addr: ap.Addr().As16()}
	}
	fd, err := unix.Socket(domain, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, netip.AddrPort{}, fmt.Errorf("socket: %w", err)
	}
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); err != nil {
		unix.Close(fd)
		return -1, netip.AddrPort{}, fmt.Errorf("SO_REUSEPORT: %w", err)
	}
	if err := unix.Bind(fd, sa); err != nil {
		unix.Close(fd)
		return -1, netip.AddrPort{}, fmt.Errorf("bind: %w", err)
	}
	if err := unix.Listen(fd, 512); err != nil {
		unix.Close(fd)
		return -1, netip.AddrPort{}, fmt.Errorf("listen: %w", err)
	}
	got, err := unix.Getsockname(fd)
	if err != nil {
		unix.Close(fd)
		return -1, netip.AddrPort{}, fmt.Errorf("getsockname: %w", err)
	}
	switch b := got.(type) {
	case *unix.SockaddrInet4:
		return fd, netip.AddrPortFrom(netip.AddrFrom4(b.Addr), uint16(b.Port)), nil
	case *unix.SockaddrInet6:
		return fd, netip.AddrPortFrom(netip.AddrFrom16(b.Addr), uint16(b.Port)), nil
	}
	unix.Close(fd)
	return -1, netip.AddrPort{}, fmt.Errorf("getsockname: unexpected address %T", got)
}

func (n *Node) closeClientListeners() {
	for _, fd := range n.clientFDs {
		unix.Close(fd)
	}
	for _, fd := range n.kafkaFDs {
		unix.Close(fd)
	}
	n.clientFDs, n.kafkaFDs = nil, nil
}

// clientShard is one shard's part of the client listener: its listening socket and its connections.
type clientShard struct {
	s      *Shard
	client acceptor // the shard's client listening socket
	kafka  acceptor // the shard's Kafka listening socket (kafka.go)
	conns  []*clientConn
	byID   map[uint64]*clientConn
	nextID uint64
	// closes rate-limits the log lines of refused and closed connections, the shard's peer
	// connections' included (client_limits.go).
	closes closeLog
}

// start readies the shard's client side and posts its first Accept (shard goroutine).
func (c *clientShard) start(s *Shard) {
	c.s = s
	c.client = acceptor{c: c, fd: -1}
	c.kafka = acceptor{c: c, fd: -1, kafka: true}
	c.byID = make(map[uint64]*clientConn)
	c.closes = closeLog{log: s.log, shard: s.index, intervalTicks: closeLogIntervalTicks(s.cfg.Tick)}
	if s.index < len(s.node.clientFDs) {
		c.client.fd = s.node.clientFDs[s.index]
		c.client.arm()
	}
	if s.index < len(s.node.kafkaFDs) && s.node.kafkaHandler != nil {
		c.kafka.fd = s.node.kafkaFDs[s.index]
		c.kafka.arm()
	}
}

// accepted takes a connection a's listening socket accepted: a client connection, which starts
// with its handshake, or a Kafka connection, which serves requests at once.
func (c *clientShard) accepted(a *acceptor, r ring.Completion) {
	s := c.s
	if r.Res < 0 {
		if !s.draining {
			s.log.Warn("shard: client accept failed", "shard", s.index, "kafka", a.kafka, "err", r.Err())
			a.retry = true // out of fds or transient: retried at the next tick
		}
		return
	}
	fd := int(r.Res)
	if s.draining {
		unix.Close(fd)
		return
	}
	a.arm()
	shardFull, connsMax := closeClientShardFull, closeClientConnectionsMax
	if a.kafka {
		s.stats.Kafka.Accepted.Add(1)
		shardFull, connsMax = closeKafkaShardFull, closeKafkaConnectionsMax
	} else {
		s.stats.Client.Accepted.Add(1)
	}
	if len(c.conns) >= ClientConnsShardMax(s.cfg.Ring.Entries) {
		c.closes.note(&s.stats, s.tick.Number, shardFull, "limit", ClientConnsShardMax(s.cfg.Ring.Entries),
			"ring_entries", s.cfg.Ring.Entries)
		unix.Close(fd)
		return
	}
	if !s.node.clients.admit(s.cfg.Client.ConnectionsMax) {
		c.closes.note(&s.stats, s.tick.Number, connsMax, "limit", s.cfg.Client.ConnectionsMax)
		unix.Close(fd)
		return
	}
	_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	c.nextID++
	now := s.tick.Number
	cn := &clientConn{s: s, id: c.nextID, fd: fd, state: clientHello, acceptTick: now, lastActiveTick: now}
	if a.kafka {
		cn.kafka, cn.state, cn.open = true, clientOpen, true
		cn.kin = newKafkaReader(clientRecvBytes, s.cfg.Client.FrameBytesMax)
		cn.takeFn = cn.takeKafka
		s.stats.Kafka.Open.Add(1)
	}
	c.conns = append(c.conns, cn)
	c.byID[cn.id] = cn
	cn.postRecv()
}

// onTick retries a failed Accept and closes the connections past a time bound.
func (c *clientShard) onTick() {
	if c.s == nil {
		return // a shard ticked without its loop (tests)
	}
	for _, a := range [...]*acceptor{&c.client, &c.kafka} {
		if a.retry {
			a.retry = false
			a.arm()
		}
	}
	c.expire(c.s.tick.Number)
}

// drain shuts the listening socket and every connection down for Stop.
func (c *clientShard) drain() {
	for _, a := range [...]*acceptor{&c.client, &c.kafka} {
		if a.fd >= 0 {
			_ = unix.Shutdown(a.fd, unix.SHUT_RDWR)
		}
	}
	for i := len(c.conns) - 1; i >= 0; i-- {
		c.conns[i].close()
	}
}

// resume retries the connections that stopped on a full queue or at a bound.
func (c *clientShard) resume() {
	for i := len(c.conns) - 1; i >= 0; i-- {
		if cn := c.conns[i]; cn.stalled {
			cn.receive(0)
		}
	}
}

func (c *clientShard) remove(cn *clientConn) {
	delete(c.byID, cn.id)
	for i, x := range c.conns {
		if x == cn {
			c.conns = append(c.conns[:i], c.conns[i+1:]...)
			return
		}
	}
}

// ReplyClient sends frame, a whole reply frame echoing req.RequestID, on req's connection. Call it on
// the shard goroutine of s, once per request. A reply for a connection on another shard goes there
// through the cross-shard queue (frame is copied); when that queue is full, nothing is queued and
// the error wraps ErrOutboxFull: try again on a later turn. A reply to a closed connection is dropped
// and counted (ClientStats.RepliesDropped).
func (s *Shard) ReplyClient(req ClientRequest, frame []byte) error {
	if req.Shard == s.index {
		s.cl.deliver(req, frame)
		return nil
	}
	if req.Shard < 0 || req.Shard >= len(s.node.shards) {
		return fmt.Errorf("%w: client reply for shard %d of %d", ErrConfig, req.Shard, len(s.node.shards))
	}
	m := &s.scratch
	*m = message{kind: messageClientReply, client: req, frame: append([]byte(nil), frame...)}
	if !s.push(req.Shard, m) {
		*m = message{}
		return fmt.Errorf("%w: the queue to shard %d is full", ErrOutboxFull, req.Shard)
	}
	return nil
}

// deliver puts a reply in its connection's outbox.
func (c *clientShard) deliver(req ClientRequest, frame []byte) {
	if req.Kafka {
		c.s.node.kafkaHandler.OnKafkaReply(c.s, req, frame)
		return
	}
	cn := c.byID[req.Conn]
	if cn == nil || cn.state != clientOpen {
		c.s.stats.Client.RepliesDropped.Add(1)
		return
	}
	if cn.pending > 0 {
		cn.pending--
	}
	cn.pendingBytes = max(0, cn.pendingBytes-req.Bytes)
	cn.lastActiveTick = c.s.tick.Number
	cn.out = append(cn.out, frame...)
	cn.kick()
}

// handleMessage takes a client request routed here by the connection's shard, or a reply routed
// back to it.
func (c *clientShard) handleMessage(m *message) {
	s := c.s
	switch m.kind {
	case messageClientReply:
		c.deliver(m.client, m.frame)
	case messageClientRequest:
		h, body, err := wire.ParseFrame(m.frame)
		if err != nil || s.node.clientHandler == nil {
			return // checked by the connection's shard before it was routed
		}
		s.header = h
		s.stats.Client.Requests.Add(1)
		s.node.clientHandler.OnClientRequest(s, m.client, &s.header, body)
	}
}

// checkRequest decodes a client request as its handler will, so that a malformed one is answered by
// the shard that received it with the decoder's reason. It returns an error for anything that is not
// a request a client may send once its handshake is done.
func checkRequest(h *wire.Header, body []byte) error {
	var err error
	switch h.Command {
	case wire.CommandCreateStream:
		_, err = wire.DecodeCreateStream(h, body)
	case wire.CommandDeleteStream:
		_, err = wire.DecodeDeleteStream(h, body)
	case wire.CommandListStreams:
		_, err = wire.DecodeListStreams(h, body)
	case wire.CommandProduce:
		_, err = wire.DecodeProduce(h, body)
	case wire.CommandFetch:
		_, err = wire.DecodeFetch(h, body)
	case wire.CommandCommitCursor:
		_, err = wire.DecodeCommitCursor(h, body)
	case wire.CommandGetCursor:
		_, err = wire.DecodeGetCursor(h, body)
	case wire.CommandListCursors:
		_, err = wire.DecodeListCursors(h, body)
	case wire.CommandDeleteCursor:
		_, err = wire.DecodeDeleteCursor(h, body)
	case wire.CommandLookupStream:
		_, err = wire.DecodeLookupStream(h, body)
	case wire.CommandCreateStreams:
		_, err = wire.DecodeCreateStreams(h, body)
	case wire.CommandDeleteStreams:
		_, err = wire.DecodeDeleteStreams(h, body)
	default:
		err = fmt.Errorf("%w: %s is not a client request", wire.ErrUnknownCommand, h.Command)
	}
	return err
}

// clientMetrics adds the client listener's counters to the shard collector.
func clientMetrics(counter, gauge func(name, help string, get func(*Stats) float64)) {
	u := func(a *atomic.Uint64) float64 { return float64(a.Load()) }
	counter("client_accepted_total", "Client connections accepted.", func(s *Stats) float64 { return u(&s.Client.Accepted) })
	counter("client_handshake_errors_total", "Client handshakes refused.", func(s *Stats) float64 { return u(&s.Client.HandshakeErrors) })
	counter("client_auth_refused_total", "Client handshakes refused for the cluster secret.", func(s *Stats) float64 { return u(&s.Client.AuthRefused) })
	counter("client_handshake_timeouts_total", "Client connections closed for an unfinished handshake.", func(s *Stats) float64 { return u(&s.Client.HandshakeTimeouts) })
	counter("client_requests_total", "Client requests handed to the handler.", func(s *Stats) float64 { return u(&s.Client.Requests) })
	counter("client_requests_routed_total", "Client requests sent to the shard owning their stream.", func(s *Stats) float64 { return u(&s.Client.Routed) })
	counter("client_bad_requests_total", "Client frames answered with an invalid-request error.", func(s *Stats) float64 { return u(&s.Client.BadRequests) })
	counter("client_broken_frames_total", "Client connections closed for a bad header or a frame too large.", func(s *Stats) float64 { return u(&s.Client.BrokenFrames) })
	counter("client_replies_dropped_total", "Replies for client connections that had closed.", func(s *Stats) float64 { return u(&s.Client.RepliesDropped) })
	counter("client_pushback_total", "Times a client connection stopped reading at a bound.", func(s *Stats) float64 { return u(&s.Client.Pushback) })
	gauge("client_connections", "Client connections past their handshake.", func(s *Stats) float64 { return float64(s.Client.Open.Load()) })
}
