package client

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"

	"github.com/ringstream/ringstream/internal/varfield"
)

// Codec is a batch's compression, chosen by the producer and stored in the batch header; the nodes never
// read it.
type Codec uint8

// Codecs.
const (
	CodecNone Codec = 0
	CodecZstd Codec = 1
	CodecS2   Codec = 2
)

// String is the codec's name as the commands spell it.
func (c Codec) String() string {
	switch c {
	case CodecNone:
		return "none"
	case CodecZstd:
		return "zstd"
	case CodecS2:
		return "s2"
	}
	return fmt.Sprintf("codec(%d)", uint8(c))
}

// ParseCodec reads a codec name: none, zstd or s2.
func ParseCodec(s string) (Codec, error) {
	switch s {
	case "none", "":
		return CodecNone, nil
	case "zstd":
		return CodecZstd, nil
	case "s2":
		return CodecS2, nil
	}
	return 0, fmt.Errorf("%w: codec %q: want none, zstd or s2", ErrConfig, s)
}

// The batch format the nodes store and fetch returns (segment's, little endian): an 80-byte header
// (checksum of bytes 8..80 | magic "RSB1" | version u16 | codec u8 | reserved u8 | payload checksum |
// base offset u64 | count u32 | payload length u32 | epoch u64 | producer id u64 | sequence u64 | first
// and max timestamps, the owner's append time in unix ms) and the payload. The version is the payload's
// record format (Format): FormatValues, each record a uvarint length and its bytes, compressed whole by
// the codec; FormatRecords, the base timestamp and the records section compressed by the codec.
const (
	batchHeaderSize = 80
	batchMagic      = 0x31425352
	batchVersion    = 1 // the version appendTestBatch writes
	// payloadMax bounds a batch payload after decompression: a fetched batch that claims more is corrupt.
	payloadMax = 64 << 20
)

// batchHeader is what a consumer reads from a fetched batch's header.
type batchHeader struct {
	base       uint64
	count      uint32
	epoch      uint64
	producerID uint64
	sequence   uint64
	codec      Codec
	format     Format
	firstTs    int64 // the owner's append time, unix ms
	maxTs      int64
}

// decodeBatch decodes the batch at the start of buf: its header, its payload (aliasing buf) and its
// size. Anything but a whole valid batch is ErrCorruptBatch; it never panics.
func decodeBatch(buf []byte) (batchHeader, []byte, int, error) {
	le := binary.LittleEndian
	if len(buf) < batchHeaderSize {
		return batchHeader{}, nil, 0, fmt.Errorf("%w: %d bytes left, less than a batch header", ErrCorruptBatch, len(buf))
	}
	hb := buf[:batchHeaderSize]
	switch {
	case le.Uint64(hb[0:]) != xxhash.Sum64(hb[8:]):
		return batchHeader{}, nil, 0, fmt.Errorf("%w: header checksum", ErrCorruptBatch)
	case le.Uint32(hb[8:]) != batchMagic:
		return batchHeader{}, nil, 0, fmt.Errorf("%w: bad magic", ErrCorruptBatch)
	case le.Uint16(hb[12:]) != uint16(FormatValues) && le.Uint16(hb[12:]) != uint16(FormatRecords):
		return batchHeader{}, nil, 0, fmt.Errorf("%w: batch version %d (this client reads formats %d and %d)",
			ErrUnknownFormat, le.Uint16(hb[12:]), FormatValues, FormatRecords)
	case hb[15] != 0:
		return batchHeader{}, nil, 0, fmt.Errorf("%w: reserved byte set", ErrCorruptBatch)
	}
	h := batchHeader{base: le.Uint64(hb[24:]), count: le.Uint32(hb[32:]), epoch: le.Uint64(hb[40:]),
		producerID: le.Uint64(hb[48:]), sequence: le.Uint64(hb[56:]), codec: Codec(hb[14]),
		format: Format(hb[12]), firstTs: int64(le.Uint64(hb[64:])), maxTs: int64(le.Uint64(hb[72:]))}
	n := le.Uint32(hb[36:])
	switch {
	case h.count == 0:
		return batchHeader{}, nil, 0, fmt.Errorf("%w: batch without records", ErrCorruptBatch)
	case h.base+uint64(h.count) < h.base:
		return batchHeader{}, nil, 0, fmt.Errorf("%w: offsets overflow", ErrCorruptBatch)
	case uint64(n) > uint64(len(buf)-batchHeaderSize):
		return batchHeader{}, nil, 0, fmt.Errorf("%w: payload of %d bytes, %d left", ErrCorruptBatch, n, len(buf)-batchHeaderSize)
	}
	size := batchHeaderSize + int(n)
	payload := buf[batchHeaderSize:size:size]
	if le.Uint64(hb[16:]) != xxhash.Sum64(payload) {
		return batchHeader{}, nil, 0, fmt.Errorf("%w: payload checksum", ErrCorruptBatch)
	}
	return h, payload, size, nil
}

// appendRecord appends one record to a batch payload: its length as a uvarint, then its bytes.
func appendRecord(dst, rec []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(rec)))
	return append(dst, rec...)
}

// recordSize is the bytes appendRecord adds for a record of n bytes.
func recordSize(n int) int {
	s := 1
	for v := uint64(n); v >= 0x80; v >>= 7 {
		s++
	}
	return s + n
}

// decompress appends payload decoded by codec to dst and returns dst and the decoded part (payload
// itself for CodecNone). Earlier bytes of dst are never overwritten, so records decoded before stay valid.
func decompress(codec Codec, payload, dst []byte, zdec *zstd.Decoder) ([]byte, []byte, error) {
	start := len(dst)
	switch codec {
	case CodecNone:
		return dst, payload, nil
	case CodecS2:
		n, err := s2.DecodedLen(payload)
		if err != nil {
			return dst, nil, fmt.Errorf("%w: s2: %w", ErrCorruptBatch, err)
		}
		if n > payloadMax {
			return dst, nil, fmt.Errorf("%w: s2 payload decodes to %d bytes", ErrCorruptBatch, n)
		}
		dst = growBytes(dst, n)
		out, err := s2.Decode(dst[start:start+n], payload)
		if err != nil {
			return dst[:start], nil, fmt.Errorf("%w: s2: %w", ErrCorruptBatch, err)
		}
		return dst, out, nil
	case CodecZstd:
		if zdec == nil {
			return dst, nil, fmt.Errorf("%w: zstd batch without a decoder", ErrCorruptBatch)
		}
		out, err := zdec.DecodeAll(payload, dst)
		if err != nil {
			return dst[:start], nil, fmt.Errorf("%w: zstd: %w", ErrCorruptBatch, err)
		}
		return out, out[start:], nil
	}
	return dst, nil, fmt.Errorf("%w: unknown codec %d", ErrCorruptBatch, codec)
}

// growBytes extends b by n bytes, keeping its contents.
func growBytes(b []byte, n int) []byte {
	if cap(b)-len(b) < n {
		bigger := make([]byte, len(b), 2*cap(b)+n)
		copy(bigger, b)
		b = bigger
	}
	return b[:len(b)+n]
}

// newZstdDecoder is the decoder fetched zstd batches go through: synchronous, bounded memory.
func newZstdDecoder() *zstd.Decoder {
	d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(payloadMax),
		zstd.WithDecoderLowmem(true))
	if err != nil {
		panic("client: zstd decoder options refused: " + err.Error()) // constant options: a programming error
	}
	return d
}

// Records is one fetch's records, read in order with Next. Its slices alias the fetch's buffers and
// stay valid until the next Poll of the Consumer that returned it.
type Records struct {
	// BaseOffset is the first offset the reply's batches hold (at or below the offset asked for).
	BaseOffset uint64
	// ConfirmedTail is the stream's confirmed tail when the owner answered.
	ConfirmedTail uint64

	from    uint64 // records below it are skipped
	end     uint64 // offset past the reply's last record
	batches []byte // batches not decoded yet
	payload []byte // records left in the current batch
	left    uint32 // how many
	off     uint64 // offset of the current batch's next record
	format  Format // the current batch's
	count   uint32 // its record count
	firstTs int64  // its header's first timestamp (the owner's append time)
	baseTs  int64  // FormatRecords: its payload's base timestamp
	rec     []byte
	rec2    record2 // FormatRecords: the current record's fields (rec is its value)
	recOff  uint64
	err     error
	dbuf    []byte
	zdec    func() *zstd.Decoder
}

// reset points r at one fetch reply's batches.
func (r *Records) reset(from, base uint64, count uint32, confirmed uint64, batches []byte) {
	*r = Records{BaseOffset: base, ConfirmedTail: confirmed, from: from, end: base + uint64(count),
		batches: batches, off: base, dbuf: r.dbuf[:0], zdec: r.zdec}
}

// Next moves to the next record; false at the end or on corruption (see Err).
func (r *Records) Next() bool {
	for r.err == nil {
		if r.left > 0 {
			if !r.nextRecord() {
				return false
			}
			if r.recOff >= r.from {
				return true
			}
			continue
		}
		if len(r.batches) == 0 {
			if r.off != r.end {
				r.err = fmt.Errorf("%w: batches end at offset %d, the reply says %d", ErrCorruptBatch, r.off, r.end)
			}
			return false
		}
		r.nextBatch()
	}
	return false
}

func (r *Records) nextRecord() bool {
	if r.format == FormatRecords {
		return r.nextRecord2()
	}
	n, k := binary.Uvarint(r.payload)
	if k <= 0 || n > uint64(len(r.payload)-k) {
		r.err = fmt.Errorf("%w: record at offset %d overruns its batch", ErrCorruptBatch, r.off)
		return false
	}
	r.rec = r.payload[k : k+int(n) : k+int(n)]
	r.payload = r.payload[k+int(n):]
	return r.advance()
}

// advance counts the record just read and checks that a batch's last record ends its payload.
func (r *Records) advance() bool {
	r.recOff = r.off
	r.off++
	r.left--
	if r.left == 0 && len(r.payload) != 0 {
		r.err = fmt.Errorf("%w: %d bytes past the last record of the batch ending at %d", ErrCorruptBatch,
			len(r.payload), r.off)
		return false
	}
	return true
}

func (r *Records) nextBatch() {
	h, payload, size, err := decodeBatch(r.batches)
	if err != nil {
		r.err = err
		return
	}
	if h.base != r.off || h.base+uint64(h.count) > r.end {
		r.err = fmt.Errorf("%w: batch holds offsets %d..%d, expected from %d below %d", ErrCorruptBatch, h.base,
			h.base+uint64(h.count), r.off, r.end)
		return
	}
	r.batches = r.batches[size:]
	r.format, r.count, r.firstTs, r.rec2 = h.format, h.count, h.firstTs, record2{}
	if h.format == FormatRecords {
		if len(payload) < baseTimestampSize {
			r.err = fmt.Errorf("%w: batch at offset %d: a payload of %d bytes, without its base timestamp",
				ErrCorruptBatch, h.base, len(payload))
			return
		}
		r.baseTs = int64(binary.LittleEndian.Uint64(payload))
		payload = payload[baseTimestampSize:]
	}
	var zdec *zstd.Decoder
	if h.codec == CodecZstd && r.zdec != nil {
		zdec = r.zdec()
	}
	dbuf, out, err := decompress(h.codec, payload, r.dbuf, zdec)
	r.dbuf = dbuf
	if err != nil {
		r.err = err
		return
	}
	r.payload, r.left = out, h.count
}

// nextRecord2 moves to the next FormatRecords record, checking all of it (parseRecord2).
func (r *Records) nextRecord2() bool {
	n, k := binary.Varint(r.payload)
	if k <= 0 || n < 0 || n > int64(len(r.payload)-k) {
		r.err = fmt.Errorf("%w: record at offset %d overruns its batch", ErrCorruptBatch, r.off)
		return false
	}
	body := r.payload[k : k+int(n) : k+int(n)]
	if bad := parseRecord2(body, r.count-r.left, &r.rec2); bad != "" {
		r.err = fmt.Errorf("%w: record at offset %d: bad %s", ErrCorruptBatch, r.off, bad)
		return false
	}
	r.rec = r.rec2.value
	r.payload = r.payload[k+int(n):]
	return r.advance()
}

// Offset is the offset of the record Next moved to.
func (r *Records) Offset() uint64 { return r.recOff }

// Value is the value of the record Next moved to; it aliases the fetch's buffer. A null value
// (FormatRecords) is nil.
func (r *Records) Value() []byte { return r.rec }

// Key is the key of the record Next moved to, aliasing the fetch's buffer; nil when it is null, and
// for every FormatValues record.
func (r *Records) Key() []byte { return r.rec2.key }

// Headers iterates over the headers of the record Next moved to (none for FormatValues). The iterator
// and its headers alias the fetch's buffers.
func (r *Records) Headers() HeaderIter {
	return HeaderIter{d: varfield.Reader{B: r.rec2.headers}, left: r.rec2.hcount}
}

// HeaderCount is how many headers the record Next moved to has.
func (r *Records) HeaderCount() int { return r.rec2.hcount }

// AppendHeaders appends the current record's headers to dst (aliasing the fetch's buffers) and
// returns it: no allocation once dst has room.
func (r *Records) AppendHeaders(dst []Header) []Header {
	for it := r.Headers(); it.Next(); {
		dst = append(dst, it.Header())
	}
	return dst
}

// Timestamp is the timestamp of the record Next moved to: for FormatRecords the producer's (the
// batch's base timestamp plus the record's delta), for FormatValues the owner's append time of its
// batch (the batch header's first timestamp), which is all such a record has.
func (r *Records) Timestamp() time.Time {
	if r.format == FormatRecords {
		return time.UnixMilli(r.baseTs + r.rec2.tsDelta)
	}
	return time.UnixMilli(r.firstTs)
}

// Format is the record format of the batch holding the record Next moved to.
func (r *Records) Format() Format { return r.format }

// Err is what stopped Next, if anything: ErrCorruptBatch, or ErrUnknownFormat for a batch of a record
// format this client does not read.
func (r *Records) Err() error { return r.err }

// NextOffset is the offset to fetch from after these records.
func (r *Records) NextOffset() uint64 { return max(r.end, r.from) }
