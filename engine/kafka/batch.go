package kafka

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/ringstream/ringstream/internal/varfield"
	"github.com/ringstream/ringstream/wire"
)

// Kafka record batches (magic 2) and this project's batches of record format 2 (wire.FormatRecords:
// an 8-byte little-endian base timestamp, then Kafka v2 records, possibly compressed whole).
//
// The records section is the same bytes in both: a produced batch is stored as its base timestamp
// and its records section, copied once into the produce frame; a fetched batch is sent as a 61-byte
// Kafka header built from the stored header, then the stored records section as it is. Nothing is
// allocated or decoded per record; validateRecords walks the records of an uncompressed batch in
// place.

// Kafka batch header offsets (big endian).
const (
	kbBaseOffset      = 0
	kbLength          = 8 // bytes after this field
	kbLeaderEpoch     = 12
	kbMagic           = 16
	kbCRC             = 17 // crc32c of every byte from kbAttributes on
	kbAttributes      = 21
	kbLastOffsetDelta = 23
	kbBaseTimestamp   = 27
	kbMaxTimestamp    = 35
	kbProducerID      = 43
	kbProducerEpoch   = 51
	kbBaseSequence    = 53
	kbRecordCount     = 57
	kbHeaderSize      = 61
)

// Kafka batch attributes.
const (
	attrCompression   = 0x07
	attrLogAppendTime = 0x08
	attrTransactional = 0x10
	attrControl       = 0x20

	kafkaCodecNone = 0
	kafkaCodecZstd = 4
)

// Stored batch header offsets (segment's layout, little endian).
const (
	sbVersion    = 12
	sbCodec      = 14
	sbBaseOffset = 24
	sbCount      = 32
	sbPayloadLen = 36
	sbMaxTs      = 72
	sbHeaderSize = 80
)

// Codecs of a stored batch (client.Codec) that Kafka readers can take as they are.
const (
	codecNone = 0
	codecZstd = 1 // a zstd frame, as Kafka's zstd (4)
)

// baseTimestampSize is record format 2's prefix.
const baseTimestampSize = 8

// Errors of a produced batch, each answered with its Kafka error code (errorCode).
var (
	// ErrCorruptBatch: the batch's layout, CRC or records are broken (CORRUPT_MESSAGE).
	ErrCorruptBatch = errors.New("kafka: corrupt record batch")
	// ErrCompression: a compression other than none and zstd (UNSUPPORTED_COMPRESSION_TYPE).
	ErrCompression = errors.New("kafka: unsupported compression")
	// ErrBatchKind: a transactional or control batch, or an older magic (INVALID_RECORD).
	ErrBatchKind = errors.New("kafka: unsupported batch kind")
	// ErrProducerFields: a producer id with a negative epoch or base sequence, or a producer id
	// below -1 (INVALID_RECORD).
	ErrProducerFields = errors.New("kafka: invalid producer fields")
)

// castagnoli is the CRC table of Kafka's batch checksum (read-only after init).
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// producedBatch is one Kafka batch of a produce request, checked. Records aliases the request.
type producedBatch struct {
	Records       []byte
	Count         uint32
	BaseTimestamp int64
	Codec         uint8 // the stored codec (codecNone, codecZstd)
	ProducerID    int64
	ProducerEpoch int16
	BaseSequence  int32
}

// parseProducedBatch checks the records of one partition of a produce request: exactly one batch of
// magic 2, its length and CRC, no transaction or control batch, a compression stored as it is
// (none or zstd), a record count that agrees with lastOffsetDelta, a producer id of -1 or one with
// an epoch and a base sequence of at least 0, and for an uncompressed batch every record
// (validateRecords). The validation of a produced batch.
func parseProducedBatch(b []byte) (producedBatch, error) {
	if len(b) < kbHeaderSize {
		return producedBatch{}, fmt.Errorf("%w: %d bytes, less than a batch header", ErrCorruptBatch, len(b))
	}
	be := binary.BigEndian
	length := int64(int32(be.Uint32(b[kbLength:])))
	switch {
	case b[kbMagic] != 2:
		return producedBatch{}, fmt.Errorf("%w: magic %d (only record batches of magic 2 are taken)", ErrBatchKind, b[kbMagic])
	case length != int64(len(b)-kbLeaderEpoch):
		return producedBatch{}, fmt.Errorf("%w: batch length %d, %d bytes follow it (one batch per partition)",
			ErrCorruptBatch, length, len(b)-kbLeaderEpoch)
	case crc32.Checksum(b[kbAttributes:], castagnoli) != be.Uint32(b[kbCRC:]):
		return producedBatch{}, fmt.Errorf("%w: crc", ErrCorruptBatch)
	}
	attr := be.Uint16(b[kbAttributes:])
	count := int64(int32(be.Uint32(b[kbRecordCount:])))
	pb := producedBatch{Records: b[kbHeaderSize:], BaseTimestamp: int64(be.Uint64(b[kbBaseTimestamp:])),
		ProducerID: int64(be.Uint64(b[kbProducerID:])), ProducerEpoch: int16(be.Uint16(b[kbProducerEpoch:])),
		BaseSequence: int32(be.Uint32(b[kbBaseSequence:]))}
	switch {
	case attr&(attrTransactional|attrControl) != 0:
		return producedBatch{}, fmt.Errorf("%w: transactional or control batch (attributes %#x)", ErrBatchKind, attr)
	case count < 1 || count > int64(len(pb.Records)): // a record takes at least one byte
		return producedBatch{}, fmt.Errorf("%w: record count %d", ErrCorruptBatch, count)
	case int64(int32(be.Uint32(b[kbLastOffsetDelta:]))) != count-1:
		return producedBatch{}, fmt.Errorf("%w: last offset delta %d with %d records", ErrCorruptBatch,
			int32(be.Uint32(b[kbLastOffsetDelta:])), count)
	case len(pb.Records) == 0:
		return producedBatch{}, fmt.Errorf("%w: no record bytes", ErrCorruptBatch)
	case pb.ProducerID < -1 || (pb.ProducerID >= 0 && (pb.ProducerEpoch < 0 || pb.BaseSequence < 0)):
		return producedBatch{}, fmt.Errorf("%w: producer id %d, epoch %d, base sequence %d", ErrProducerFields,
			pb.ProducerID, pb.ProducerEpoch, pb.BaseSequence)
	}
	pb.Count = uint32(count)
	switch attr & attrCompression {
	case kafkaCodecNone:
		pb.Codec = codecNone
		if err := validateRecords(pb.Records, pb.Count); err != nil {
			return producedBatch{}, err
		}
	case kafkaCodecZstd:
		pb.Codec = codecZstd
	default:
		return producedBatch{}, fmt.Errorf("%w: codec %d (none and zstd are taken)", ErrCompression, attr&attrCompression)
	}
	return pb, nil
}

// validateRecords checks count uncompressed Kafka v2 records: each length within the batch,
// attributes 0, the offset delta equal to its index (what record format 2 readers require), key,
// value and headers within the record, nothing after the last field, nothing after the last record.
// The validation of a produced batch's records; it allocates nothing.
func validateRecords(b []byte, count uint32) error {
	w := varfield.Reader{B: b}
	for i := range count {
		n := w.Varint("record length")
		if w.Bad != "" || n < 1 || n > int64(len(w.B)) {
			return fmt.Errorf("%w: record %d: length", ErrCorruptBatch, i)
		}
		body := varfield.Reader{B: w.B[1:n]}
		if w.B[0] != 0 {
			return fmt.Errorf("%w: record %d: attributes %#x", ErrCorruptBatch, i, w.B[0])
		}
		w.B = w.B[n:]
		body.Varint("timestamp delta")
		if od := body.Varint("offset delta"); body.Bad == "" && od != int64(i) {
			return fmt.Errorf("%w: record %d: offset delta %d", ErrCorruptBatch, i, od)
		}
		body.Field("key", true)
		body.Field("value", true)
		hc := body.Varint("header count")
		if body.Bad == "" && (hc < 0 || hc > int64(len(body.B))) {
			body.Bad = "header count"
		}
		for j := int64(0); j < hc && body.Bad == ""; j++ {
			body.Field("header key", false)
			body.Field("header value", true)
		}
		switch {
		case body.Bad != "":
			return fmt.Errorf("%w: record %d: %s", ErrCorruptBatch, i, body.Bad)
		case len(body.B) != 0:
			return fmt.Errorf("%w: record %d: %d bytes after its headers", ErrCorruptBatch, i, len(body.B))
		}
	}
	if len(w.B) != 0 {
		return fmt.Errorf("%w: %d bytes after record %d", ErrCorruptBatch, len(w.B), count)
	}
	return nil
}

// appendStoredPayload appends the payload of record format 2 for pb: its base timestamp, then its
// records section as it came.
func appendStoredPayload(dst []byte, pb *producedBatch) []byte {
	dst = binary.LittleEndian.AppendUint64(dst, uint64(pb.BaseTimestamp))
	return append(dst, pb.Records...)
}

// ErrStoredBatch: a fetched batch this listener cannot hand a Kafka reader as it is (record format 1
// compressed, or a codec Kafka does not know), or a reply whose batches are cut short.
var ErrStoredBatch = errors.New("kafka: stored batch not readable as a Kafka batch")

// appendKafkaBatches appends the stored batches of a fetch reply (segment's layout) as Kafka record
// batches: one Kafka batch per stored batch, its records section as stored. A batch of record
// format 1 (values only, uncompressed) gets its records written in the v2 layout on the way. It
// stops before a batch it cannot convert and returns the error; the batches before it are in dst.
func appendKafkaBatches(dst, stored []byte) ([]byte, error) {
	le := binary.LittleEndian
	for len(stored) > 0 {
		if len(stored) < sbHeaderSize {
			return dst, fmt.Errorf("%w: %d bytes, less than a batch header", ErrStoredBatch, len(stored))
		}
		n := int(le.Uint32(stored[sbPayloadLen:]))
		if n > len(stored)-sbHeaderSize {
			return dst, fmt.Errorf("%w: payload of %d bytes, %d left", ErrStoredBatch, n, len(stored)-sbHeaderSize)
		}
		hdr, payload := stored[:sbHeaderSize], stored[sbHeaderSize:sbHeaderSize+n]
		stored = stored[sbHeaderSize+n:]
		var err error
		if dst, err = appendKafkaBatch(dst, hdr, payload); err != nil {
			return dst, err
		}
	}
	return dst, nil
}

// appendKafkaBatch appends one stored batch as a Kafka batch (see appendKafkaBatches).
func appendKafkaBatch(dst, hdr, payload []byte) ([]byte, error) {
	le, be := binary.LittleEndian, binary.BigEndian
	version, codec := le.Uint16(hdr[sbVersion:]), hdr[sbCodec]
	count := le.Uint32(hdr[sbCount:])
	var kcodec uint16
	switch codec {
	case codecNone:
	case codecZstd:
		kcodec = kafkaCodecZstd
	default:
		return dst, fmt.Errorf("%w: codec %d", ErrStoredBatch, codec)
	}
	var baseTs int64
	switch {
	case version == uint16(wire.FormatRecords) && len(payload) >= baseTimestampSize:
		baseTs = int64(le.Uint64(payload))
	case version == uint16(wire.FormatValues) && codec == codecNone:
		baseTs = int64(le.Uint64(hdr[sbMaxTs:])) // the owner's append time: format 1 has no record timestamps
	default:
		return dst, fmt.Errorf("%w: record format %d with codec %d", ErrStoredBatch, version, codec)
	}
	start := len(dst)
	dst = be.AppendUint64(dst, le.Uint64(hdr[sbBaseOffset:]))
	dst = append(dst, 0, 0, 0, 0)              // length, filled below
	dst = be.AppendUint32(dst, 0xFFFFFFFF)     // partition leader epoch -1: no epoch validation
	dst = append(dst, 2, 0, 0, 0, 0)           // magic, crc filled below
	dst = be.AppendUint16(dst, kcodec)         // CreateTime, not transactional
	dst = be.AppendUint32(dst, count-1)        // last offset delta
	dst = be.AppendUint64(dst, uint64(baseTs)) // base timestamp
	maxAt := len(dst)                          // max timestamp, filled below
	dst = append(dst, 0, 0, 0, 0, 0, 0, 0, 0)  //
	dst = be.AppendUint64(dst, ^uint64(0))     // producer id -1
	dst = be.AppendUint16(dst, 0xFFFF)         // producer epoch -1
	dst = be.AppendUint32(dst, 0xFFFFFFFF)     // base sequence -1
	dst = be.AppendUint32(dst, count)          // record count
	maxTs := baseTs
	if version == uint16(wire.FormatValues) {
		var err error
		if dst, err = appendValueRecords(dst, payload, count); err != nil {
			return dst[:start], err
		}
	} else {
		records := payload[baseTimestampSize:]
		if codec == codecNone {
			maxTs += maxTimestampDelta(records, count)
		}
		dst = append(dst, records...)
	}
	be.PutUint64(dst[maxAt:], uint64(maxTs))
	be.PutUint32(dst[start+kbLength:], uint32(len(dst)-start-kbLeaderEpoch))
	be.PutUint32(dst[start+kbCRC:], crc32.Checksum(dst[start+kbAttributes:], castagnoli))
	return dst, nil
}

// maxTimestampDelta is the largest timestamp delta of count records (0 when none is above 0, or
// when the records do not read: the batch is sent as stored and its reader judges it).
func maxTimestampDelta(b []byte, count uint32) int64 {
	w := varfield.Reader{B: b}
	var hi int64
	for range count {
		n := w.Varint("record length")
		if w.Bad != "" || n < 2 || n > int64(len(w.B)) {
			return hi
		}
		body := varfield.Reader{B: w.B[1:n]}
		w.B = w.B[n:]
		if d := body.Varint("timestamp delta"); body.Bad == "" && d > hi {
			hi = d
		}
	}
	return hi
}

// appendValueRecords writes the count values of a record format 1 payload (each a uvarint length
// and its bytes) as Kafka v2 records: attributes 0, timestamp delta 0, offset delta i, null key,
// the value, no headers.
func appendValueRecords(dst, payload []byte, count uint32) ([]byte, error) {
	for i := range count {
		n, k := binary.Uvarint(payload)
		if k <= 0 || n > uint64(len(payload)-k) {
			return dst, fmt.Errorf("%w: format 1 record %d", ErrStoredBatch, i)
		}
		value := payload[k : k+int(n)]
		payload = payload[k+int(n):]
		body := 1 + 1 + varintSize(int64(i)) + 1 + varintSize(int64(len(value))) + len(value) + 1
		dst = binary.AppendVarint(dst, int64(body))
		dst = append(dst, 0, 0) // attributes, timestamp delta 0
		dst = binary.AppendVarint(dst, int64(i))
		dst = append(dst, 1) // key length -1 (zigzag)
		dst = binary.AppendVarint(dst, int64(len(value)))
		dst = append(dst, value...)
		dst = append(dst, 0) // no headers
	}
	if len(payload) != 0 {
		return dst, fmt.Errorf("%w: %d bytes after format 1 record %d", ErrStoredBatch, len(payload), count)
	}
	return dst, nil
}

// varintSize is the bytes binary.AppendVarint takes for v.
func varintSize(v int64) int {
	u := uint64(v<<1) ^ uint64(v>>63)
	s := 1
	for ; u >= 0x80; u >>= 7 {
		s++
	}
	return s
}
