package client

import (
	"errors"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/ringstream/ringstream/segment"
)

// FuzzRecords feeds arbitrary bytes to the fetched-batch decoder and the record iterator: they never
// panic, and any failure is ErrCorruptBatch. A batch segment accepts decodes here to the same header.
func FuzzRecords(f *testing.F) {
	two := appendRecord(appendRecord(nil, []byte("a")), []byte("bc"))
	f.Add(appendTestBatch(nil, 0, 2, CodecNone, 1, 1, two), uint32(2))
	f.Add(appendTestBatch(nil, 5, 1, CodecNone, 0, 0, appendRecord(nil, nil)), uint32(1))
	f.Add(appendTestBatch(nil, 0, 2, CodecS2, 1, 1, []byte{7, 0x18, 1, 'a', 2, 'b', 'c'}), uint32(2))
	f.Add(appendTestBatch(nil, 0, 2, CodecNone, 1, 1, []byte{1, 'a', 9}), uint32(2))
	f.Add([]byte{}, uint32(0))
	dec := newZstdDecoder()
	f.Cleanup(dec.Close)
	f.Fuzz(func(t *testing.T, data []byte, count uint32) {
		h, _, size, err := decodeBatch(data)
		sh, _, ssize, serr := segment.DecodeBatch(data)
		if serr == nil && (err != nil || size != ssize || h.base != sh.BaseOffset || h.count != sh.RecordCount ||
			uint8(h.codec) != sh.Codec || h.sequence != sh.ProducerSeq) {
			t.Fatalf("segment decodes %+v (%d bytes), client %+v (%d bytes) err %v", sh, ssize, h, size, err)
		}
		if err != nil && !errors.Is(err, ErrCorruptBatch) {
			t.Fatalf("decode error %v is not ErrCorruptBatch", err)
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
		}
		if r.Err() != nil && !errors.Is(r.Err(), ErrCorruptBatch) {
			t.Fatalf("iterator error %v is not ErrCorruptBatch", r.Err())
		}
	})
}
