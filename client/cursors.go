package client

import (
	"context"
	"fmt"
	"math"

	"github.com/ringstream/ringstream/wire"
)

// CursorInfo is one consumer's committed cursor on a stream: the next offset it will read, and its lag,
// the stream's confirmed tail minus that offset (0 when the cursor is at or past it).
type CursorInfo struct {
	Consumer string
	Offset   uint64
	Lag      uint64
}

// CursorList is a stream's consumers as its owner holds them, in name order, with the confirmed tail
// their lag counts from and the record log's retained head (a cursor below it points at records
// retention removed: its consumer resumes at the head).
type CursorList struct {
	ConfirmedTail uint64
	Head          uint64
	Cursors       []CursorInfo
}

type listCursorsRequest struct{ m wire.ListCursors }

func (q *listCursorsRequest) appendTo(dst []byte, from wire.From, id uint64, r *Route) []byte {
	q.m.RequestID, q.m.Stream, q.m.Incarnation = id, r.Stream, r.Incarnation
	return wire.AppendListCursors(dst, from, &q.m)
}

type deleteCursorRequest struct{ m wire.CursorRequest }

func (q *deleteCursorRequest) appendTo(dst []byte, from wire.From, id uint64, r *Route) []byte {
	q.m.RequestID, q.m.Stream, q.m.Incarnation = id, r.Stream, r.Incarnation
	return wire.AppendDeleteCursor(dst, from, &q.m)
}

// listCursorsPage asks the owner for up to limit cursors from (or, with after, past) the name from.
func (c *Client) listCursorsPage(ctx context.Context, stream, from string, after bool, limit uint32,
	list *CursorList) (more bool, err error) {
	q := &listCursorsRequest{m: wire.ListCursors{From: []byte(from), After: after, Limit: limit}}
	if from == "" {
		q.m.From = nil
	}
	cl := newCall()
	if err := c.exchange(ctx, stream, q, cl, wire.CommandListCursorsReply, 0); err != nil {
		return false, err
	}
	m, entries, err := wire.DecodeListCursorsReply(&cl.h, cl.body)
	if err != nil {
		return false, fmt.Errorf("%w: %w", ErrProtocol, err)
	}
	list.ConfirmedTail, list.Head = m.ConfirmedTail, m.Head
	for e, ok := entries.Next(); ok; e, ok = entries.Next() {
		list.Cursors = append(list.Cursors, CursorInfo{Consumer: string(e.Consumer), Offset: e.Offset})
	}
	return m.More, nil
}

// ListCursors returns every consumer's cursor on stream, in name order, paging through the owner's
// cursor map wire.CursorListMax at a time. Pages are separate requests: a cursor committed or deleted
// meanwhile may show as it was on the page that listed it. The lags count from the last page's
// confirmed tail.
func (c *Client) ListCursors(ctx context.Context, stream string) (CursorList, error) {
	if err := checkName("stream", stream); err != nil {
		return CursorList{}, err
	}
	var list CursorList
	from, after := "", false
	for {
		n := len(list.Cursors)
		more, err := c.listCursorsPage(ctx, stream, from, after, wire.CursorListMax, &list)
		if err != nil {
			return CursorList{}, fmt.Errorf("client: list cursors of %q: %w", stream, err)
		}
		if !more || len(list.Cursors) == n {
			break
		}
		from, after = list.Cursors[len(list.Cursors)-1].Consumer, true
	}
	for i := range list.Cursors {
		list.Cursors[i].Lag = lag(list.ConfirmedTail, list.Cursors[i].Offset)
	}
	return list, nil
}

// DescribeCursor returns consumer's cursor on stream with its lag, and the stream's confirmed tail and
// head (in list); found is false when the consumer has no cursor.
func (c *Client) DescribeCursor(ctx context.Context, stream, consumer string) (info CursorInfo, list CursorList,
	found bool, err error) {
	if err := checkName("stream", stream); err != nil {
		return CursorInfo{}, CursorList{}, false, err
	}
	if err := checkName("consumer", consumer); err != nil {
		return CursorInfo{}, CursorList{}, false, err
	}
	if _, err := c.listCursorsPage(ctx, stream, consumer, false, 1, &list); err != nil {
		return CursorInfo{}, CursorList{}, false, fmt.Errorf("client: describe cursor %q of %q: %w", consumer, stream, err)
	}
	if len(list.Cursors) == 0 || list.Cursors[0].Consumer != consumer {
		list.Cursors = nil
		return CursorInfo{Consumer: consumer}, list, false, nil
	}
	list.Cursors[0].Lag = lag(list.ConfirmedTail, list.Cursors[0].Offset)
	return list.Cursors[0], list, true, nil
}

// DeleteCursor forgets consumer's cursor on stream and returns the offset it had. The owner answers
// once the delete is durable on as many copies as confirm a record, so a failover keeps it deleted; a
// later CommitCursor makes a new cursor. found is false when the consumer had no cursor (nothing was
// changed). A delete retried across a failover may find the cursor already deleted by the first try:
// found false then.
func (c *Client) DeleteCursor(ctx context.Context, stream, consumer string) (offset uint64, found bool, err error) {
	if err := checkName("stream", stream); err != nil {
		return 0, false, err
	}
	if err := checkName("consumer", consumer); err != nil {
		return 0, false, err
	}
	q := &deleteCursorRequest{m: wire.CursorRequest{Consumer: []byte(consumer)}}
	cl := newCall()
	if err := c.exchange(ctx, stream, q, cl, wire.CommandDeleteCursorReply, 0); err != nil {
		return 0, false, fmt.Errorf("client: delete cursor %q of %q: %w", consumer, stream, err)
	}
	m, err := wire.DecodeDeleteCursorReply(&cl.h, cl.body)
	if err != nil {
		return 0, false, fmt.Errorf("%w: delete cursor %q of %q: %w", ErrProtocol, consumer, stream, err)
	}
	return m.Offset, m.Found, nil
}

// CursorReset says where ResetCursor moves a cursor: exactly one of ToOffset, ToEarliest, ToLatest or
// ShiftBy (a signed move from the cursor's current offset) is set.
type CursorReset struct {
	ToOffset   *uint64
	ToEarliest bool // the record log's retained head
	ToLatest   bool // the confirmed tail: nothing left to read
	ShiftBy    *int64
}

// CursorResetResult is what ResetCursor did: the cursor before (Found false: the consumer had none)
// and after, with the confirmed tail and head the target was computed from.
type CursorResetResult struct {
	Before        uint64
	Found         bool
	After         uint64
	ConfirmedTail uint64
	Head          uint64
}

// ResetCursor moves consumer's cursor on stream as reset says, forwards or backwards, by a commit of
// the computed offset (a consumer without a cursor gets one; a shift then starts from the head). An
// offset past the confirmed tail is lowered to it (a commit there would be refused), and a shift is
// clamped to the retained head and the confirmed tail, as kafka-consumer-groups --reset-offsets does;
// After says where the cursor went. The consumer's own next commit overrides the reset, so reset a consumer that is stopped.
func (c *Client) ResetCursor(ctx context.Context, stream, consumer string, reset CursorReset) (CursorResetResult, error) {
	n := 0
	for _, set := range []bool{reset.ToOffset != nil, reset.ToEarliest, reset.ToLatest, reset.ShiftBy != nil} {
		if set {
			n++
		}
	}
	if n != 1 {
		return CursorResetResult{}, fmt.Errorf("%w: CursorReset sets %d targets, want exactly 1", ErrConfig, n)
	}
	info, list, found, err := c.DescribeCursor(ctx, stream, consumer)
	if err != nil {
		return CursorResetResult{}, err
	}
	before, after := info.Offset, uint64(0)
	switch {
	case reset.ToOffset != nil:
		after = min(*reset.ToOffset, list.ConfirmedTail)
	case reset.ToEarliest:
		after = list.Head
	case reset.ToLatest:
		after = list.ConfirmedTail
	default:
		from := before
		if !found {
			from = list.Head
		}
		after = shift(from, *reset.ShiftBy, list.Head, list.ConfirmedTail)
	}
	if err := c.CommitCursor(ctx, stream, consumer, after); err != nil {
		return CursorResetResult{}, err
	}
	return CursorResetResult{Before: before, Found: found, After: after, ConfirmedTail: list.ConfirmedTail, Head: list.Head}, nil
}

// shift moves from by delta, clamped to [lo, hi].
func shift(from uint64, delta int64, lo, hi uint64) uint64 {
	var v uint64
	switch {
	case delta >= 0 && uint64(delta) > math.MaxUint64-from:
		v = math.MaxUint64
	case delta >= 0:
		v = from + uint64(delta)
	case uint64(-(delta+1))+1 > from:
		v = 0
	default:
		v = from - (uint64(-(delta + 1)) + 1)
	}
	return min(max(v, lo), max(hi, lo))
}

// lag is how far a cursor at off trails the confirmed tail.
func lag(confirmed, off uint64) uint64 {
	if off >= confirmed {
		return 0
	}
	return confirmed - off
}
