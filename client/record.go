package client

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/ringstream/ringstream/internal/varfield"
	"github.com/ringstream/ringstream/wire"
)

// Format is a batch's record format: what its payload holds, sent with each produce and stored by the
// nodes as the batch header's version (wire.FormatRule). The nodes never read a payload.
type Format uint8

// Record formats.
const (
	// FormatValues (1): each record a value only, a uvarint length and its bytes. For readers that
	// predate keys and headers.
	FormatValues = Format(wire.FormatValues)
	// FormatRecords (2): each record a key, a value, headers and a timestamp, in Kafka's v2 record
	// layout (see the package doc). The default.
	FormatRecords = Format(wire.FormatRecords)
)

// String names the format as the commands spell it.
func (f Format) String() string {
	switch f {
	case FormatValues:
		return "values"
	case FormatRecords:
		return "records"
	}
	return fmt.Sprintf("format(%d)", uint8(f))
}

// Record is one record to append: a key, a value, headers and a timestamp. A nil Key or header Value
// is null (written as length -1), which a reader sees as nil; an empty non-nil one is an empty value.
// A nil Value is null too (Kafka's tombstone). A zero Timestamp is the time of the append. With
// FormatValues only Value is kept, and a Key or Headers are refused.
type Record struct {
	Key       []byte
	Value     []byte
	Headers   []Header
	Timestamp time.Time
}

// Header is one record header. Key is never null (an empty key is written as length 0); a nil Value
// is null. A decoded Header aliases the fetch's buffers.
type Header struct {
	Key   []byte
	Value []byte
}

// baseTimestampSize is the FormatRecords payload's prefix: the base timestamp, unix ms, little endian,
// outside the compressed records section.
const baseTimestampSize = 8

// varintSize is the bytes binary.AppendVarint takes for v (zigzag, then 7 bits a byte).
func varintSize(v int64) int {
	u := uint64(v<<1) ^ uint64(v>>63)
	s := 1
	for ; u >= 0x80; u >>= 7 {
		s++
	}
	return s
}

// nullableSize is the bytes of a length-prefixed field whose nil is null (length -1).
func nullableSize(b []byte) int {
	if b == nil {
		return varintSize(-1)
	}
	return varintSize(int64(len(b))) + len(b)
}

func appendNullable(dst, b []byte) []byte {
	if b == nil {
		return binary.AppendVarint(dst, -1)
	}
	dst = binary.AppendVarint(dst, int64(len(b)))
	return append(dst, b...)
}

// record2BodySize is the bytes of r's record after its length prefix, with the given timestamp and
// offset deltas.
func record2BodySize(r *Record, tsDelta int64, index uint32) int {
	n := 1 + varintSize(tsDelta) + varintSize(int64(index)) + nullableSize(r.Key) + nullableSize(r.Value) +
		varintSize(int64(len(r.Headers)))
	for i := range r.Headers {
		h := &r.Headers[i]
		n += varintSize(int64(len(h.Key))) + len(h.Key) + nullableSize(h.Value)
	}
	return n
}

// BatchBytesFor is a BatchBytes that holds n records of FormatRecords with values of valueSize bytes,
// a null key and no headers, whatever their timestamps: for a producer that makes its batches full
// by count (BatchRecords n) and needs its byte bound never to cut one short. It counts each record's
// timestamp delta at its largest (a batch open for about a year).
func BatchBytesFor(n, valueSize int) int {
	size := baseTimestampSize
	for i := range n {
		// attributes, timestamp delta, offset delta, null key, value, no headers: as record2BodySize.
		body := 1 + varintSize(tsDeltaMax) + varintSize(int64(i)) + nullableSize(nil) +
			varintSize(int64(valueSize)) + valueSize + varintSize(0)
		size += varintSize(int64(body)) + body
	}
	return size
}

// tsDeltaMax is the largest timestamp delta BatchBytesFor sizes for, in ms: about a year.
const tsDeltaMax = 1 << 35

// record2Size is the bytes appendRecord2 adds for r.
func record2Size(r *Record, tsDelta int64, index uint32) int {
	n := record2BodySize(r, tsDelta, index)
	return varintSize(int64(n)) + n
}

// appendRecord2 appends r in the FormatRecords layout: length, attributes 0, timestamp delta from the
// batch's base timestamp, offset delta (its index in the batch), key, value, header count, headers.
func appendRecord2(dst []byte, r *Record, tsDelta int64, index uint32) []byte {
	dst = binary.AppendVarint(dst, int64(record2BodySize(r, tsDelta, index)))
	dst = append(dst, 0)
	dst = binary.AppendVarint(dst, tsDelta)
	dst = binary.AppendVarint(dst, int64(index))
	dst = appendNullable(dst, r.Key)
	dst = appendNullable(dst, r.Value)
	dst = binary.AppendVarint(dst, int64(len(r.Headers)))
	for i := range r.Headers {
		h := &r.Headers[i]
		dst = binary.AppendVarint(dst, int64(len(h.Key)))
		dst = append(dst, h.Key...)
		dst = appendNullable(dst, h.Value)
	}
	return dst
}

// record2 is one decoded FormatRecords record; its slices alias the batch.
type record2 struct {
	tsDelta int64
	key     []byte
	value   []byte
	headers []byte // the headers' bytes, validated
	hcount  int
}

// parseRecord2 decodes and checks one record's body (after its length): attributes 0, the offset delta
// equal to index, key and value lengths -1 or within the body, a header count no larger than the body
// could hold, every header within it, and nothing left after the last. It returns what broke, or "".
func parseRecord2(body []byte, index uint32, rec *record2) string {
	if len(body) == 0 || body[0] != 0 {
		return "attributes"
	}
	d := varfield.Reader{B: body[1:]}
	rec.tsDelta = d.Varint("timestamp delta")
	if od := d.Varint("offset delta"); d.Bad == "" && od != int64(index) {
		return "offset delta"
	}
	rec.key = d.Field("key length", true)
	rec.value = d.Field("value length", true)
	hc := d.Varint("header count")
	if d.Bad != "" {
		return d.Bad
	}
	if hc < 0 || hc > int64(len(d.B)/2) { // a header takes at least 2 bytes
		return "header count"
	}
	rec.headers, rec.hcount = d.B, int(hc)
	for range hc {
		d.Field("header key length", false)
		d.Field("header value length", true)
	}
	switch {
	case d.Bad != "":
		return d.Bad
	case len(d.B) != 0:
		return "bytes after the headers"
	}
	rec.headers = rec.headers[:len(rec.headers)-len(d.B)]
	return ""
}

// HeaderIter reads one record's headers in order, aliasing the fetch's buffers; it allocates nothing.
type HeaderIter struct {
	d    varfield.Reader
	left int
	h    Header
}

// Next moves to the next header; false after the last.
func (it *HeaderIter) Next() bool {
	if it.left == 0 {
		return false
	}
	it.left--
	it.h.Key = it.d.Field("header key length", false)
	it.h.Value = it.d.Field("header value length", true)
	if it.d.Bad != "" { // the record was checked when Next reached it: cannot happen
		it.left, it.h = 0, Header{}
		return false
	}
	return true
}

// Header is the header Next moved to.
func (it *HeaderIter) Header() Header { return it.h }

// Len is how many headers are left after the current one.
func (it *HeaderIter) Len() int { return it.left }
