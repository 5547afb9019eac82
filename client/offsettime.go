package client

import (
	"context"
	"fmt"
	"time"
)

// OffsetForTime returns the first offset of stream whose batch was appended at or after t: the first
// record a reader that wants "everything since t" reads. It is the confirmed tail when every retained
// batch is older than t, and the retained head when none is.
//
// It searches append time, the stream owner's clock when it appended each batch (the batch header's
// max timestamp), not the producers' record timestamps (Records.Timestamp of FormatRecords), which
// the producers choose and need not be in order. Append times never go back on one owner; after a
// failover to a node whose clock is behind, the search still returns an offset whose batch is at or
// after t with every batch before it older, but not necessarily the first such batch in the stream.
//
// It asks the owner for the retained head and the confirmed tail (a list-cursors page), then binary
// searches between them with fetches of one record, each answered with the whole batch holding it:
// about log2(records) fetches. Retention that removes the records being searched meanwhile fails a
// fetch (ErrInvalidRequest, offset below the retained head).
func (c *Client) OffsetForTime(ctx context.Context, stream string, t time.Time) (uint64, error) {
	if err := checkName("stream", stream); err != nil {
		return 0, err
	}
	var list CursorList
	if _, err := c.listCursorsPage(ctx, stream, "", false, 1, &list); err != nil {
		return 0, fmt.Errorf("client: offset for time in %q: %w", stream, err)
	}
	target := t.UnixMilli() // append times are whole ms: a batch at ms m is at or after t when m >= ceil(t)
	if t.After(time.UnixMilli(target)) {
		target++
	}
	cs, err := c.Consumer(stream, list.Head, FetchOptions{RecordsMax: 1})
	if err != nil {
		return 0, err
	}
	lo, hi := list.Head, list.ConfirmedTail
	for lo < hi {
		mid := lo + (hi-lo)/2
		h, err := cs.batchAt(ctx, mid)
		if err != nil {
			return 0, fmt.Errorf("client: offset for time in %q: %w", stream, err)
		}
		// Every record of a batch has its batch's append time: the search moves by whole batches.
		if h.maxTs >= target {
			hi = max(h.base, lo)
		} else {
			lo = h.base + uint64(h.count)
		}
	}
	return lo, nil
}

// batchAt fetches the batch holding offset and returns its header (its payload is not decoded).
func (cs *Consumer) batchAt(ctx context.Context, offset uint64) (batchHeader, error) {
	cs.Seek(offset)
	recs, err := cs.Poll(ctx)
	if err != nil {
		return batchHeader{}, err
	}
	if len(recs.batches) == 0 {
		return batchHeader{}, fmt.Errorf("%w: fetch at %d, below the confirmed tail %d, answered no batch", ErrProtocol,
			offset, recs.ConfirmedTail)
	}
	h, _, _, err := decodeBatch(recs.batches)
	if err != nil {
		return batchHeader{}, fmt.Errorf("fetch at %d: %w", offset, err)
	}
	if h.base > offset || offset-h.base >= uint64(h.count) {
		return batchHeader{}, fmt.Errorf("%w: fetch at %d answered a batch of offsets %d..%d", ErrCorruptBatch, offset,
			h.base, h.base+uint64(h.count))
	}
	return h, nil
}
