package segment

import (
	"encoding/binary"
	"fmt"

	"github.com/cespare/xxhash/v2"

	"github.com/ringstream/ringstream/internal/assert"
)

// Batch format. Every field is little endian.
//
//	off  size  field
//	  0     8  header checksum: xxhash64 of bytes 8..BatchHeaderSize
//	  8     4  magic "RSB1" (batchMagic)
//	 12     2  version: the payload's record format (1 or 2, checkBatchVersion)
//	 14     1  codec (opaque to this package; the producer's compression)
//	 15     1  reserved, zero
//	 16     8  payload checksum: xxhash64 of the payload
//	 24     8  base offset (first record's offset in its log)
//	 32     4  record count (>= 1)
//	 36     4  payload length in bytes
//	 40     8  epoch the batch was written in
//	 48     8  producer id
//	 56     8  producer sequence
//	 64     8  first timestamp (unix ms, caller-supplied)
//	 72     8  max timestamp (unix ms, caller-supplied)
//
// The payload follows the header. The record count says how many offsets the batch takes; the
// payload's inner structure belongs to the producer. The version names that structure for readers
// (wire.FormatValues 1: values only; wire.FormatRecords 2: records with key, headers and timestamp);
// the header layout is the same for every version, and this package stores and returns both without
// reading a payload. A batch of any other version is refused as corrupt, naming the version: it is not
// something this build wrote, and it would be read as garbage if taken.
const (
	// BatchHeaderSize is the fixed size of a batch header on disk.
	BatchHeaderSize = 80
	// BatchPayloadMax bounds one batch's payload. A header that claims more is corrupt.
	BatchPayloadMax = 4 << 20

	batchMagic = 0x31425352 // "RSB1" read as a little-endian uint32
	// BatchVersionValues and BatchVersionRecords are the versions a batch may carry.
	BatchVersionValues  = 1
	BatchVersionRecords = 2
)

// checkBatchVersion is the one check of a batch header's version, for every batch this package
// encodes or decodes.
func checkBatchVersion(v uint16) error {
	if v != BatchVersionValues && v != BatchVersionRecords {
		return fmt.Errorf("%w: batch version %d (versions 1 and 2 are known)", ErrCorrupt, v)
	}
	return nil
}

// BatchHeader is the decoded header of one batch.
type BatchHeader struct {
	BaseOffset  uint64
	RecordCount uint32
	PayloadLen  uint32
	Epoch       uint64
	ProducerID  uint64
	ProducerSeq uint64
	Codec       uint8
	// Version is the payload's record format; 0 encodes as BatchVersionValues (callers that predate
	// versions), a decoded header always holds the stored one.
	Version        uint16
	FirstTimestamp int64
	MaxTimestamp   int64
}

// NextOffset is the offset just past this batch's last record.
func (h *BatchHeader) NextOffset() uint64 { return h.BaseOffset + uint64(h.RecordCount) }

// Size is the batch's size on disk: header plus payload.
func (h *BatchHeader) Size() int { return BatchHeaderSize + int(h.PayloadLen) }

// appendBatch encodes h and payload onto dst. h.PayloadLen is taken from payload.
func appendBatch(dst []byte, h *BatchHeader, payload []byte) []byte {
	return appendBatchSummed(dst, h, payload, xxhash.Sum64(payload))
}

// appendBatchSummed is appendBatch with the payload's checksum (xxhash64 of payload) already known.
func appendBatchSummed(dst []byte, h *BatchHeader, payload []byte, payloadSum uint64) []byte {
	assert.True(h.RecordCount > 0, "segment: batch without records")
	assert.True(len(payload) <= BatchPayloadMax, "segment: batch payload too large")
	version := h.Version
	if version == 0 {
		version = BatchVersionValues
	}
	assert.True(checkBatchVersion(version) == nil, "segment: batch of an unknown version")
	start := len(dst)
	dst = append(dst, make([]byte, BatchHeaderSize)...)
	b := dst[start : start+BatchHeaderSize]
	le := binary.LittleEndian
	le.PutUint32(b[8:], batchMagic)
	le.PutUint16(b[12:], version)
	b[14] = h.Codec
	b[15] = 0
	le.PutUint64(b[16:], payloadSum)
	le.PutUint64(b[24:], h.BaseOffset)
	le.PutUint32(b[32:], h.RecordCount)
	le.PutUint32(b[36:], uint32(len(payload)))
	le.PutUint64(b[40:], h.Epoch)
	le.PutUint64(b[48:], h.ProducerID)
	le.PutUint64(b[56:], h.ProducerSeq)
	le.PutUint64(b[64:], uint64(h.FirstTimestamp))
	le.PutUint64(b[72:], uint64(h.MaxTimestamp))
	le.PutUint64(b[0:], xxhash.Sum64(b[8:BatchHeaderSize]))
	return append(dst, payload...)
}

// DecodeBatch decodes the batch at the start of buf. It returns the header, the payload (aliasing
// buf) and the batch's size. A buffer that ends inside the batch returns ErrShortBatch; bytes that
// are not a valid batch return ErrCorrupt. It never panics, whatever buf holds.
func DecodeBatch(buf []byte) (BatchHeader, []byte, int, error) {
	h, payload, n, err := DecodeBatchHeader(buf)
	if err != nil {
		return h, nil, 0, err
	}
	if binary.LittleEndian.Uint64(buf[16:]) != xxhash.Sum64(payload) {
		return h, nil, 0, fmt.Errorf("%w: payload checksum", ErrCorrupt)
	}
	return h, payload, n, nil
}

// DecodeBatchHeader is DecodeBatch without the payload checksum: every header check (its checksum,
// magic, version, counts, lengths) and the payload's presence, but the payload's bytes are not
// hashed. It is for bytes whose every byte a checksum already covered on their way here (a frame's
// body checksum) or that this process encoded itself: hashing them again would catch nothing those
// did not (each byte is hashed once per hop). Bytes read from a disk go through DecodeBatch.
func DecodeBatchHeader(buf []byte) (BatchHeader, []byte, int, error) {
	var h BatchHeader
	if len(buf) < BatchHeaderSize {
		return h, nil, 0, ErrShortBatch
	}
	le := binary.LittleEndian
	hb := buf[:BatchHeaderSize]
	if le.Uint64(hb[0:]) != xxhash.Sum64(hb[8:]) {
		return h, nil, 0, fmt.Errorf("%w: header checksum", ErrCorrupt)
	}
	if le.Uint32(hb[8:]) != batchMagic {
		return h, nil, 0, fmt.Errorf("%w: bad magic", ErrCorrupt)
	}
	h.Version = le.Uint16(hb[12:])
	if err := checkBatchVersion(h.Version); err != nil {
		return h, nil, 0, err
	}
	if hb[15] != 0 {
		return h, nil, 0, fmt.Errorf("%w: reserved byte set", ErrCorrupt)
	}
	h.Codec = hb[14]
	h.BaseOffset = le.Uint64(hb[24:])
	h.RecordCount = le.Uint32(hb[32:])
	h.PayloadLen = le.Uint32(hb[36:])
	h.Epoch = le.Uint64(hb[40:])
	h.ProducerID = le.Uint64(hb[48:])
	h.ProducerSeq = le.Uint64(hb[56:])
	h.FirstTimestamp = int64(le.Uint64(hb[64:]))
	h.MaxTimestamp = int64(le.Uint64(hb[72:]))
	if h.RecordCount == 0 {
		return h, nil, 0, fmt.Errorf("%w: batch without records", ErrCorrupt)
	}
	if h.PayloadLen > BatchPayloadMax {
		return h, nil, 0, fmt.Errorf("%w: payload length %d", ErrCorrupt, h.PayloadLen)
	}
	if h.BaseOffset > h.BaseOffset+uint64(h.RecordCount) {
		return h, nil, 0, fmt.Errorf("%w: offset overflow", ErrCorrupt)
	}
	size := h.Size()
	if len(buf) < size {
		return h, nil, 0, ErrShortBatch
	}
	return h, buf[BatchHeaderSize:size:size], size, nil
}

// BatchIter walks the batches in a buffer returned by a read, skipping those that end at or
// below From and stopping at the first batch that starts at or past To. It aliases the buffer;
// it allocates nothing.
type BatchIter struct {
	buf  []byte
	raw  []byte
	From uint64
	To   uint64
	err  error
}

// NewBatchIter starts an iterator over buf that yields batches holding offsets >= from.
func NewBatchIter(buf []byte, from uint64) BatchIter {
	return BatchIter{buf: buf, From: from, To: ^uint64(0)}
}

// NewBatchRange starts an iterator over buf that yields the batches holding offsets in
// [from, to): a consumer reading below the confirmed tail passes it as to.
func NewBatchRange(buf []byte, from, to uint64) BatchIter {
	return BatchIter{buf: buf, From: from, To: to}
}

// Next returns the next batch. ok is false at the end of the buffer (a partial batch at the very
// end is not an error: a read may stop inside a batch) or on corruption (see Err).
func (it *BatchIter) Next() (h BatchHeader, payload []byte, ok bool) {
	for len(it.buf) > 0 && it.err == nil {
		hdr, p, n, err := DecodeBatch(it.buf)
		if err == ErrShortBatch {
			return hdr, nil, false
		}
		if err != nil {
			it.err = err
			return hdr, nil, false
		}
		if hdr.BaseOffset >= it.To {
			it.buf = nil
			return BatchHeader{}, nil, false
		}
		it.raw = it.buf[:n:n]
		it.buf = it.buf[n:]
		if hdr.NextOffset() <= it.From {
			continue
		}
		return hdr, p, true
	}
	return BatchHeader{}, nil, false
}

// Raw is the whole encoded batch (header and payload) Next returned last, aliasing the read
// buffer: what an owner sends to a follower, which stores it with AppendEncoded.
func (it *BatchIter) Raw() []byte { return it.raw }

// Err is the corruption that stopped the iterator, if any.
func (it *BatchIter) Err() error { return it.err }
