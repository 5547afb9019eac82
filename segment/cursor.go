package segment

import (
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"slices"

	"github.com/cespare/xxhash/v2"
	"golang.org/x/sys/unix"
)

// A cursor event is one batch of one record in the cursor log whose payload is, little endian, a
// commit:
//
//	name length u16 | name | offset u64
//
// or a delete (a tombstone: the consumer's cursor is forgotten from that event on):
//
//	name length u16 | name
//
// The two are told apart by the payload's length. A snapshot holds the cursors left after every event
// it covers, so it forgets a deleted cursor: nothing older than the snapshot can bring it back, and a
// replay past the boundary meets the tombstone again.
//
// The cursor snapshot "cursors.snap", version 1:
//
//	magic "RSC1" u32 | version u32 | boundary u64 | count u32 | count x (name length u16 | name |
//	offset u64) | xxhash64 of everything before it u64
//
// boundary is the cursor log offset the snapshot's map covers: open replays events from it on.
const (
	// CursorNameMax bounds a consumer name's length.
	CursorNameMax = 1024

	cursorSnapName    = "cursors.snap"
	cursorSnapMagic   = 0x31435352 // "RSC1"
	cursorSnapVersion = 1
	cursorSnapMax     = 64 << 20
)

// cursorMap holds each consumer's offset. The values are pointers so that an event for a known
// consumer, whose name arrives as bytes, updates it without converting the name to a string.
type cursorMap map[string]*uint64

func (m cursorMap) set(name string, off uint64) {
	if p, ok := m[name]; ok {
		*p = off
		return
	}
	p := new(uint64) // not &off: that would move off to the heap on every call
	*p = off
	m[name] = p
}

func (m cursorMap) setBytes(name []byte, off uint64) {
	if p, ok := m[string(name)]; ok { // the compiler converts without allocating for a lookup
		*p = off
		return
	}
	p := new(uint64)
	*p = off
	m[string(name)] = p
}

// delete forgets name's cursor.
func (m cursorMap) delete(name string) { delete(m, name) }

// apply applies one decoded event.
func (m cursorMap) apply(name []byte, off uint64, deleted bool) {
	if deleted {
		delete(m, string(name))
		return
	}
	m.setBytes(name, off)
}

// appendCursorDelete encodes one tombstone onto dst.
func appendCursorDelete(dst []byte, name string) []byte {
	dst = binary.LittleEndian.AppendUint16(dst, uint16(len(name)))
	return append(dst, name...)
}

// appendCursorEvent encodes one event onto dst.
func appendCursorEvent(dst []byte, name string, offset uint64) []byte {
	dst = binary.LittleEndian.AppendUint16(dst, uint16(len(name)))
	dst = append(dst, name...)
	return binary.LittleEndian.AppendUint64(dst, offset)
}

// decodeCursorEvent decodes an event payload: a commit of name at offset, or a delete of name
// (deleted, offset 0); name aliases b. Never panics.
func decodeCursorEvent(b []byte) (name []byte, offset uint64, deleted bool, err error) {
	if len(b) < 2 {
		return nil, 0, false, fmt.Errorf("%w: cursor event of %d bytes", ErrCorrupt, len(b))
	}
	n := int(binary.LittleEndian.Uint16(b))
	switch {
	case n == 0 || n > CursorNameMax:
		return nil, 0, false, fmt.Errorf("%w: cursor event with a %d-byte name", ErrCorrupt, n)
	case len(b) == 2+n:
		return b[2:], 0, true, nil
	case len(b) == 2+n+8:
		return b[2 : 2+n], binary.LittleEndian.Uint64(b[2+n:]), false, nil
	}
	return nil, 0, false, fmt.Errorf("%w: cursor event of %d bytes for a %d-byte name", ErrCorrupt, len(b), n)
}

// encodeCursorSnapshot encodes boundary and the map, names sorted.
func encodeCursorSnapshot(boundary uint64, m cursorMap) []byte {
	names := make([]string, 0, len(m))
	for name := range m {
		names = append(names, name)
	}
	slices.Sort(names)
	le := binary.LittleEndian
	b := le.AppendUint32(nil, cursorSnapMagic)
	b = le.AppendUint32(b, cursorSnapVersion)
	b = le.AppendUint64(b, boundary)
	b = le.AppendUint32(b, uint32(len(names)))
	for _, name := range names {
		b = appendCursorEvent(b, name, *m[name])
	}
	return le.AppendUint64(b, xxhash.Sum64(b))
}

// decodeCursorSnapshot decodes a snapshot. Never panics.
func decodeCursorSnapshot(b []byte) (uint64, cursorMap, error) {
	le := binary.LittleEndian
	if len(b) < 28 {
		return 0, nil, fmt.Errorf("%w: cursor snapshot of %d bytes", ErrCorrupt, len(b))
	}
	sum := len(b) - 8
	if le.Uint64(b[sum:]) != xxhash.Sum64(b[:sum]) {
		return 0, nil, fmt.Errorf("%w: cursor snapshot checksum", ErrCorrupt)
	}
	if le.Uint32(b) != cursorSnapMagic || le.Uint32(b[4:]) != cursorSnapVersion {
		return 0, nil, fmt.Errorf("%w: cursor snapshot magic or version", ErrCorrupt)
	}
	boundary := le.Uint64(b[8:])
	count := le.Uint32(b[16:])
	m := make(cursorMap, min(count, 1<<16))
	p := 20
	for i := uint32(0); i < count; i++ {
		if p+2 > sum {
			return 0, nil, fmt.Errorf("%w: cursor snapshot entry %d", ErrCorrupt, i)
		}
		n := int(le.Uint16(b[p:]))
		if p+2+n+8 > sum {
			return 0, nil, fmt.Errorf("%w: cursor snapshot entry %d", ErrCorrupt, i)
		}
		m.setBytes(b[p+2:p+2+n], le.Uint64(b[p+2+n:]))
		p += 2 + n + 8
	}
	if p != sum {
		return 0, nil, fmt.Errorf("%w: cursor snapshot has %d trailing bytes", ErrCorrupt, sum-p)
	}
	return boundary, m, nil
}

// loadCursorSnapshot reads the snapshot; a missing one is an empty map at boundary 0.
func loadCursorSnapshot(sr *syncRing, dir string) (uint64, cursorMap, error) {
	b, err := sr.readFile(unix.AT_FDCWD, filepath.Join(dir, cursorSnapName), cursorSnapMax)
	if errors.Is(err, unix.ENOENT) {
		return 0, cursorMap{}, nil
	}
	if err != nil {
		return 0, nil, fmt.Errorf("segment: read %s: %w", cursorSnapName, err)
	}
	boundary, m, err := decodeCursorSnapshot(b)
	if err != nil {
		return 0, nil, fmt.Errorf("segment: %s: %w", cursorSnapName, err)
	}
	return boundary, m, nil
}

// replayCursors applies the durable cursor events at or past from to m (open path, synchronous).
func (l *Log) replayCursors(from uint64, m cursorMap) (int, error) {
	if from >= l.durable {
		return 0, nil
	}
	if from < l.Head() {
		return 0, fmt.Errorf("%w: cursor snapshot boundary %d below cursor log head %d", ErrCorrupt, from, l.Head())
	}
	applied := 0
	defer l.closeIdle()
	for i := l.findSegment(from); i < len(l.segs); i++ {
		s := l.segs[i]
		buf := make([]byte, s.size)
		fd, err := l.segFd(s)
		if err != nil {
			return applied, err
		}
		if _, err := l.sr.readAt(fd, buf, 0); err != nil {
			return applied, fmt.Errorf("segment: read %s: %w", l.path(s.base), err)
		}
		it := NewBatchIter(buf, from)
		for {
			h, payload, ok := it.Next()
			if !ok {
				break
			}
			name, off, deleted, err := decodeCursorEvent(payload)
			if err != nil || h.RecordCount != 1 {
				return applied, fmt.Errorf("segment: %s event %d: %w", l.path(s.base), h.BaseOffset, errors.Join(ErrCorrupt, err))
			}
			m.apply(name, off, deleted)
			applied++
		}
		if err := it.Err(); err != nil {
			return applied, fmt.Errorf("segment: %s: %w", l.path(s.base), err)
		}
	}
	return applied, nil
}
