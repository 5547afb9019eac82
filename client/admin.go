package client

import (
	"context"
	"fmt"

	"github.com/ringstream/ringstream/wire"
)

// Policy is a stream's confirm policy: how many copies must hold a record on disk before it is confirmed.
type Policy struct {
	Kind  wire.ConfirmPolicy // wire.PolicyMajority (the default), wire.PolicyAll or wire.PolicyCount
	Count uint8              // with wire.PolicyCount only: the number of copies
}

// StreamOptions describe a new stream.
type StreamOptions struct {
	Copies uint8  // E, the number of copies on different nodes (default 3)
	Policy Policy // the zero Policy is majority
}

// StreamInfo describes one stream of the cluster.
type StreamInfo struct {
	Name        string
	Stream      uint64
	Incarnation uint32
	Copies      uint8
	Policy      Policy
}

// String is the policy's configuration name (majority_durable, local_durable, count_durable(N)).
func (p Policy) String() string {
	switch p.Kind {
	case wire.PolicyAll:
		return "local_durable"
	case wire.PolicyMajority, 0:
		return "majority_durable"
	case wire.PolicyCount:
		return fmt.Sprintf("count_durable(%d)", p.Count)
	}
	return fmt.Sprintf("policy(%d)", p.Kind)
}

type createRequest struct{ m wire.CreateStream }

func (q *createRequest) appendTo(dst []byte, from wire.From, id uint64, _ *Route) []byte {
	q.m.RequestID = id
	return wire.AppendCreateStream(dst, from, &q.m)
}

type deleteRequest struct{ m wire.StreamNameRequest }

func (q *deleteRequest) appendTo(dst []byte, from wire.From, id uint64, _ *Route) []byte {
	q.m.RequestID = id
	return wire.AppendDeleteStream(dst, from, &q.m)
}

type listRequest struct{ m wire.ListStreams }

func (q *listRequest) appendTo(dst []byte, from wire.From, id uint64, _ *Route) []byte {
	q.m.RequestID = id
	return wire.AppendListStreams(dst, from, &q.m)
}

// CreateStream creates a stream with opts' copies and policy and returns its id and incarnation. A
// name already taken is ErrStreamExists.
func (c *Client) CreateStream(ctx context.Context, name string, opts StreamOptions) (StreamInfo, error) {
	if err := checkName("stream", name); err != nil {
		return StreamInfo{}, err
	}
	opts, err := opts.withDefaults()
	if err != nil {
		return StreamInfo{}, err
	}
	p := opts.Policy
	q := &createRequest{m: wire.CreateStream{Name: []byte(name), Copies: opts.Copies, Policy: p.Kind, ConfirmCount: p.Count}}
	cl := newCall()
	if err := c.exchange(ctx, "", q, cl, wire.CommandCreateStreamReply, 0); err != nil {
		return StreamInfo{}, fmt.Errorf("client: create stream %q: %w", name, err)
	}
	m, err := wire.DecodeCreateStreamReply(&cl.h, cl.body)
	if err != nil {
		return StreamInfo{}, fmt.Errorf("%w: create stream %q: %w", ErrProtocol, name, err)
	}
	return StreamInfo{Name: name, Stream: m.Stream, Incarnation: m.Incarnation, Copies: opts.Copies, Policy: p}, nil
}

// withDefaults fills in 3 copies and majority_durable where opts leaves them zero and checks the
// result against wire's rules.
func (opts StreamOptions) withDefaults() (StreamOptions, error) {
	if opts.Copies == 0 {
		opts.Copies = 3
	}
	if opts.Policy.Kind == 0 {
		opts.Policy.Kind = wire.PolicyMajority
	}
	p := opts.Policy
	if err := wire.ValidateCopies(opts.Copies, 0); err != nil {
		return opts, fmt.Errorf("%w: %w", ErrInvalidCopies, err)
	}
	if err := wire.ValidatePolicy(p.Kind, p.Count, opts.Copies); err != nil {
		return opts, fmt.Errorf("%w: policy %v: %w", ErrInvalidPolicy, p, err)
	}
	return opts, nil
}

// DeleteStream deletes a stream; its records and cursors are gone. An unknown name is ErrUnknownStream.
func (c *Client) DeleteStream(ctx context.Context, name string) error {
	if err := checkName("stream", name); err != nil {
		return err
	}
	q := &deleteRequest{m: wire.StreamNameRequest{Name: []byte(name)}}
	cl := newCall()
	if err := c.exchange(ctx, "", q, cl, wire.CommandDeleteStreamReply, 0); err != nil {
		return fmt.Errorf("client: delete stream %q: %w", name, err)
	}
	if _, err := wire.DecodeDeleteStreamReply(&cl.h, cl.body); err != nil {
		return fmt.Errorf("%w: delete stream %q: %w", ErrProtocol, name, err)
	}
	c.forget(name)
	return nil
}

// ListStreams returns every stream of the cluster in id order.
func (c *Client) ListStreams(ctx context.Context) ([]StreamInfo, error) {
	const page = 1000
	var out []StreamInfo
	q := &listRequest{m: wire.ListStreams{Limit: page}}
	cl := newCall()
	for {
		if err := c.exchange(ctx, "", q, cl, wire.CommandListStreamsReply, 0); err != nil {
			return nil, fmt.Errorf("client: list streams: %w", err)
		}
		m, list, err := wire.DecodeListStreamsReply(&cl.h, cl.body)
		if err != nil {
			return nil, fmt.Errorf("%w: list streams: %w", ErrProtocol, err)
		}
		for s, ok := list.Next(); ok; s, ok = list.Next() {
			if s.Stream <= q.m.After {
				return nil, fmt.Errorf("%w: list streams: stream %d after %d is out of order", ErrProtocol, s.Stream, q.m.After)
			}
			q.m.After = s.Stream
			out = append(out, StreamInfo{Name: string(s.Name), Stream: s.Stream, Incarnation: s.Incarnation,
				Copies: s.Copies, Policy: Policy{Kind: s.Policy, Count: s.ConfirmCount}})
		}
		if !m.More {
			return out, nil
		}
		if list.Len() == 0 {
			return nil, fmt.Errorf("%w: list streams: an empty page says more follow", ErrProtocol)
		}
	}
}

// Lookup asks the cluster who owns a stream now (bypassing the client's cached route). A stream
// without an owner is retried with backoff and then reported as ErrNoOwner.
func (c *Client) Lookup(ctx context.Context, name string) (Route, error) {
	if err := checkName("stream", name); err != nil {
		return Route{}, err
	}
	c.forget(name)
	cl := newCall()
	var last error
	for attempt := 0; attempt <= c.cfg.Retries; attempt++ {
		if attempt > 0 {
			if err := c.backoff(ctx, cl.timer, attempt); err != nil {
				return Route{}, fmt.Errorf("client: lookup %q: %w (last error: %w)", name, err, last)
			}
		}
		r, err := c.route(ctx, name, cl, attempt)
		if err == nil {
			return r, nil
		}
		if !mayRetry(ctx, err) {
			return Route{}, fmt.Errorf("client: lookup %q: %w", name, err)
		}
		last = err
	}
	return Route{}, fmt.Errorf("client: lookup %q: gave up after %d attempts: %w", name, c.cfg.Retries+1, last)
}
