package wire

import (
	"github.com/ringstream/ringstream/internal/assert"
)

// listEntrySize is the size of one log epoch and of one history start on the wire.
const listEntrySize = 24

// LogEpoch is one entry of a copy's log epochs: from Epoch on, the copy's record log followed that
// epoch's owner from RecordStart and its cursor event log from CursorStart. Wire layout, 24 bytes:
// epoch u32 | reserved u32 | record_start u64 | cursor_start u64.
type LogEpoch struct {
	Epoch       uint32
	RecordStart uint64
	CursorStart uint64
}

// LogEpochs is a decoded list of log epochs, read in place. The decoder checked every entry (reserved
// bytes zero, epochs strictly increasing), so reading it cannot fail.
type LogEpochs struct {
	raw []byte
}

// Len is the number of entries.
func (l LogEpochs) Len() int { return len(l.raw) / listEntrySize }

// At returns entry i (0 <= i < Len).
func (l LogEpochs) At(i int) LogEpoch {
	assert.True(i >= 0 && i < l.Len(), "wire: log epoch index out of range")
	b := l.raw[i*listEntrySize:]
	return LogEpoch{Epoch: get32(b, 0), RecordStart: get64(b, 8), CursorStart: get64(b, 16)}
}

// AppendTo appends every entry to dst and returns it.
func (l LogEpochs) AppendTo(dst []LogEpoch) []LogEpoch {
	for i := 0; i < l.Len(); i++ {
		dst = append(dst, l.At(i))
	}
	return dst
}

func appendLogEpochs(dst []byte, es []LogEpoch) []byte {
	for i, e := range es {
		assert.True(i == 0 || es[i-1].Epoch < e.Epoch, "wire: log epochs not in increasing order")
		n := len(dst)
		dst = grow(dst, listEntrySize)
		b := dst[n:]
		put32(b, 0, e.Epoch)
		put32(b, 4, 0)
		put64(b, 8, e.RecordStart)
		put64(b, 16, e.CursorStart)
	}
	return dst
}

func decodeLogEpochs(count uint32, body []byte) (LogEpochs, error) {
	if uint64(len(body)) != uint64(count)*listEntrySize {
		return LogEpochs{}, ErrEntryCount
	}
	var prev uint32
	for i := 0; i < len(body); i += listEntrySize {
		b := body[i : i+listEntrySize]
		if get32(b, 4) != 0 {
			return LogEpochs{}, ErrEntryReserved
		}
		epoch := get32(b, 0)
		if i > 0 && epoch <= prev {
			return LogEpochs{}, malformed("log epochs not in increasing order")
		}
		prev = epoch
	}
	return LogEpochs{raw: nilIfEmpty(body)}, nil
}

// HistoryStart records where an owner's history starts: at Epoch, node Node took over with its record
// tail RecordStart and cursor event tail CursorStart. Wire layout, 24 bytes: epoch u32 | node u16 |
// reserved u16 | record_start u64 | cursor_start u64.
type HistoryStart struct {
	Epoch       uint32
	Node        uint16
	RecordStart uint64
	CursorStart uint64
}

// HistoryStarts is a decoded list of history starts, read in place. The decoder checked every entry
// (node not 0, reserved bytes zero, epochs strictly increasing), so reading it cannot fail.
type HistoryStarts struct {
	raw []byte
}

// Len is the number of entries.
func (l HistoryStarts) Len() int { return len(l.raw) / listEntrySize }

// At returns entry i (0 <= i < Len).
func (l HistoryStarts) At(i int) HistoryStart {
	assert.True(i >= 0 && i < l.Len(), "wire: history start index out of range")
	b := l.raw[i*listEntrySize:]
	return HistoryStart{Epoch: get32(b, 0), Node: get16(b, 4), RecordStart: get64(b, 8), CursorStart: get64(b, 16)}
}

// AppendTo appends every entry to dst and returns it.
func (l HistoryStarts) AppendTo(dst []HistoryStart) []HistoryStart {
	for i := 0; i < l.Len(); i++ {
		dst = append(dst, l.At(i))
	}
	return dst
}

func appendHistoryStarts(dst []byte, ss []HistoryStart) []byte {
	for i, s := range ss {
		assert.True(i == 0 || ss[i-1].Epoch < s.Epoch, "wire: history starts not in increasing order")
		assert.True(s.Node != 0, "wire: history start without a node")
		n := len(dst)
		dst = grow(dst, listEntrySize)
		b := dst[n:]
		put32(b, 0, s.Epoch)
		put16(b, 4, s.Node)
		put16(b, 6, 0)
		put64(b, 8, s.RecordStart)
		put64(b, 16, s.CursorStart)
	}
	return dst
}

func decodeHistoryStarts(count uint32, body []byte) (HistoryStarts, error) {
	if uint64(len(body)) != uint64(count)*listEntrySize {
		return HistoryStarts{}, ErrEntryCount
	}
	var prev uint32
	for i := 0; i < len(body); i += listEntrySize {
		b := body[i : i+listEntrySize]
		if get16(b, 6) != 0 {
			return HistoryStarts{}, ErrEntryReserved
		}
		if get16(b, 4) == 0 {
			return HistoryStarts{}, malformed("history start node 0")
		}
		epoch := get32(b, 0)
		if i > 0 && epoch <= prev {
			return HistoryStarts{}, malformed("history starts not in increasing order")
		}
		prev = epoch
	}
	return HistoryStarts{raw: nilIfEmpty(body)}, nil
}
