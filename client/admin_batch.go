package client

import (
	"context"
	"fmt"
	"slices"

	"github.com/ringstream/ringstream/internal/assert"
	"github.com/ringstream/ringstream/wire"
)

// StreamResult is one name's outcome in a batched create or delete: the stream created or deleted,
// or the error its single CreateStream or DeleteStream would have returned (an *Error matching its
// sentinel, ErrStreamExists, ErrUnknownStream, ...).
type StreamResult struct {
	Info StreamInfo
	Err  error
}

// StreamResults are a batched create's or delete's results, one per name.
type StreamResults []StreamResult

// Err is the first name's error, naming the stream, or nil when every name took effect.
func (rs StreamResults) Err() error {
	for _, r := range rs {
		if r.Err != nil {
			return fmt.Errorf("stream %s: %w", r.Info.Name, r.Err)
		}
	}
	return nil
}

// namesPerRequest is how many names one batched request carries (the wire allows
// wire.StreamsPerRequestMax): its ops commit well within a node's metadata request bound (10 s) even
// on a loaded node. A request cut short by that bound leaves its names' outcomes unknown, and asking
// again answers ErrStreamExists for those that had committed: CI saw a request of 1,000 names run
// past it while the test suite loaded the machine.
const namesPerRequest = 200

type createsRequest struct{ m wire.CreateStreams }

func (q *createsRequest) appendTo(dst []byte, from wire.From, id uint64, _ *Route) []byte {
	q.m.RequestID = id
	return wire.AppendCreateStreams(dst, from, &q.m)
}

type deletesRequest struct{ m wire.DeleteStreams }

func (q *deletesRequest) appendTo(dst []byte, from wire.From, id uint64, _ *Route) []byte {
	q.m.RequestID = id
	return wire.AppendDeleteStreams(dst, from, &q.m)
}

// CreateStreams creates many streams with one set of options and returns one result per name, in
// the order of names. The names go in requests of up to namesPerRequest, each committed as
// a few metadata ops rather than one op per name. A name whose refusal may clear by itself (the
// metadata group electing a primary, its pipeline full, an op that did not commit in time) is asked
// again after the client's backoff, within its Retries; other refusals are that name's final
// result, and the other names are created regardless. As with CreateStream, a retried name whose
// first attempt committed unanswered comes back ErrStreamExists. The error is for the call as a
// whole: an invalid name or option, a name given twice, or a request no node answered.
func (c *Client) CreateStreams(ctx context.Context, names []string, opts StreamOptions) (StreamResults, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	results := make(StreamResults, len(names))
	err = c.batched(ctx, names, results, func(chunk [][]byte) (request, wire.Command) {
		l, err := wire.StreamNamesOf(chunk)
		assert.True(err == nil, "client: names batched checked and sorted were refused")
		return &createsRequest{m: wire.CreateStreams{Copies: opts.Copies, Policy: opts.Policy.Kind,
			ConfirmCount: opts.Policy.Count, Names: l}}, wire.CommandCreateStreamsReply
	}, func(name string, o wire.StreamOutcome) StreamInfo {
		return StreamInfo{Name: name, Stream: o.Stream, Incarnation: o.Incarnation, Copies: opts.Copies, Policy: opts.Policy}
	})
	if err != nil {
		return nil, fmt.Errorf("client: create %d streams: %w", len(names), err)
	}
	return results, nil
}

// DeleteStreams deletes many streams and returns one result per name, in the order of names, as
// CreateStreams does; an unknown name's result is ErrUnknownStream.
func (c *Client) DeleteStreams(ctx context.Context, names []string) (StreamResults, error) {
	results := make(StreamResults, len(names))
	err := c.batched(ctx, names, results, func(chunk [][]byte) (request, wire.Command) {
		l, err := wire.StreamNamesOf(chunk)
		assert.True(err == nil, "client: names batched checked and sorted were refused")
		return &deletesRequest{m: wire.DeleteStreams{Names: l}}, wire.CommandDeleteStreamsReply
	}, func(name string, o wire.StreamOutcome) StreamInfo {
		c.forget(name)
		return StreamInfo{Name: name, Stream: o.Stream, Incarnation: o.Incarnation}
	})
	if err != nil {
		return nil, fmt.Errorf("client: delete %d streams: %w", len(names), err)
	}
	return results, nil
}

// batched sends names, sorted, in requests of at most namesPerRequest and fills results
// (indexed as names) from the replies; names refused with a retryable code are sent again after a
// backoff, up to the client's Retries.
func (c *Client) batched(ctx context.Context, names []string, results []StreamResult,
	build func([][]byte) (request, wire.Command), took func(string, wire.StreamOutcome) StreamInfo) error {
	index := make(map[string]int, len(names))
	for i, n := range names {
		if err := checkName("stream", n); err != nil {
			return err
		}
		if _, twice := index[n]; twice {
			return fmt.Errorf("%w: %q is named twice", ErrInvalidName, n)
		}
		index[n] = i
	}
	pending := slices.Sorted(slices.Values(names))
	cl := newCall()
	for attempt := 0; len(pending) > 0; attempt++ {
		if attempt > 0 {
			if err := c.backoff(ctx, cl.timer, attempt); err != nil {
				return err
			}
		}
		var again []string
		for start := 0; start < len(pending); start += namesPerRequest {
			chunk := pending[start:min(start+namesPerRequest, len(pending))]
			raw := make([][]byte, len(chunk))
			for i, n := range chunk {
				raw[i] = []byte(n)
			}
			q, want := build(raw)
			if err := c.exchange(ctx, "", q, cl, want, 0); err != nil {
				return err
			}
			var outcomes []wire.StreamOutcome
			var err error
			if want == wire.CommandCreateStreamsReply {
				_, outcomes, err = wire.DecodeCreateStreamsReply(&cl.h, cl.body)
			} else {
				_, outcomes, err = wire.DecodeDeleteStreamsReply(&cl.h, cl.body)
			}
			if err == nil && len(outcomes) != len(chunk) {
				err = fmt.Errorf("%d outcomes for %d names", len(outcomes), len(chunk))
			}
			if err != nil {
				return fmt.Errorf("%w: %w", ErrProtocol, err)
			}
			for i, o := range outcomes {
				name := chunk[i]
				r := &results[index[name]]
				if o.OK() {
					*r = StreamResult{Info: took(name, o)}
					continue
				}
				*r = StreamResult{Info: StreamInfo{Name: name}, Err: &Error{Code: o.Code, Stream: o.Stream, Message: string(o.Message)}}
				if retry, _ := retryable(o.Code); retry && attempt < c.cfg.Retries {
					again = append(again, name)
				}
			}
		}
		pending = again
	}
	return nil
}
