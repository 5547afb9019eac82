package client

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"
)

// The Producer's appends: a record is encoded into the open batch under the producer's lock, in the
// batches' record format.

// Append adds one record (copied) to the open batch: the value rec, with a null key, no headers and
// the time of the call as its timestamp. It waits while both the open batch is full and another is in
// flight, and returns the producer's error once a batch failed or it was closed.
func (p *Producer) Append(ctx context.Context, rec []byte) error {
	if p.cfg.Format == FormatValues {
		return p.appendValue(ctx, rec)
	}
	r := Record{Value: rec}
	return p.appendRecord(ctx, &r)
}

// AppendRecord adds one record (its bytes copied) to the open batch, as Append does.
func (p *Producer) AppendRecord(ctx context.Context, r Record) error {
	if p.cfg.Format == FormatValues {
		if r.Key != nil || len(r.Headers) != 0 {
			return fmt.Errorf("%w: produce to %q: a record with a key or headers in a producer of FormatValues",
				ErrConfig, p.cfg.Stream)
		}
		return p.appendValue(ctx, r.Value)
	}
	return p.appendRecord(ctx, &r)
}

// appendValue appends one FormatValues record.
func (p *Producer) appendValue(ctx context.Context, rec []byte) error {
	size := recordSize(len(rec))
	if size > p.cfg.BatchBytes {
		return fmt.Errorf("%w: %d bytes, a batch holds at most %d", ErrRecordTooLarge, len(rec), p.cfg.BatchBytes)
	}
	if err := p.waitRoom(ctx, func() int { return size }); err != nil {
		return err
	}
	if p.openCount == 0 {
		p.openSince = time.Now()
	}
	p.open = appendRecord(p.open, rec)
	p.added()
	return nil
}

// appendRecord appends one FormatRecords record. Its size is counted as encoded: as the first of a
// batch (no deltas) with the batch's base timestamp, it must fit in BatchBytes.
func (p *Producer) appendRecord(ctx context.Context, r *Record) error {
	ts := r.Timestamp
	if ts.IsZero() {
		ts = time.Now()
	}
	ms := ts.UnixMilli()
	if first := baseTimestampSize + record2Size(r, 0, 0); first > p.cfg.BatchBytes {
		return fmt.Errorf("%w: a record of %d bytes encoded (key %d, value %d, %d headers), a batch holds at most %d",
			ErrRecordTooLarge, first-baseTimestampSize, len(r.Key), len(r.Value), len(r.Headers), p.cfg.BatchBytes)
	}
	if err := p.waitRoom(ctx, func() int { return record2Size(r, ms-p.openBase, p.openCount) }); err != nil {
		return err
	}
	if p.openCount == 0 {
		p.openSince = time.Now()
		p.openBase = ms
		p.open = binary.LittleEndian.AppendUint64(p.open, uint64(ms))
	}
	p.open = appendRecord2(p.open, r, ms-p.openBase, p.openCount)
	p.added()
	return nil
}

// waitRoom waits until the open batch is empty or has room for a record of size() bytes (called with
// p.mu held), and returns with p.mu held; or returns the producer's error, or ctx's, without it.
func (p *Producer) waitRoom(ctx context.Context, size func() int) error {
	p.mu.Lock()
	for {
		if p.err != nil {
			err := p.err
			p.mu.Unlock()
			return err
		}
		if p.closing {
			p.mu.Unlock()
			return fmt.Errorf("client: produce to %q: %w", p.cfg.Stream, ErrClosed)
		}
		if p.openCount == 0 || !p.fullLocked(size()) {
			return nil
		}
		p.openFull = true
		ch := p.roomC
		p.mu.Unlock()
		p.poke()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		p.mu.Lock()
	}
}

// added counts the record just appended to the open batch, releases p.mu and wakes the sender when
// the batch became due.
func (p *Producer) added() {
	p.openCount++
	p.appended++
	first, full := p.openCount == 1, p.fullLocked(0)
	p.mu.Unlock()
	if first || full {
		p.poke()
	}
}
