package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/ringstream/ringstream/wire"
)

// Client is a connection to a ringstream cluster. It is safe for concurrent use; Close ends every
// connection and goroutine it started.
type Client struct {
	cfg Config
	log *slog.Logger

	nextID atomic.Uint64

	mu      sync.Mutex
	closed  bool
	conns   map[string]*conn  // live connections by client address
	nodes   map[uint16]string // node id -> client address, learned from handshakes and lookups
	routes  map[string]Route  // stream name -> its owner, from the last lookup
	lost    map[string]uint32 // stream name -> the epoch whose owner a request lost (see lostOwner)
	seed    int               // where the next "any node" request starts among cfg.Addrs
	workers sync.WaitGroup    // connection readers and producers
	prods   map[*Producer]struct{}

	zonce sync.Once
	zdec  *zstd.Decoder // fetched zstd batches, made on first use
}

// Route is where a stream lives now: its id, incarnation, epoch and owner, from the cluster's metadata.
type Route struct {
	Name        string
	Stream      uint64
	Incarnation uint32
	Epoch       uint32
	Owner       uint16 // 0: no owner right now (a recovery is pending)
	OwnerAddr   string // the owner's client address
}

// Dial validates cfg and connects to one of cfg.Addrs (the first that answers the handshake), so that a
// wrong address, cluster id or secret shows at once.
func Dial(ctx context.Context, cfg Config) (*Client, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c := &Client{cfg: cfg, log: cfg.Logger, conns: make(map[string]*conn), nodes: make(map[uint16]string),
		routes: make(map[string]Route), lost: make(map[string]uint32), prods: make(map[*Producer]struct{})}
	if _, err := c.anyConn(ctx, 0); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Close closes every producer (without flushing: call Producer.Close first to wait for confirms) and
// every connection, and waits for their goroutines. Calls in flight return ErrClosed or a connection
// error. Close is idempotent.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		c.workers.Wait()
		return nil
	}
	c.closed = true
	conns := c.conns
	c.conns = make(map[string]*conn)
	prods := c.prods
	c.prods = make(map[*Producer]struct{})
	c.mu.Unlock()
	for p := range prods {
		p.abort(ErrClosed)
	}
	for _, cn := range conns {
		cn.close()
	}
	c.workers.Wait()
	c.zonce.Do(func() {}) // no decoder is made after Close
	if c.zdec != nil {
		c.zdec.Close()
	}
	return nil
}

// id returns a fresh request id (never 0).
func (c *Client) id() uint64 { return c.nextID.Add(1) }

// connTo returns the live connection to addr, dialing it when there is none.
func (c *Client) connTo(ctx context.Context, addr string) (*conn, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	if cn := c.conns[addr]; cn != nil {
		if cn.failed() == nil {
			c.mu.Unlock()
			return cn, nil
		}
		delete(c.conns, addr)
	}
	c.mu.Unlock()

	cn, err := dial(ctx, &c.cfg, addr, c.id())
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		_ = cn.nc.Close()
		return nil, ErrClosed
	}
	if other := c.conns[addr]; other != nil && other.failed() == nil {
		c.mu.Unlock()
		_ = cn.nc.Close() // another caller dialed it meanwhile; its reader never started
		return other, nil
	}
	c.conns[addr] = cn
	c.nodes[cn.node] = addr
	c.workers.Add(2)
	c.mu.Unlock()
	go func() {
		defer c.workers.Done()
		cn.readLoop()
	}()
	go func() {
		defer c.workers.Done()
		cn.watch(min(max(c.cfg.RequestTimeout/10, 10*time.Millisecond), 500*time.Millisecond))
	}()
	c.log.Debug("client: connected", "addr", addr, "node", cn.node)
	return cn, nil
}

// anyConn returns a connection to some node: the next seed address that answers, starting at the
// rotation point (attempt moves it). A refusal in the handshake (wrong cluster or secret) is returned
// at once: another node of the same cluster would refuse the same way.
func (c *Client) anyConn(ctx context.Context, attempt int) (*conn, error) {
	c.mu.Lock()
	start := c.seed + attempt
	c.mu.Unlock()
	var errs []error
	for i := range c.cfg.Addrs {
		addr := c.cfg.Addrs[(start+i)%len(c.cfg.Addrs)]
		cn, err := c.connTo(ctx, addr)
		if err == nil {
			return cn, nil
		}
		if errors.Is(err, ErrClosed) || ctx.Err() != nil || handshakeRefused(err) {
			return nil, err
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("client: no node answered (%d addresses): %w", len(c.cfg.Addrs), errors.Join(errs...))
}

// handshakeRefused reports an error that every node of the cluster would give again.
func handshakeRefused(err error) bool {
	var e *Error
	return errors.As(err, &e) || errors.Is(err, wire.ErrAuthFailed) || errors.Is(err, wire.ErrAuthMissing) ||
		errors.Is(err, wire.ErrAuthNoSecret) || errors.Is(err, wire.ErrForeignCluster) ||
		errors.Is(err, wire.ErrRevision)
}

// dropConn closes a connection that failed or went silent and forgets it, so the next request dials
// again. Its reader ends and releases its worker count.
func (c *Client) dropConn(cn *conn, why error) {
	cn.fail(why)
	c.mu.Lock()
	if c.conns[cn.addr] == cn {
		delete(c.conns, cn.addr)
	}
	c.mu.Unlock()
}

// backoff waits before retry attempt (1, 2, ...): BackoffMin doubled per attempt up to BackoffMax, with
// up to half of it drawn at random, or until ctx ends.
func (c *Client) backoff(ctx context.Context, t *time.Timer, attempt int) error {
	d := c.cfg.BackoffMin << min(attempt-1, 20)
	if d > c.cfg.BackoffMax || d <= 0 {
		d = c.cfg.BackoffMax
	}
	if d > 1 {
		d = d/2 + rand.N(d/2+1)
	}
	t.Reset(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// isClosed reports whether Close was called.
func (c *Client) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}
