package segment

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/ringstream/ringstream/internal/assert"
	"github.com/ringstream/ringstream/ring"
)

// readSlot is one asynchronous read in flight. A read of a segment whose descriptor is open (the
// active one, or a closed one its digest still holds) shares it (segment.readers); a read of a
// closed segment opens the file for itself, reads, and closes it: an idle copy keeps no closed
// segment open.
type readSlot struct {
	seg  *segment
	tag  uint64
	buf  []byte
	pos  int64
	from uint64
	fd   int  // own: the descriptor this read opened, once open
	own  bool // the read opened its own descriptor
	busy bool
}

// readTable is a fixed table of read slots, allocated at open.
type readTable struct {
	slots  []readSlot
	free   []int
	parked []int // own reads whose open completed on a full ring: readKick queues their read
	used   int
}

func (t *readTable) init(n int) {
	t.slots = make([]readSlot, n)
	t.free = make([]int, n)
	for i := range t.free {
		t.free[i] = n - 1 - i
	}
	t.parked = make([]int, 0, n)
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
	var err error
	if s.fd >= 0 {
		err = l.r.Read(l, makeTag(tagRead, uint64(slot)), s.fd, buf[:n], pos, 0)
	} else {
		dirfd, name := l.at(segmentName(s.base))
		err = l.r.Openat(l, makeTag(tagReadOpen, uint64(slot)), dirfd, name, unix.O_RDONLY, 0, 0)
	}
	if err != nil {
		if errors.Is(err, ring.ErrQueueFull) {
			return ErrBackpressure
		}
		return fmt.Errorf("segment: queue read: %w", err)
	}
	t.free = t.free[:len(t.free)-1]
	t.used++
	if l.activity != nil {
		*l.activity++
	}
	t.slots[slot] = readSlot{seg: s, tag: tag, buf: buf[:n], pos: pos, from: from, fd: -1, own: s.fd < 0, busy: true}
	if s.fd >= 0 {
		s.readers++
	}
	l.wake() // a read parked on a full ring is queued by a Flush
	return nil
}

// onReadOpen queues the read of a slot whose own open completed.
func (l *Log) onReadOpen(c ring.Completion) {
	i := tagIndex(c.Tag)
	slot := &l.reads.slots[i]
	assert.True(i < len(l.reads.slots) && slot.busy && slot.own, "segment: read open without read")
	if err := c.Err(); err != nil {
		l.readEnded(i, 0, fmt.Errorf("open %s: %w", l.path(slot.seg.base), err))
		return
	}
	slot.fd = int(c.Res)
	l.readQueue(i)
}

// readQueue queues the read of slot i on its own descriptor, or parks it on a full ring.
func (l *Log) readQueue(i int) {
	slot := &l.reads.slots[i]
	if !l.room(1) {
		l.reads.parked = append(l.reads.parked, i)
		return
	}
	if err := l.r.Read(l, makeTag(tagRead, uint64(i)), slot.fd, slot.buf, slot.pos, 0); err != nil {
		l.readEnded(i, 0, fmt.Errorf("queue read: %w", err))
	}
}

// readKick queues the reads parked on a full ring (from Flush).
func (l *Log) readKick() {
	t := &l.reads
	for len(t.parked) > 0 && l.room(1) {
		i := t.parked[0]
		copy(t.parked, t.parked[1:])
		t.parked = t.parked[:len(t.parked)-1]
		l.readQueue(i)
	}
}

func (l *Log) onRead(c ring.Completion) {
	i := tagIndex(c.Tag)
	assert.True(i < len(l.reads.slots) && l.reads.slots[i].busy, "segment: read completion without read")
	l.readEnded(i, int(c.Res), c.Err())
}

// readEnded frees slot i, releases or closes the descriptor it read from, and reports the read.
func (l *Log) readEnded(i int, n int, err error) {
	t := &l.reads
	slot := t.slots[i]
	t.slots[i] = readSlot{}
	t.free = append(t.free, i)
	t.used--
	if slot.own {
		if slot.fd >= 0 {
			l.closeFd(slot.fd)
		}
	} else {
		slot.seg.readers--
		l.releaseSeg(slot.seg)
	}
	if err != nil {
		l.events.ReadDone(l.kind, slot.tag, nil, fmt.Errorf("segment: read %s from %d: %w", l.kind, slot.from, err))
		return
	}
	l.events.ReadDone(l.kind, slot.tag, slot.buf[:n], nil)
}

// releaseSeg closes the descriptor of closed segment s once no read, no closing digest and no group
// commit uses it. It runs on the asynchronous paths (completions, Flush).
func (l *Log) releaseSeg(s *segment) {
	if s.fd < 0 || l.active(s) || s.readers > 0 || s.digestPending || l.commitUses(s) {
		return
	}
	if l.dig.running && l.dig.seg == s {
		return
	}
	l.closeFd(s.fd)
	s.fd = -1
}

// commitUses reports whether the group commit in flight or the one gathering has a part in s: a
// group that rolls leaves its first part in the segment it closed, whose writev and fdatasync may
// not be queued yet (the new segment's open runs first). Once that group is durable, s's digest is
// queued and its end releases s.
func (l *Log) commitUses(s *segment) bool {
	for _, g := range []*group{l.commit.flight, l.commit.pend} {
		for i := range g.parts {
			if g.parts[i].seg == s {
				return true
			}
		}
	}
	return false
}

// closeFd closes fd through the ring, or with a plain close(2) on a full ring: nothing in flight
// or queued uses fd any more, and a descriptor is never leaked.
func (l *Log) closeFd(fd int) {
	if l.room(1) {
		if err := l.r.CloseFile(l, makeTag(tagSegClose, 0), fd, 0); err == nil {
			l.closing++
			return
		}
	}
	if err := unix.Close(fd); err != nil {
		l.log.Warn("segment: close failed", "log", l.kind.String(), "err", err)
	}
}

func (l *Log) onSegClose(c ring.Completion) {
	assert.True(l.closing > 0, "segment: close completion without close")
	l.closing--
	if err := c.Err(); err != nil {
		l.log.Warn("segment: close failed", "log", l.kind.String(), "err", err)
	}
}
