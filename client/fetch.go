package client

import (
	"context"
	"fmt"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/ringstream/ringstream/wire"
)

// FetchOptions bound one fetch. Zero values take the defaults.
type FetchOptions struct {
	// BytesMax bounds the batch bytes of one reply (default 1 MiB); the owner sends at least one batch.
	BytesMax int
	// RecordsMax bounds the records of one reply (0: no bound beyond BytesMax).
	RecordsMax int
	// Wait is how long the owner holds a fetch that finds nothing confirmed at its offset (a long poll;
	// 0 answers at once). The node caps it.
	Wait time.Duration
}

const defaultFetchBytes = 1 << 20

func (o FetchOptions) wire() (bytesMax, recordsMax, waitMs uint32, err error) {
	if o.BytesMax == 0 {
		o.BytesMax = defaultFetchBytes
	}
	switch {
	case o.BytesMax < 0 || o.BytesMax > wire.BodySizeMax:
		return 0, 0, 0, fmt.Errorf("%w: FetchOptions.BytesMax %d, want 1..%d", ErrConfig, o.BytesMax, wire.BodySizeMax)
	case o.RecordsMax < 0 || int64(o.RecordsMax) > 1<<32-1:
		return 0, 0, 0, fmt.Errorf("%w: FetchOptions.RecordsMax %d", ErrConfig, o.RecordsMax)
	case o.Wait < 0 || o.Wait > time.Hour:
		return 0, 0, 0, fmt.Errorf("%w: FetchOptions.Wait %v, want 0..1h", ErrConfig, o.Wait)
	}
	return uint32(o.BytesMax), uint32(o.RecordsMax), uint32(o.Wait / time.Millisecond), nil
}

type fetchRequest struct{ m wire.Fetch }

func (q *fetchRequest) appendTo(dst []byte, from wire.From, id uint64, r *Route) []byte {
	q.m.RequestID, q.m.Stream, q.m.Incarnation = id, r.Stream, r.Incarnation
	return wire.AppendFetch(dst, from, &q.m)
}

// Consumer reads a stream in order from an offset, reusing its buffers: Poll allocates nothing in steady
// state. A Consumer is used by one goroutine at a time.
type Consumer struct {
	c      *Client
	stream string
	opt    FetchOptions
	next   uint64
	q      fetchRequest
	cl     *call
	recs   Records
}

// Consumer returns a consumer of stream starting at offset from.
func (c *Client) Consumer(stream string, from uint64, opt FetchOptions) (*Consumer, error) {
	if err := checkName("stream", stream); err != nil {
		return nil, err
	}
	bytesMax, recordsMax, waitMs, err := opt.wire()
	if err != nil {
		return nil, err
	}
	cs := &Consumer{c: c, stream: stream, opt: opt, next: from, cl: newCall()}
	cs.q.m = wire.Fetch{BytesMax: bytesMax, RecordsMax: recordsMax, WaitMs: waitMs}
	cs.recs.zdec = c.zstdDecoder
	return cs, nil
}

// Poll fetches the confirmed records from the consumer's offset on, waiting up to the options' Wait
// when there are none yet, and moves the offset past them. The Records stay valid until the next Poll.
// An empty Records (Next false at once, Err nil) means nothing was confirmed within the wait.
func (cs *Consumer) Poll(ctx context.Context) (*Records, error) {
	cs.q.m.Offset = cs.next
	wait := time.Duration(cs.q.m.WaitMs) * time.Millisecond
	if err := cs.c.exchange(ctx, cs.stream, &cs.q, cs.cl, wire.CommandFetchReply, wait); err != nil {
		return nil, fmt.Errorf("client: fetch %q at %d: %w", cs.stream, cs.next, err)
	}
	m, err := wire.DecodeFetchReply(&cs.cl.h, cs.cl.body)
	if err != nil {
		return nil, fmt.Errorf("%w: fetch %q at %d: %w", ErrProtocol, cs.stream, cs.next, err)
	}
	if m.Count != 0 && (m.BaseOffset > cs.next || m.BaseOffset+uint64(m.Count) <= cs.next) {
		return nil, fmt.Errorf("%w: fetch %q at %d answered offsets %d..%d", ErrProtocol, cs.stream, cs.next,
			m.BaseOffset, m.BaseOffset+uint64(m.Count))
	}
	if m.Count == 0 {
		m.BaseOffset = cs.next
	}
	cs.recs.reset(cs.next, m.BaseOffset, m.Count, m.ConfirmedTail, m.Batches)
	cs.next = cs.recs.NextOffset()
	return &cs.recs, nil
}

// Offset is the offset the next Poll reads from.
func (cs *Consumer) Offset() uint64 { return cs.next }

// Seek sets the offset the next Poll reads from.
func (cs *Consumer) Seek(offset uint64) { cs.next = offset }

// Fetch reads the confirmed records of stream from offset on, once (see Consumer for a reader that
// reuses its buffers).
func (c *Client) Fetch(ctx context.Context, stream string, offset uint64, opt FetchOptions) (*Records, error) {
	cs, err := c.Consumer(stream, offset, opt)
	if err != nil {
		return nil, err
	}
	return cs.Poll(ctx)
}

// zstdDecoder returns the client's zstd decoder, made on first use (DecodeAll is safe for concurrent
// use).
func (c *Client) zstdDecoder() *zstd.Decoder {
	c.zonce.Do(func() { c.zdec = newZstdDecoder() })
	return c.zdec
}

type cursorRequest struct {
	m      wire.CursorRequest
	commit bool
}

func (q *cursorRequest) appendTo(dst []byte, from wire.From, id uint64, r *Route) []byte {
	q.m.RequestID, q.m.Stream, q.m.Incarnation = id, r.Stream, r.Incarnation
	if q.commit {
		return wire.AppendCommitCursor(dst, from, &q.m)
	}
	return wire.AppendGetCursor(dst, from, &q.m)
}

// CommitCursor records that consumer has read stream up to offset (the next offset it will read).
// The owner answers at once and makes it durable within its cursor sync interval.
func (c *Client) CommitCursor(ctx context.Context, stream, consumer string, offset uint64) error {
	if err := checkName("stream", stream); err != nil {
		return err
	}
	if err := checkName("consumer", consumer); err != nil {
		return err
	}
	q := &cursorRequest{m: wire.CursorRequest{Consumer: []byte(consumer), Offset: offset}, commit: true}
	cl := newCall()
	if err := c.exchange(ctx, stream, q, cl, wire.CommandCommitCursorReply, 0); err != nil {
		return fmt.Errorf("client: commit cursor %q of %q: %w", consumer, stream, err)
	}
	if _, err := wire.DecodeCommitCursorReply(&cl.h, cl.body); err != nil {
		return fmt.Errorf("%w: commit cursor %q of %q: %w", ErrProtocol, consumer, stream, err)
	}
	return nil
}

// Cursor returns consumer's committed offset on stream; found is false when it never committed one.
func (c *Client) Cursor(ctx context.Context, stream, consumer string) (offset uint64, found bool, err error) {
	if err := checkName("stream", stream); err != nil {
		return 0, false, err
	}
	if err := checkName("consumer", consumer); err != nil {
		return 0, false, err
	}
	q := &cursorRequest{m: wire.CursorRequest{Consumer: []byte(consumer)}}
	cl := newCall()
	if err := c.exchange(ctx, stream, q, cl, wire.CommandGetCursorReply, 0); err != nil {
		return 0, false, fmt.Errorf("client: get cursor %q of %q: %w", consumer, stream, err)
	}
	m, err := wire.DecodeGetCursorReply(&cl.h, cl.body)
	if err != nil {
		return 0, false, fmt.Errorf("%w: get cursor %q of %q: %w", ErrProtocol, consumer, stream, err)
	}
	return m.Offset, m.Found, nil
}
