package segment

import (
	"errors"
	"fmt"

	"github.com/ringstream/ringstream/internal/assert"
	"github.com/ringstream/ringstream/ring"
)

// readSlot is one asynchronous read in flight.
type readSlot struct {
	seg  *segment
	tag  uint64
	buf  []byte
	from uint64
	busy bool
}

// readTable is a fixed table of read slots, allocated at open.
type readTable struct {
	slots []readSlot
	free  []int
	used  int
}

func (t *readTable) init(n int) {
	t.slots = make([]readSlot, n)
	t.free = make([]int, n)
	for i := range t.free {
		t.free[i] = n - 1 - i
	}
}

// Read reads durable batches starting at or before offset from into buf, through the ring. It
// returns at once; Events.ReadDone receives tag and the bytes read (aliasing buf), which begin at
// a batch boundary at or below from (walk them with NewBatchIter(data, from)). One read stays
// inside one segment file; read again from the last batch's NextOffset to go on. buf belongs to
// the read until ReadDone: the caller must not touch it before. Size buf to at least
// IndexIntervalBytes plus the largest batch, or a read may hold no whole batch.
func (l *Log) Read(tag uint64, from uint64, buf []byte) error {
	switch {
	case l.shut:
		return ErrClosed
	case l.held:
		return ErrBusy
	case from < l.Head():
		return fmt.Errorf("%w: offset %d, head %d", ErrBelowHead, from, l.Head())
	case from >= l.durable:
		return fmt.Errorf("%w: offset %d, durable tail %d", ErrBeyondTail, from, l.durable)
	case len(l.reads.free) == 0:
		return ErrBackpressure
	}
	s := l.segs[l.findSegment(from)]
	assert.True(from < s.end, "segment: read offset outside its segment")
	_, pos := indexPos(s, from)
	n := min(int64(len(buf)), s.size-pos)
	t := &l.reads
	slot := t.free[len(t.free)-1]
	if err := l.r.Read(l, makeTag(tagRead, uint64(slot)), s.fd, buf[:n], pos, 0); err != nil {
		if errors.Is(err, ring.ErrQueueFull) {
			return ErrBackpressure
		}
		return fmt.Errorf("segment: queue read: %w", err)
	}
	t.free = t.free[:len(t.free)-1]
	t.used++
	t.slots[slot] = readSlot{seg: s, tag: tag, buf: buf[:n], from: from, busy: true}
	return nil
}

func (l *Log) onRead(c ring.Completion) {
	t := &l.reads
	i := tagIndex(c.Tag)
	assert.True(i < len(t.slots) && t.slots[i].busy, "segment: read completion without read")
	slot := t.slots[i]
	t.slots[i] = readSlot{}
	t.free = append(t.free, i)
	t.used--
	if err := c.Err(); err != nil {
		l.events.ReadDone(l.kind, slot.tag, nil, fmt.Errorf("segment: read %s from %d: %w", l.kind, slot.from, err))
		return
	}
	l.events.ReadDone(l.kind, slot.tag, slot.buf[:c.Res], nil)
}
