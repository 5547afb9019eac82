package shard

import (
	"errors"
	"fmt"
	"net/netip"
	"sync/atomic"

	"github.com/ringstream/ringstream/ring"
	"github.com/ringstream/ringstream/wire"
)

// The Kafka listener: one more listening socket per shard (Config.KafkaListen, SO_REUSEPORT), whose
// connections are client connections (clientConn) in Kafka mode. They share the client listener's
// machinery: the node's connection bound (ClientConfig.ConnectionsMax counts both listeners), each
// shard's share of its ring, the outbox, request and pending-bytes bounds, the frame and idle
// timeouts, and the counted and logged closes (with the listener label "kafka"). What differs is the
// framing (an int32 size prefix, kafkaReader), that there is no handshake, and that the frames go to
// the KafkaHandler on the connection's shard instead of the ClientHandler.

// KafkaHandler serves the Kafka listener's requests. The node sets it with SetKafkaHandler before
// Start. Every method runs on the goroutine of the shard holding the connection.
type KafkaHandler interface {
	// OnKafkaRequest takes one whole request, its size prefix stripped; frame is valid only during
	// the call. A nil error promises exactly one Shard.KafkaRespond for the request, in any later
	// turn. An error means the request could not be read at all (its header breaks a rule): the
	// connection is closed, counted and logged with the error, which names the rule.
	OnKafkaRequest(s *Shard, conn uint64, frame []byte) error
	// OnKafkaReply takes the reply to a client request the handler submitted with
	// SubmitClientRequest (req.Kafka set), back on the shard of req.Conn; frame is valid only during
	// the call. It comes even when the connection closed since.
	OnKafkaReply(s *Shard, req ClientRequest, frame []byte)
	// OnKafkaClosed says the connection is gone: its requests not answered yet are dropped.
	OnKafkaClosed(s *Shard, conn uint64)
}

// KafkaStats counts the Kafka listener's work on one shard. Closes by reason are in
// Stats.ConnectionsClosed (listener "kafka").
type KafkaStats struct {
	Accepted  atomic.Uint64
	Open      atomic.Int64
	Requests  atomic.Uint64 // requests handed to the KafkaHandler
	Responses atomic.Uint64 // responses queued (acks=0 produces have none)
	Submitted atomic.Uint64 // client requests submitted by the handler (SubmitClientRequest)
	Refused   atomic.Uint64 // submissions refused: the queue to the stream's shard was full
}

// SetKafkaHandler sets the handler of Kafka requests. Call it before Start.
func (n *Node) SetKafkaHandler(h KafkaHandler) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.started {
		return ErrStarted
	}
	n.kafkaHandler = h
	return nil
}

// KafkaAddr is the address Kafka clients connect to (the zero value without a Kafka listener).
func (n *Node) KafkaAddr() netip.AddrPort { return n.kafkaAddr }

// listenKafka binds one listening socket per shard to KafkaListen with SO_REUSEPORT.
func (n *Node) listenKafka() error {
	if !n.cfg.KafkaListen.IsValid() {
		return nil
	}
	want := n.cfg.KafkaListen
	for range n.cfg.Shards {
		fd, bound, err := listenReusePort(want)
		if err != nil {
			n.closeClientListeners()
			return fmt.Errorf("shard: kafka listener %v: %w", n.cfg.KafkaListen, err)
		}
		n.kafkaFDs = append(n.kafkaFDs, fd)
		want, n.kafkaAddr = bound, bound
	}
	return nil
}

// acceptor is one listening socket of a shard: the client listener's or the Kafka listener's.
type acceptor struct {
	c         *clientShard
	fd        int // -1: no such listener
	kafka     bool
	accepting bool
	retry     bool
}

func (a *acceptor) arm() {
	if a.fd < 0 || a.accepting || a.c.s.draining {
		return
	}
	if err := a.c.s.ring.Accept(a, 0, a.fd, 0); err != nil {
		a.retry = true
		return
	}
	a.accepting = true
}

// Complete handles the listening socket's Accept.
func (a *acceptor) Complete(r ring.Completion) {
	a.accepting = false
	a.c.accepted(a, r)
}

// KafkaRespond queues resp, a whole response with its size prefix, on Kafka connection conn of this
// shard, and counts the request answered; a nil resp answers a request that has no response (a
// produce with acks=0). A connection that closed is skipped.
func (s *Shard) KafkaRespond(conn uint64, resp []byte) {
	cn := s.cl.byID[conn]
	if cn == nil || !cn.kafka || cn.state != clientOpen {
		return
	}
	if cn.pending > 0 {
		cn.pending--
	}
	cn.lastActiveTick = s.tick.Number
	if resp == nil {
		return // a stalled connection is retried by the shard's resume
	}
	s.stats.Kafka.Responses.Add(1)
	cn.out = append(cn.out, resp...)
	cn.kick()
}

// ErrQueueFull is returned by SubmitClientRequest when the queue to the stream's shard is full.
var ErrQueueFull = errors.New("shard: the cross-shard queue is full")

// SubmitClientRequest hands frame, a whole client request frame built by the Kafka handler, to the
// ClientHandler on the shard of req.Stream (this one when it is 0), as a client connection's frame
// would be; req.Shard must be this shard, req.Kafka set. Its reply comes back through
// KafkaHandler.OnKafkaReply. frame is copied when it goes to another shard.
func (s *Shard) SubmitClientRequest(req ClientRequest, frame []byte) error {
	if !req.Kafka || req.Shard != s.index || s.node.clientHandler == nil {
		return fmt.Errorf("%w: a kafka submission needs Kafka set, this shard and a client handler", ErrConfig)
	}
	h, body, err := wire.ParseFrame(frame)
	if err != nil {
		return fmt.Errorf("shard: kafka submission: %w", err)
	}
	target := s.index
	if req.Stream != 0 {
		target = ShardOf(req.Stream, len(s.node.shards))
	}
	if target != s.index {
		m := &s.scratch
		*m = message{kind: messageClientRequest, client: req, frame: append([]byte(nil), frame...)}
		if !s.push(target, m) {
			*m = message{}
			s.stats.Kafka.Refused.Add(1)
			return ErrQueueFull
		}
		s.stats.Kafka.Submitted.Add(1)
		return nil
	}
	s.stats.Kafka.Submitted.Add(1)
	s.header = h
	s.node.clientHandler.OnClientRequest(s, req, &s.header, body)
	return nil
}

// takeKafka hands one Kafka frame of the connection to the handler, or stalls at a bound.
func (cn *clientConn) takeKafka(frame []byte) error {
	s := cn.s
	cfg := &s.cfg.Client
	if cn.pending >= cfg.RequestsMax || len(cn.out)+len(cn.sending)-cn.sendOff >= cfg.OutboxBytes {
		return wire.ErrStall
	}
	cn.framesDone++
	cn.pending++
	s.stats.Kafka.Requests.Add(1)
	if err := s.node.kafkaHandler.OnKafkaRequest(s, cn.id, frame); err != nil {
		cn.pending--
		return err
	}
	return nil
}

// receiveKafka hands on the Kafka frames completed by n bytes (0: retry a stalled one) and reads on.
func (cn *clientConn) receiveKafka(n int) {
	err := cn.kin.commit(n, cn.takeFn)
	was := cn.stalled
	cn.stalled = errors.Is(err, wire.ErrStall)
	switch {
	case cn.stalled:
		if !was {
			cn.s.stats.Client.Pushback.Add(1)
		}
		return
	case errors.Is(err, errKafkaFrameTooLarge):
		cn.closeFor(closeClientFrameTooLarge, "err", err)
		return
	case err != nil:
		cn.closeFor(closeClientBrokenFrame, "err", err)
		return
	}
	cn.markFrame()
	cn.postRecv()
}

// kafkaReasons maps a client close reason to the Kafka listener's.
var kafkaReasons = [closeReasons]closeReason{
	closeClientConnectionsMax: closeKafkaConnectionsMax,
	closeClientShardFull:      closeKafkaShardFull,
	closeClientIdleTimeout:    closeKafkaIdleTimeout,
	closeClientFrameTimeout:   closeKafkaFrameTimeout,
	closeClientFrameTooLarge:  closeKafkaFrameTooLarge,
	closeClientBrokenFrame:    closeKafkaBadRequest,
	closeClientClosedMidFrame: closeKafkaClosedMidFrame,
	closeClientClosedMidReply: closeKafkaClosedMidReply,
}

// reason is r as this connection's listener counts it.
func (cn *clientConn) reason(r closeReason) closeReason {
	if cn.kafka && kafkaReasons[r] != 0 {
		return kafkaReasons[r]
	}
	return r
}

func kafkaMetrics(counter func(string, string, func(*Stats) float64), gauge func(string, string, func(*Stats) float64)) {
	u := func(a *atomic.Uint64) float64 { return float64(a.Load()) }
	counter("kafka_accepted_total", "Kafka connections accepted.", func(s *Stats) float64 { return u(&s.Kafka.Accepted) })
	counter("kafka_requests_total", "Kafka requests handed to the Kafka handler.", func(s *Stats) float64 { return u(&s.Kafka.Requests) })
	counter("kafka_responses_total", "Kafka responses queued.", func(s *Stats) float64 { return u(&s.Kafka.Responses) })
	counter("kafka_submitted_total", "Client requests submitted for Kafka requests.", func(s *Stats) float64 { return u(&s.Kafka.Submitted) })
	counter("kafka_refused_total", "Client requests for Kafka requests refused on a full cross-shard queue.",
		func(s *Stats) float64 { return u(&s.Kafka.Refused) })
	gauge("kafka_open", "Kafka connections open.", func(s *Stats) float64 { return float64(s.Kafka.Open.Load()) })
}
