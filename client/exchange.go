package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ringstream/ringstream/wire"
)

// request builds one request's frame for route r (the zero Route for requests to any node).
type request interface {
	appendTo(dst []byte, from wire.From, id uint64, r *Route) []byte
}

// exchange sends req and leaves its reply, of command want, in cl. A request about a stream (stream
// not "") goes to the stream's owner, looked up when the client knows none; other requests go to any
// node. Refusals that may clear (wire codes retryable names), lost connections, silent nodes and a stream
// without an owner are retried up to cfg.Retries times with backoff, looking the owner up again when the
// refusal says it moved. The request is rebuilt for each attempt with a new request id and the route of
// that attempt, so a produce keeps its producer id and sequence across them.
func (c *Client) exchange(ctx context.Context, stream string, req request, cl *call, want wire.Command,
	wait time.Duration) error {
	var last error
	var prefer string // a node an earlier refusal named
	var moved ownerMoved
	for attempt := 0; attempt <= c.cfg.Retries; attempt++ {
		if attempt > 0 && !moved.askNow {
			if err := c.backoff(ctx, cl.timer, attempt); err != nil {
				return fmt.Errorf("%w (last error: %w)", err, last)
			}
		}
		moved.askNow = false
		r := &cl.route // in the call, not on the heap per request
		*r = Route{}
		cn, err := c.target(ctx, stream, cl, attempt, &prefer, r)
		if err != nil {
			if !mayRetry(ctx, err) {
				return err
			}
			c.forget(stream)           // the owner may have moved while it could not be reached
			moved.failed(c, stream, r) // r.Epoch is set when no owner was named or it was unreachable
			last = c.unreachable(stream, r, err)
			continue
		}
		cl.id = c.id()
		cl.out = req.appendTo(cl.out[:0], wire.From{Cluster: c.cfg.Cluster}, cl.id, r)
		err = cn.roundTrip(ctx, cl, c.cfg.RequestTimeout+wait)
		if err == nil {
			err = c.checkReply(cn, cl, want)
		}
		if err == nil {
			return nil
		}
		if !mayRetry(ctx, err) {
			if errors.Is(err, ErrProtocol) {
				c.dropConn(cn, err) // nothing after a bad reply on it can be trusted
			}
			return err
		}
		var refused *Error
		if errors.As(err, &refused) {
			if _, relookup := retryable(refused.Code); relookup {
				c.forget(stream)
			}
			if ownerGone(refused.Code) {
				moved.failed(c, stream, r)
			}
			if addr, ok := c.nodeAddr(refused.Owner); ok && stream == "" {
				prefer = addr
			}
		} else {
			// The connection was lost or went silent: the owner may have died, or only the
			// connection did. The next attempt reconnects to the same owner at once; if that fails,
			// the owner is unreachable and the attempt after it waits for the next owner.
			c.dropConn(cn, err)
			moved.reconnect(stream, r)
			err = c.unreachable(stream, r, err)
		}
		c.log.Debug("client: retrying", "stream", stream, "attempt", attempt+1, "err", err)
		last = err
	}
	return fmt.Errorf("client: gave up after %d attempts: %w", c.cfg.Retries+1, last)
}

// ownerMoved is what exchange knows of a stream's owner having moved: after a request found the
// owner of epoch E gone (unreachable, a refusal saying it is not or no longer the owner, or no owner
// at E), the next attempt asks at once, without a backoff, for an assignment newer than E, and the
// metadata primary answers when that commits (a long-poll lookup). After a lost connection the next
// attempt first reconnects to the same owner at once. Each only once per epoch: when it does not
// help, the backoff applies as before, so nothing spins.
type ownerMoved struct {
	polled      uint32 // the highest epoch a lookup already waited past
	reconnected uint32 // the highest epoch whose owner was reconnected to without a backoff
	askNow      bool   // skip the next backoff
}

// reconnect notes that the connection to the owner of route r was lost: the route is kept, and the
// next attempt reconnects to it without a backoff (once per epoch; else the route is forgotten and
// the backoff applies).
func (o *ownerMoved) reconnect(stream string, r *Route) {
	if stream == "" || r.Epoch == 0 || r.Epoch <= o.reconnected {
		return
	}
	o.reconnected, o.askNow = r.Epoch, true
}

// ownerGone reports whether a refusal by a stream's owner says that it is not, or no longer, the
// owner, or that it cannot go on as one (its log failed): a newer assignment is coming or here.
// CodeUnavailable is not among them: it is a passing state of the owner (a copy opening, a new owner
// proving its tail), looked up again plainly after a backoff.
func ownerGone(code wire.ErrorCode) bool {
	switch code {
	case wire.CodeNotOwner, wire.CodeFenced, wire.CodeStaleIncarnation, wire.CodeLogFailed:
		return true
	}
	return false
}

// failed notes that an attempt on route r of stream failed in a way that says the owner may have
// moved: the client remembers the epoch (lostOwner), and the next attempt asks at once.
func (o *ownerMoved) failed(c *Client, stream string, r *Route) {
	if stream == "" || r.Epoch == 0 {
		return
	}
	c.lostOwner(stream, r.Epoch)
	if r.Epoch <= o.polled {
		return
	}
	o.polled, o.askNow = r.Epoch, true
}

// lostOwner remembers that the owner of stream at epoch was lost: every lookup of the stream until
// one answers with a newer assignment asks for one newer than epoch (a long poll).
func (c *Client) lostOwner(stream string, epoch uint32) {
	if stream == "" || epoch == 0 {
		return
	}
	c.mu.Lock()
	c.lost[stream] = max(c.lost[stream], epoch)
	c.mu.Unlock()
}

// target picks the connection of one attempt and fills r: the owner's for a stream, else any node's.
func (c *Client) target(ctx context.Context, stream string, cl *call, attempt int, prefer *string,
	r *Route) (*conn, error) {
	if stream == "" {
		if *prefer != "" {
			addr := *prefer
			*prefer = ""
			if cn, err := c.connTo(ctx, addr); err == nil {
				return cn, nil
			}
		}
		return c.anyConn(ctx, attempt)
	}
	var err error
	*r, err = c.route(ctx, stream, cl, attempt)
	if err != nil {
		return nil, err
	}
	return c.connTo(ctx, r.OwnerAddr)
}

// unreachable names the stream's owner in a connection error of an attempt that had one (r), as
// ErrOwnerUnreachable; other errors pass unchanged.
func (c *Client) unreachable(stream string, r *Route, err error) error {
	var refused *Error
	if stream == "" || r.Owner == 0 || errors.Is(err, ErrNoOwner) || errors.As(err, &refused) {
		return err
	}
	return fmt.Errorf("%w: stream %q's owner is node %d at %s: %w", ErrOwnerUnreachable, stream, r.Owner, r.OwnerAddr, err)
}

// mayRetry reports whether err may clear on another attempt.
func mayRetry(ctx context.Context, err error) bool {
	if ctx.Err() != nil || errors.Is(err, ErrClosed) || errors.Is(err, ErrProtocol) || authRefused(err) {
		return false
	}
	var refused *Error
	if errors.As(err, &refused) {
		retry, _ := retryable(refused.Code)
		return retry
	}
	return true // a lost connection, a silent node, no owner yet
}

// authRefused reports a handshake the client itself refused (the node's proof, cluster or revision):
// no retry clears it. A node's own refusal is an *Error, judged by its code.
func authRefused(err error) bool {
	var refused *Error
	if errors.As(err, &refused) {
		return false // refusals are judged by their code
	}
	return handshakeRefused(err)
}

// checkReply turns the reply in cl into nil (command want), *Error (an error reply) or a protocol
// error, which also fails the connection.
func (c *Client) checkReply(cn *conn, cl *call, want wire.Command) error {
	switch cl.h.Command {
	case want:
		return nil
	case wire.CommandErrorReply:
		err := refusal(&cl.h, cl.body, cn.addr)
		if errors.Is(err, ErrProtocol) {
			cn.fail(err)
		}
		return err
	}
	err := fmt.Errorf("%w: %s answered %s with %s", ErrProtocol, cn.addr, want, cl.h.Command)
	cn.fail(err)
	return err
}

// ownerWaitMax is how long a lookup for a newer owner waits at the metadata primary: about ten times
// a failover here, so one long poll covers a failover and its view change, and well within the
// node's cap (clientreq's lookupWaitMax).
const ownerWaitMax = 2 * time.Second

// route returns the stream's owner: from the last lookup, or from a new one sent to any node. When
// the client lost the stream's owner at some epoch (lostOwner), the lookup waits (up to ownerWaitMax,
// within ctx) for an assignment newer than that; if none comes, the answer is the assignment as it
// stands. A stream without an owner is ErrNoOwner, retried by the caller.
func (c *Client) route(ctx context.Context, name string, cl *call, attempt int) (Route, error) {
	c.mu.Lock()
	r, ok := c.routes[name]
	after := c.lost[name]
	c.mu.Unlock()
	if ok {
		return r, nil
	}
	cn, err := c.anyConn(ctx, attempt)
	if err != nil {
		return Route{}, err
	}
	req := wire.LookupStream{Name: []byte(name)}
	var wait time.Duration
	if after > 0 {
		wait = ownerWaitMax
		if dl, ok := ctx.Deadline(); ok {
			wait = min(wait, time.Until(dl)/2)
		}
		if wait >= time.Millisecond {
			req.AfterEpoch, req.WaitMs = after, uint32(wait/time.Millisecond)
		}
	}
	cl.id = c.id()
	req.RequestID = cl.id
	cl.out = wire.AppendLookupStream(cl.out[:0], wire.From{Cluster: c.cfg.Cluster}, &req)
	err = cn.roundTrip(ctx, cl, c.cfg.RequestTimeout+wait)
	if err == nil {
		err = c.checkReply(cn, cl, wire.CommandLookupStreamReply)
	}
	if err != nil {
		var refused *Error
		if !errors.As(err, &refused) {
			c.dropConn(cn, err)
		}
		return Route{}, err
	}
	m, err := wire.DecodeLookupStreamReply(&cl.h, cl.body)
	if err != nil {
		err = fmt.Errorf("%w: lookup reply from %s: %w", ErrProtocol, cn.addr, err)
		cn.fail(err)
		return Route{}, err
	}
	r = Route{Name: name, Stream: m.Stream, Incarnation: m.Incarnation, Epoch: m.Epoch, Owner: m.Owner,
		OwnerAddr: string(m.OwnerAddr)}
	c.mu.Lock()
	if r.Epoch >= c.lost[name] {
		// Answered at or past the epoch lost: a newer owner, or the long poll's wait ended with the
		// same one. Either way the next lookup asks plainly, and a request that fails on this route
		// notes its epoch again.
		delete(c.lost, name)
	}
	c.mu.Unlock()
	if r.Owner != 0 && r.OwnerAddr == "" {
		r.OwnerAddr, _ = c.nodeAddr(r.Owner)
	}
	if r.Owner == 0 || r.OwnerAddr == "" {
		return r, fmt.Errorf("%w: stream %q (id %d, epoch %d): no owner is assigned, a recovery is pending or "+
			"the owner's address is unknown", ErrNoOwner, name, r.Stream, r.Epoch)
	}
	c.mu.Lock()
	c.routes[name] = r
	c.nodes[r.Owner] = r.OwnerAddr
	c.mu.Unlock()
	return r, nil
}

// forget drops a stream's cached route, so the next attempt looks its owner up again.
func (c *Client) forget(stream string) {
	if stream == "" {
		return
	}
	c.mu.Lock()
	delete(c.routes, stream)
	c.mu.Unlock()
}

// nodeAddr returns a node's client address if the client learned it.
func (c *Client) nodeAddr(node uint16) (string, bool) {
	if node == 0 {
		return "", false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	a, ok := c.nodes[node]
	return a, ok
}
