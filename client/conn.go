package client

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/ringstream/ringstream/wire"
)

const (
	connReadBytes      = 64 << 10 // the FrameReader's buffer; larger replies grow it while pending
	handshakeBodyMax   = wire.MessageSizeMax
	errConnClosedByUs  = "client: connection closed"
	errReplyWithoutReq = "reply to request id 0"
)

// call is one request in flight and, once done, its reply: the header and a copy of the body. A call is
// reused (a Producer and a Consumer each keep one), so body keeps its capacity.
type call struct {
	id      uint64
	done    chan struct{} // one token per reply
	h       wire.Header
	body    []byte
	err     error
	out     []byte    // the request frame, built here
	expires time.Time // when the node counts as silent (zero: never); read by the watchdog under conn.mu
	route   Route     // the route of the current attempt
	timer   *time.Timer
	// Stage tracing (ProducerConfig.OnTrace): with trace set, the start of the request's write and
	// its reply's arrival are timed; appended and taken are the producer's marks of the batch.
	trace                            bool
	appended, taken, sent, replyRead time.Time
}

func newCall() *call {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &call{done: make(chan struct{}, 1), timer: t}
}

// conn is one authenticated TCP connection to one node. Requests are multiplexed by request id; one
// goroutine reads replies and hands each to its call.
type conn struct {
	addr string
	node uint16 // the node id its challenge named
	nc   net.Conn

	wmu sync.Mutex // one frame written at a time

	mu      sync.Mutex
	pending map[uint64]*call
	err     error // sticky once the connection failed

	readerDone chan struct{}
}

// dial connects to addr and runs the client handshake: ClientHello, the node's ClientChallenge (its proof
// checked here), ClientProof. A node that refuses answers an ErrorReply, returned as *Error.
func dial(ctx context.Context, cfg *Config, addr string, id uint64) (*conn, error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
	defer cancel()
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("client: connect to %s: %w", addr, err)
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = nc.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = nc.SetDeadline(time.Unix(1, 0)) })
	node, err := handshake(nc, cfg, addr, id)
	stop()
	if err != nil {
		_ = nc.Close()
		if ctx.Err() != nil && !errors.Is(err, ErrProtocol) {
			return nil, fmt.Errorf("client: handshake with %s: %w (%v)", addr, ctx.Err(), err)
		}
		return nil, err
	}
	_ = nc.SetDeadline(time.Time{})
	cn := &conn{addr: addr, node: node, nc: nc, pending: make(map[uint64]*call), readerDone: make(chan struct{})}
	return cn, nil
}

// handshake runs the three-frame client handshake on nc and returns the node's id.
func handshake(nc net.Conn, cfg *Config, addr string, id uint64) (uint16, error) {
	hello := wire.ClientHello{RequestID: id, Cluster: cfg.Cluster, Revision: wire.Revision}
	if len(cfg.Secret) != 0 {
		if _, err := rand.Read(hello.Nonce[:]); err != nil {
			return 0, fmt.Errorf("client: draw a handshake nonce: %w", err)
		}
	}
	if _, err := nc.Write(wire.AppendClientHello(nil, &hello)); err != nil {
		return 0, fmt.Errorf("client: handshake with %s: %w", addr, err)
	}
	h, body, err := readHandshakeFrame(nc, addr)
	if err != nil {
		return 0, err
	}
	if h.Command == wire.CommandErrorReply {
		return 0, refusal(&h, body, addr)
	}
	ch, err := wire.DecodeClientChallenge(&h, body)
	if err != nil {
		return 0, fmt.Errorf("%w: %s answered the hello with %s: %w", ErrProtocol, addr, h.Command, err)
	}
	if err := wire.VerifyClientChallenge(cfg.Secret, &hello, &ch); err != nil {
		return 0, fmt.Errorf("client: handshake with %s: %w", addr, err)
	}
	p := wire.ClientProof{RequestID: id}
	if len(cfg.Secret) != 0 {
		p.Proof = wire.ClientHelloProof(cfg.Secret, &hello, &ch)
	}
	if _, err := nc.Write(wire.AppendClientProof(nil, cfg.Cluster, &p)); err != nil {
		return 0, fmt.Errorf("client: handshake with %s: %w", addr, err)
	}
	return ch.Node, nil
}

// readHandshakeFrame reads one whole frame (a challenge or an error reply) from nc.
func readHandshakeFrame(nc net.Conn, addr string) (wire.Header, []byte, error) {
	buf := make([]byte, wire.HeaderSize, wire.HeaderSize+handshakeBodyMax)
	if _, err := io.ReadFull(nc, buf); err != nil {
		return wire.Header{}, nil, fmt.Errorf("client: handshake with %s: read: %w", addr, err)
	}
	h, err := wire.ParseHeader(buf)
	if err != nil {
		return wire.Header{}, nil, fmt.Errorf("%w: handshake with %s: %w", ErrProtocol, addr, err)
	}
	if h.BodySize > handshakeBodyMax {
		return wire.Header{}, nil, fmt.Errorf("%w: handshake with %s: %s frame of %d body bytes", ErrProtocol,
			addr, h.Command, h.BodySize)
	}
	buf = buf[:wire.HeaderSize+int(h.BodySize)]
	if _, err := io.ReadFull(nc, buf[wire.HeaderSize:]); err != nil {
		return wire.Header{}, nil, fmt.Errorf("client: handshake with %s: read: %w", addr, err)
	}
	h, body, err := wire.ParseFrame(buf)
	if err != nil {
		return wire.Header{}, nil, fmt.Errorf("%w: handshake with %s: %w", ErrProtocol, addr, err)
	}
	return h, body, nil
}

// refusal turns an ErrorReply frame into *Error, or a protocol error when it does not decode.
func refusal(h *wire.Header, body []byte, addr string) error {
	m, err := wire.DecodeErrorReply(h, body)
	if err != nil {
		return fmt.Errorf("%w: error reply from %s: %w", ErrProtocol, addr, err)
	}
	return &Error{Code: m.Code, Node: h.Sender, Addr: addr, Stream: m.Stream, Owner: m.Owner, Message: string(m.Message)}
}

// readLoop receives replies until the connection fails; it is the connection's one reader.
func (cn *conn) readLoop() {
	defer close(cn.readerDone)
	fr := wire.NewFrameReader(connReadBytes, wire.FrameSizeMax)
	for {
		buf := fr.Free()
		n, err := cn.nc.Read(buf)
		if n > 0 {
			if cerr := fr.Commit(n, cn); cerr != nil {
				cn.fail(fmt.Errorf("%w: from %s: %w", ErrProtocol, cn.addr, cerr))
				return
			}
		}
		if err != nil {
			cn.fail(fmt.Errorf("client: connection to %s: %w", cn.addr, err))
			return
		}
	}
}

// HandleFrame hands one reply to its call (wire.FrameHandler).
func (cn *conn) HandleFrame(h wire.Header, body []byte, _ []byte) error {
	id := binary.LittleEndian.Uint64(h.Area[:8])
	if id == 0 {
		// The node's answer to a frame it could not read (too large): it closes the connection.
		if h.Command == wire.CommandErrorReply {
			return fmt.Errorf("%s: %w", errReplyWithoutReq, refusal(&h, body, cn.addr))
		}
		return fmt.Errorf("%s: %s", errReplyWithoutReq, h.Command)
	}
	cn.mu.Lock()
	c := cn.pending[id]
	delete(cn.pending, id)
	cn.mu.Unlock()
	if c == nil {
		return nil // its caller gave up (context done); the reply is dropped
	}
	if c.trace {
		c.replyRead = time.Now()
	}
	c.h = h
	c.body = append(c.body[:0], body...)
	c.err = nil
	c.done <- struct{}{}
	return nil
}

// DropFrame fails the call whose reply's body failed its checksum (wire.FrameHandler).
func (cn *conn) DropFrame(h wire.Header, err error) {
	id := binary.LittleEndian.Uint64(h.Area[:8])
	cn.mu.Lock()
	c := cn.pending[id]
	delete(cn.pending, id)
	cn.mu.Unlock()
	if c != nil {
		c.err = fmt.Errorf("%w: %s reply from %s: %w", ErrProtocol, h.Command, cn.addr, err)
		c.done <- struct{}{}
	}
}

// fail marks the connection failed with err, closes it and fails every pending call.
func (cn *conn) fail(err error) {
	cn.mu.Lock()
	if cn.err == nil {
		cn.err = err
	}
	pending := cn.pending
	cn.pending = make(map[uint64]*call)
	cn.mu.Unlock()
	_ = cn.nc.Close()
	for _, c := range pending {
		c.err = err
		c.done <- struct{}{}
	}
}

// failed returns the connection's error once it failed.
func (cn *conn) failed() error {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	return cn.err
}

// roundTrip sends c.out (a request with id c.id) and waits for its reply or ctx. A reply not there
// within timeout (0: none) fails the whole connection (watch), as does a write that fails or is cut
// short (the stream of frames is misaligned).
func (cn *conn) roundTrip(ctx context.Context, c *call, timeout time.Duration) error {
	if err := cn.send(ctx, c, timeout); err != nil {
		return err
	}
	select {
	case <-c.done:
		return c.err
	case <-ctx.Done():
		return cn.abandon(c, ctx.Err())
	}
}

// send registers c and writes its request without waiting for the reply, which arrives on c.done
// (with c.err set when the connection fails). An error means c was not registered: no reply comes.
func (cn *conn) send(ctx context.Context, c *call, timeout time.Duration) error {
	c.expires = time.Time{}
	if timeout > 0 {
		c.expires = time.Now().Add(timeout)
	}
	cn.mu.Lock()
	if cn.err != nil {
		cn.mu.Unlock()
		return cn.err
	}
	cn.pending[c.id] = c
	cn.mu.Unlock()

	cn.wmu.Lock()
	if c.trace {
		c.sent = time.Now() // before the write: the node may read the request before the write returns
	}
	err := cn.write(ctx, c.out)
	cn.wmu.Unlock()
	if err != nil {
		cn.fail(fmt.Errorf("client: write to %s: %w", cn.addr, err)) // c hears of it through c.done
	}
	return nil
}

// write writes one frame, bounded by ctx: its deadline becomes the write deadline, and a context that
// can be cancelled without one interrupts the write through context.AfterFunc (which allocates, so the
// common cases, a deadline or no end at all, avoid it). cn.wmu is held.
func (cn *conn) write(ctx context.Context, frame []byte) error {
	dl, hasDeadline := ctx.Deadline()
	switch {
	case hasDeadline:
		_ = cn.nc.SetWriteDeadline(dl)
		defer cn.nc.SetWriteDeadline(time.Time{})
	case ctx.Done() != nil:
		stop := context.AfterFunc(ctx, func() { _ = cn.nc.SetWriteDeadline(time.Unix(1, 0)) })
		defer stop()
	}
	_, err := cn.nc.Write(frame)
	return err
}

// abandon takes c out of the pending calls. If the reader had already taken it, c's reply is on its
// way: wait for it and return it (nil when it succeeded), so c is never written after the return.
func (cn *conn) abandon(c *call, why error) error {
	cn.mu.Lock()
	_, mine := cn.pending[c.id]
	delete(cn.pending, c.id)
	cn.mu.Unlock()
	if mine {
		return why
	}
	<-c.done
	return c.err
}

// watch fails the connection when a pending call waited past its expiry: the node went silent (a
// partition, a stopped process), and the call's retry dials again. It checks every tick, so no request
// arms a timer of its own (a timer per request allocates in the runtime's timer heap), and it ends
// with the connection's reader.
func (cn *conn) watch(tick time.Duration) {
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-cn.readerDone:
			return
		case now := <-t.C:
			if cn.expired(now) {
				cn.fail(fmt.Errorf("client: %s left a request unanswered past its timeout (a silent node)", cn.addr))
			}
		}
	}
}

// expired reports whether a pending call is past its expiry at now.
func (cn *conn) expired(now time.Time) bool {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	for _, c := range cn.pending {
		if !c.expires.IsZero() && now.After(c.expires) {
			return true
		}
	}
	return false
}

// close fails the connection (idempotent) and waits for its reader to end.
func (cn *conn) close() {
	cn.fail(errors.New(errConnClosedByUs))
	<-cn.readerDone
}
