package wire

import (
	"bytes"

	"github.com/ringstream/ringstream/internal/assert"
)

// Cursor administration: list a stream's consumers with their cursors (commands 82 and 83) and delete
// one consumer's cursor (84 and 85). Like the other data requests they address one stream through the
// header's Group (and Incarnation, 0 for the current one) and are served by the stream's owner.

// CursorListMax is the most cursors one list reply carries. A request asking for more gets this many
// and More; a client pages with ListCursors.After.
const CursorListMax = 1000

// ListCursors asks for up to Limit of a stream's cursors in name order (command 82): those named From
// or above, or with After those above From only. An empty From (After unset) starts at the first
// name. Area: request_id u64 | limit u32 | after u8. Body: From (empty, or a consumer name).
type ListCursors struct {
	RequestID   uint64
	Stream      uint64
	Incarnation uint32
	From        []byte
	After       bool
	Limit       uint32
}

const (
	listCursorsLimit   = 8
	listCursorsAfter   = 12
	listCursorsAreaEnd = 13
)

// AppendListCursors appends a list-cursors request.
func AppendListCursors(dst []byte, from From, m *ListCursors) []byte {
	assert.True(m.Stream != 0, "wire: list cursors of stream 0")
	assert.True(m.Limit != 0, "wire: list cursors with limit 0")
	assert.True(len(m.From) == 0 || validConsumerName(m.From), "wire: list cursors from an invalid consumer name")
	assert.True(!m.After || len(m.From) != 0, "wire: list cursors after no name")
	h := Header{Command: CommandListCursors, Group: m.Stream, Incarnation: m.Incarnation}
	put64(h.Area[:], clientRequestID, m.RequestID)
	put32(h.Area[:], listCursorsLimit, m.Limit)
	if m.After {
		h.Area[listCursorsAfter] = 1
	}
	dst, start := startFrame(dst, from, &h)
	dst = append(dst, m.From...)
	return endFrame(dst, start, 0)
}

// DecodeListCursors reads a parsed list-cursors request; From aliases body.
func DecodeListCursors(h *Header, body []byte) (ListCursors, error) {
	if err := checkHeader(h, CommandListCursors, listCursorsAreaEnd); err != nil {
		return ListCursors{}, err
	}
	after := h.Area[listCursorsAfter]
	m := ListCursors{
		RequestID:   get64(h.Area[:], clientRequestID),
		Stream:      h.Group,
		Incarnation: h.Incarnation,
		From:        nilIfEmpty(body),
		After:       after == 1,
		Limit:       get32(h.Area[:], listCursorsLimit),
	}
	switch {
	case m.Stream == 0:
		return ListCursors{}, malformed("stream 0")
	case after > 1:
		return ListCursors{}, malformed("after")
	case m.After && len(body) == 0:
		return ListCursors{}, malformed("after without a consumer name")
	}
	if len(body) != 0 {
		if err := validateName(body, "consumer", CodeBadConsumerName, ConsumerNameRule); err != nil {
			return ListCursors{}, err
		}
	}
	if err := ValidateCount("limit", uint64(m.Limit)); err != nil {
		return ListCursors{}, err
	}
	return m, nil
}

// CursorInfo is one consumer's cursor in a list reply: the next offset it will read. Wire layout:
// offset u64 | name_len u8 | name [name_len].
type CursorInfo struct {
	Consumer []byte
	Offset   uint64
}

const cursorInfoFixedSize = 9

// ListCursorsReply answers a list-cursors request (command 83) with the owner's confirmed tail and
// retained head (a cursor's lag is ConfirmedTail minus its offset), the number of cursors the stream
// has (Total), and More when cursors past the last one listed remain. Header: EntryCount is the number
// of entries. Area: request_id u64 | confirmed_tail u64 | head u64 | total u32 | more u8. Body: the
// entries (CursorInfo), in increasing name order.
type ListCursorsReply struct {
	RequestID     uint64
	Stream        uint64
	Incarnation   uint32
	ConfirmedTail uint64
	Head          uint64
	Total         uint32
	More          bool
}

const (
	listCursorsReplyConfirmed = 8
	listCursorsReplyHead      = 16
	listCursorsReplyTotal     = 24
	listCursorsReplyMore      = 28
	listCursorsReplyAreaEnd   = 29
)

// AppendListCursorsReply appends a list-cursors reply carrying cursors, which must be in increasing
// name order.
func AppendListCursorsReply(dst []byte, from From, m *ListCursorsReply, cursors []CursorInfo) []byte {
	assert.True(m.Stream != 0, "wire: list cursors reply for stream 0")
	assert.True(len(cursors) <= CursorListMax, "wire: list cursors reply above CursorListMax")
	assert.True(uint64(len(cursors)) <= uint64(m.Total), "wire: list cursors reply with more entries than its total")
	h := Header{Command: CommandListCursorsReply, Group: m.Stream, Incarnation: m.Incarnation}
	put64(h.Area[:], clientRequestID, m.RequestID)
	put64(h.Area[:], listCursorsReplyConfirmed, m.ConfirmedTail)
	put64(h.Area[:], listCursorsReplyHead, m.Head)
	put32(h.Area[:], listCursorsReplyTotal, m.Total)
	if m.More {
		h.Area[listCursorsReplyMore] = 1
	}
	dst, start := startFrame(dst, from, &h)
	for i := range cursors {
		c := &cursors[i]
		assert.True(validConsumerName(c.Consumer), "wire: cursor info with an invalid consumer name")
		assert.True(i == 0 || bytes.Compare(cursors[i-1].Consumer, c.Consumer) < 0, "wire: cursor infos not in name order")
		dst = AppendU64(dst, c.Offset)
		dst = append(dst, uint8(len(c.Consumer)))
		dst = append(dst, c.Consumer...)
	}
	return endFrame(dst, start, uint32(len(cursors)))
}

// DecodeListCursorsReply reads a parsed list-cursors reply and checks every entry; the list aliases
// body.
func DecodeListCursorsReply(h *Header, body []byte) (ListCursorsReply, CursorInfos, error) {
	if err := checkHeader(h, CommandListCursorsReply, listCursorsReplyAreaEnd); err != nil {
		return ListCursorsReply{}, CursorInfos{}, err
	}
	more := h.Area[listCursorsReplyMore]
	m := ListCursorsReply{
		RequestID:     get64(h.Area[:], clientRequestID),
		Stream:        h.Group,
		Incarnation:   h.Incarnation,
		ConfirmedTail: get64(h.Area[:], listCursorsReplyConfirmed),
		Head:          get64(h.Area[:], listCursorsReplyHead),
		Total:         get32(h.Area[:], listCursorsReplyTotal),
		More:          more == 1,
	}
	switch {
	case m.Stream == 0:
		return ListCursorsReply{}, CursorInfos{}, malformed("stream 0")
	case more > 1:
		return ListCursorsReply{}, CursorInfos{}, malformed("more")
	case h.EntryCount > CursorListMax || h.EntryCount > m.Total:
		return ListCursorsReply{}, CursorInfos{}, ErrEntryCount
	case uint64(h.EntryCount)*cursorInfoFixedSize > uint64(len(body)):
		return ListCursorsReply{}, CursorInfos{}, ErrEntryCount
	}
	list := CursorInfos{raw: nilIfEmpty(body), count: int(h.EntryCount)}
	check := list
	for {
		_, ok, err := check.next()
		if err != nil {
			return ListCursorsReply{}, CursorInfos{}, err
		}
		if !ok {
			break
		}
	}
	if check.off != len(body) {
		return ListCursorsReply{}, CursorInfos{}, ErrTrailingBytes
	}
	return m, list, nil
}

// CursorInfos iterates a list reply's entries in place; the decoder already checked them all.
type CursorInfos struct {
	raw   []byte
	off   int
	count int
	read  int
	prev  []byte
}

// Len is the number of entries.
func (l *CursorInfos) Len() int { return l.count }

// Next returns the next entry, or false after the last. Consumer aliases the frame's body.
func (l *CursorInfos) Next() (CursorInfo, bool) {
	c, ok, err := l.next()
	assert.True(err == nil, "wire: cursor list changed after it was checked")
	return c, ok
}

func (l *CursorInfos) next() (CursorInfo, bool, error) {
	if l.read == l.count {
		return CursorInfo{}, false, nil
	}
	r := NewBodyReader(l.raw[l.off:])
	c := CursorInfo{Offset: r.U64()}
	c.Consumer = r.Bytes(int(r.U8()))
	if err := r.Err(); err != nil {
		return CursorInfo{}, false, err
	}
	switch {
	case !validConsumerName(c.Consumer):
		return CursorInfo{}, false, malformed("consumer name")
	case l.read > 0 && bytes.Compare(l.prev, c.Consumer) >= 0:
		return CursorInfo{}, false, malformed("cursors not in name order")
	}
	l.off += cursorInfoFixedSize + len(c.Consumer)
	l.read++
	l.prev = c.Consumer
	return c, true, nil
}

// AppendDeleteCursor appends a delete-cursor request (command 84): forget m.Consumer's cursor on the
// stream; m.Offset must be 0. Area: request_id u64. Body: the consumer name. The owner answers once
// the delete is on W copies' disks.
func AppendDeleteCursor(dst []byte, from From, m *CursorRequest) []byte {
	assert.True(m.Offset == 0, "wire: delete cursor with an offset")
	return appendCursorRequest(dst, from, CommandDeleteCursor, m)
}

// DecodeDeleteCursor reads a parsed delete-cursor request; Consumer aliases body.
func DecodeDeleteCursor(h *Header, body []byte) (CursorRequest, error) {
	return decodeCursorRequest(h, body, CommandDeleteCursor, cursorOffset)
}

// AppendDeleteCursorReply appends a delete-cursor reply (command 85): Found says the consumer had a
// cursor, at Offset, and that its delete is durable on W copies; not Found, that it had none (nothing
// was written). The layout is CursorReply's.
func AppendDeleteCursorReply(dst []byte, from From, m *CursorReply) []byte {
	return appendCursorReply(dst, from, CommandDeleteCursorReply, m)
}

// DecodeDeleteCursorReply reads a parsed delete-cursor reply.
func DecodeDeleteCursorReply(h *Header, body []byte) (CursorReply, error) {
	return decodeCursorReply(h, body, CommandDeleteCursorReply)
}
