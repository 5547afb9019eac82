package client

import (
	"errors"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/ringstream/ringstream/segment"
)

// FuzzRecords feeds arbitrary bytes to the fetched-batch decoder and the record iterator, both record
// formats: they never panic, and any failure is ErrCorruptBatch, or ErrUnknownFormat for a version
// neither format has. A batch segment accepts decodes here to the same header. Every record read has
// as many headers as it says, and its key, value and headers lie within the data.
func FuzzRecords(f *testing.F) {
	two := appendRecord(appendRecord(nil, []byte("a")), []byte("bc"))
	f.Add(appendTestBatch(nil, 0, 2, CodecNone, 1, 1, two), uint32(2))
	f.Add(appendTestBatch(nil, 5, 1, CodecNone, 0, 0, appendRecord(nil, nil)), uint32(1))
	f.Add(appendTestBatch(nil, 0, 2, CodecS2, 1, 1, []byte{7, 0x18, 1, 'a', 2, 'b', 'c'}), uint32(2))
	f.Add(appendTestBatch(nil, 0, 2, CodecNone, 1, 1, []byte{1, 'a', 9}), uint32(2))
	f.Add([]byte{}, uint32(0))
	keyed := []Record{{Key: []byte("k"), Value: []byte("v"), Headers: []Header{{Key: []byte("h"), Value: nil}}},
		{Value: nil, Headers: []Header{{Key: []byte{}, Value: []byte("x")}}, Timestamp: time.UnixMilli(-5)}}
	f.Add(appendTestBatchAt(nil, 0, 2, CodecNone, FormatRecords, 1, 1, 9, testRecords2(0, keyed...)), uint32(2))
	f.Add(appendTestBatchAt(nil, 3, 1, CodecNone, FormatRecords, 1, 1, 9, testRecords2(0, keyed[0])), uint32(1))
	f.Add(appendTestBatchAt(nil, 0, 1, CodecNone, 3, 1, 1, 9, []byte{1, 'a'}), uint32(1))
	f.Add(appendTestBatchAt(nil, 0, 1, CodecNone, FormatRecords, 1, 1, 9, []byte{1, 2}), uint32(1))
	dec := newZstdDecoder()
	f.Cleanup(dec.Close)
	f.Fuzz(func(t *testing.T, data []byte, count uint32) {
		h, _, size, err := decodeBatch(data)
		sh, _, ssize, serr := segment.DecodeBatch(data)
		if serr == nil && (err != nil || size != ssize || h.base != sh.BaseOffset || h.count != sh.RecordCount ||
			uint8(h.codec) != sh.Codec || h.sequence != sh.ProducerSeq) {
			t.Fatalf("segment decodes %+v (%d bytes), client %+v (%d bytes) err %v", sh, ssize, h, size, err)
		}
		if err != nil && !errors.Is(err, ErrCorruptBatch) && !errors.Is(err, ErrUnknownFormat) {
			t.Fatalf("decode error %v is neither ErrCorruptBatch nor ErrUnknownFormat", err)
		}
		var r Records
		r.zdec = func() *zstd.Decoder { return dec }
		base := uint64(0)
		if err == nil {
			base = h.base
		}
		r.reset(base, base, count, base+uint64(count), data)
		for r.Next() {
			if r.Offset() < base || r.Offset() >= base+uint64(count) {
				t.Fatalf("record at %d outside %d..%d", r.Offset(), base, base+uint64(count))
			}
			size := len(r.Key()) + len(r.Value())
			n := 0
			for it := r.Headers(); it.Next(); n++ {
				size += len(it.Header().Key) + len(it.Header().Value)
			}
			if n != r.HeaderCount() || (r.Format() == FormatValues && (r.Key() != nil || n != 0)) {
				t.Fatalf("record at %d: %d headers read, %d said, format %v, key %q", r.Offset(), n, r.HeaderCount(),
					r.Format(), r.Key())
			}
			if size > len(data)+len(r.dbuf) {
				t.Fatalf("record at %d: %d bytes of fields from %d bytes of data", r.Offset(), size, len(data))
			}
		}
		if r.Err() != nil && !errors.Is(r.Err(), ErrCorruptBatch) && !errors.Is(r.Err(), ErrUnknownFormat) {
			t.Fatalf("iterator error %v is neither ErrCorruptBatch nor ErrUnknownFormat", r.Err())
		}
	})
}

// FuzzRecordPayload wraps arbitrary payloads in batches whose checksums hold, so that the fuzzer
// reaches the record decoders of both formats (and the codecs) rather than stopping at a checksum: they
// never panic, a failure is ErrCorruptBatch (ErrUnknownFormat for another version), and every record
// read decodes whole, as many headers as it says.
func FuzzRecordPayload(f *testing.F) {
	keyed := []Record{{Key: []byte("k"), Value: []byte("v"), Headers: []Header{{Key: []byte("h"), Value: nil}}},
		{Value: nil, Headers: []Header{{Key: []byte{}, Value: []byte("x")}}, Timestamp: time.UnixMilli(-5)}}
	f.Add(testRecords2(0, keyed...), uint16(2), uint8(CodecNone), uint8(FormatRecords))
	f.Add(testRecords2(7, keyed[0]), uint16(1), uint8(CodecNone), uint8(FormatRecords))
	f.Add(appendRecord(appendRecord(nil, []byte("a")), nil), uint16(2), uint8(CodecNone), uint8(FormatValues))
	f.Add([]byte{7, 0x18, 1, 'a', 2, 'b', 'c'}, uint16(2), uint8(CodecS2), uint8(FormatValues))
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0x28, 0xb5, 0x2f, 0xfd}, uint16(1), uint8(CodecZstd), uint8(FormatRecords))
	dec := newZstdDecoder()
	f.Cleanup(dec.Close)
	f.Fuzz(func(t *testing.T, payload []byte, count uint16, codec, format uint8) {
		if count == 0 {
			return
		}
		data := appendTestBatchAt(nil, 3, uint32(count), Codec(codec), Format(format), 1, 1, 9, payload)
		var r Records
		r.zdec = func() *zstd.Decoder { return dec }
		r.reset(3, 3, uint32(count), 3+uint64(count), data)
		n := 0
		for r.Next() {
			n++
			h := 0
			for it := r.Headers(); it.Next(); h++ {
			}
			if h != r.HeaderCount() {
				t.Fatalf("record %d: %d headers read, %d said", r.Offset(), h, r.HeaderCount())
			}
		}
		err := r.Err()
		switch {
		case err == nil && n != int(count):
			t.Fatalf("%d records of %d without an error", n, count)
		case err != nil && !errors.Is(err, ErrCorruptBatch) && !errors.Is(err, ErrUnknownFormat):
			t.Fatalf("error %v is neither ErrCorruptBatch nor ErrUnknownFormat", err)
		case errors.Is(err, ErrUnknownFormat) && (format == uint8(FormatValues) || format == uint8(FormatRecords)):
			t.Fatalf("format %d refused as unknown: %v", format, err)
		}
	})
}
