package segment

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// restampVersion rewrites an encoded batch's version field and its header checksum, as a writer of
// that version would have.
func restampVersion(b []byte, v uint16) []byte {
	b = append([]byte(nil), b...)
	binary.LittleEndian.PutUint16(b[12:], v)
	binary.LittleEndian.PutUint64(b[0:], xxhash.Sum64(b[8:BatchHeaderSize]))
	return b
}

// Batches of versions 1 and 2 are appended, made durable, read back through the ring and decoded with
// their version and payload as written; the header's zero version is written as version 1.
func TestBatchVersions_StoredAndReadBack(t *testing.T) {
	backends(t, func(t *testing.T, e *env) {
		c := e.open()
		defer e.close(c)
		payloads := []string{"values", "records", "legacy"}
		versions := []uint16{BatchVersionValues, BatchVersionRecords, 0}
		for i, v := range versions {
			h := BatchHeader{BaseOffset: uint64(i), RecordCount: 1, Epoch: 1, Version: v}
			if _, err := c.AppendEncoded(uint64(i+1), appendBatch(nil, &h, []byte(payloads[i]))); err != nil {
				t.Fatalf("AppendEncoded version %d: %v", v, err)
			}
		}
		e.syncRecords(c)
		buf := make([]byte, 64<<10)
		e.ev.reads = e.ev.reads[:0]
		if err := c.Records().Read(7, 0, buf); err != nil {
			t.Fatal(err)
		}
		e.until(c, func() bool { return len(e.ev.reads) == 1 })
		if e.ev.reads[0].err != nil {
			t.Fatal(e.ev.reads[0].err)
		}
		it := NewBatchIter(e.ev.reads[0].data, 0)
		want := []uint16{BatchVersionValues, BatchVersionRecords, BatchVersionValues}
		for i := range want {
			h, p, ok := it.Next()
			if !ok {
				t.Fatalf("batch %d missing: %v", i, it.Err())
			}
			if h.Version != want[i] || string(p) != payloads[i] {
				t.Fatalf("batch %d: version %d payload %q, want version %d payload %q", i, h.Version, p, want[i], payloads[i])
			}
		}
	})
}

// A batch of any version but 1 and 2 is refused as corrupt naming its version, by the decoder and by
// a follower's AppendEncoded.
func TestBatchVersions_UnknownRefused(t *testing.T) {
	h := BatchHeader{RecordCount: 1, Epoch: 1}
	good := appendBatch(nil, &h, []byte("x"))
	for _, v := range []uint16{0, 3, 0xffff} {
		_, _, _, err := DecodeBatch(restampVersion(good, v))
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "batch version ") {
			t.Errorf("version %d: got %v, want ErrCorrupt naming the version", v, err)
		}
	}
	backends(t, func(t *testing.T, e *env) {
		c := e.open()
		defer e.close(c)
		if _, err := c.AppendEncoded(1, restampVersion(good, 3)); !errors.Is(err, ErrCorrupt) ||
			!strings.Contains(err.Error(), "batch version 3") {
			t.Fatalf("AppendEncoded of version 3: got %v", err)
		}
	})
}
