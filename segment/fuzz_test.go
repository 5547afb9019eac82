package segment

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/ringstream/ringstream/ring"
)

// validSegment returns a segment file of n batches of 3 records each, starting at offset 0.
func validSegment(n int) []byte {
	var seg, payload []byte
	for i := 0; i < n; i++ {
		base := uint64(i * 3)
		payload = recordPayload(payload, base, 3, 20)
		h := BatchHeader{BaseOffset: base, RecordCount: 3, Epoch: 2, ProducerID: 7, ProducerSeq: uint64(i),
			Codec: 1, FirstTimestamp: 100, MaxTimestamp: 200}
		seg = appendBatch(seg, &h, payload)
	}
	return seg
}

// fuzzSeeds are the committed seed inputs: a valid segment, torn and flipped variants.
func fuzzSeeds() [][]byte {
	v := validSegment(4)
	flipped := func(at int) []byte {
		b := bytes.Clone(v)
		b[at] ^= 0x55
		return b
	}
	return [][]byte{
		v, v[:len(v)-1], v[:len(v)-50], v[:BatchHeaderSize/2], v[:len(v)/2],
		flipped(3), flipped(BatchHeaderSize + 5), flipped(len(v) - 1), flipped(len(v) - 60),
		append(bytes.Clone(v), make([]byte, 300)...), {},
	}
}

func TestBatch_RoundTripAndDamage(t *testing.T) {
	v := validSegment(1)
	h, payload, n, err := DecodeBatch(v)
	if err != nil || n != len(v) || h.RecordCount != 3 || h.ProducerID != 7 || h.Codec != 1 || h.MaxTimestamp != 200 {
		t.Fatalf("decode: %+v %d %v", h, n, err)
	}
	if !bytes.Equal(appendBatch(nil, &h, payload), v) {
		t.Fatalf("re-encoding differs")
	}
	for i := range v {
		d := bytes.Clone(v)
		d[i] ^= 0x01
		if _, _, _, err := DecodeBatch(d); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("flip at byte %d: %v, want ErrCorrupt", i, err)
		}
	}
	for i := 0; i < len(v); i++ {
		if _, _, _, err := DecodeBatch(v[:i]); !errors.Is(err, ErrShortBatch) {
			t.Fatalf("truncated to %d: %v, want ErrShortBatch", i, err)
		}
	}
}

func FuzzDecodeBatch(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		h, payload, n, err := DecodeBatch(b)
		if err != nil {
			return
		}
		if n > len(b) || !bytes.Equal(appendBatch(nil, &h, payload), b[:n]) {
			t.Fatalf("decoded batch does not re-encode to its bytes")
		}
	})
}

// FuzzOpenCorruptSegment: open and recovery of a copy whose last segment holds arbitrary bytes
// never panics; when open succeeds, everything up to the tail reads back as valid batches and the
// log takes a new append.
func FuzzOpenCorruptSegment(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		e := newEnv(t, ring.Config{Backend: ring.BackendFallback, Entries: 64})
		recDir := filepath.Join(e.dir, "records")
		if err := os.MkdirAll(recDir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(recDir, segmentName(0)), data, 0o644); err != nil {
			t.Fatal(err)
		}
		c, rep, err := OpenSync(e.r, e.dir, e.cfg, e.ev)
		if err != nil {
			return // an error is an allowed answer; a panic is not
		}
		defer e.close(c)
		tail := c.Records().DurableTail()
		if int64(len(data))-rep.Records.CutBytes-rep.Records.ZeroTailBytes != c.Records().SizeBytes() {
			t.Fatalf("cut %d and %d zero bytes of %d, log holds %d", rep.Records.CutBytes,
				rep.Records.ZeroTailBytes, len(data), c.Records().SizeBytes())
		}
		if _, _, err := c.VerifySync(); err != nil {
			t.Fatalf("verify after recovery: %v", err)
		}
		h := BatchHeader{RecordCount: 1, Epoch: 9}
		if _, err := c.Append(1, &h, []byte("after recovery")); err != nil {
			t.Fatal(err)
		}
		e.syncRecords(c)
		if c.Records().DurableTail() != tail+1 {
			t.Fatalf("tail %d after one append to %d", c.Records().DurableTail(), tail)
		}
	})
}

// TestWriteFuzzCorpus writes the seed corpus files under testdata/fuzz when asked to
// (SEGMENT_WRITE_CORPUS=1); they are committed.
func TestWriteFuzzCorpus(t *testing.T) {
	if os.Getenv("SEGMENT_WRITE_CORPUS") == "" {
		t.Skip("set SEGMENT_WRITE_CORPUS=1 to rewrite the committed seed corpus")
	}
	targets := map[string][][]byte{
		"FuzzOpenCorruptSegment":   fuzzSeeds(),
		"FuzzDecodeBatch":          fuzzSeeds(),
		"FuzzDecodeSidecar":        sidecarSeeds(),
		"FuzzDecodeEpochs":         epochsSeeds(),
		"FuzzDecodeFence":          fenceSeeds(),
		"FuzzDecodeCursorSnapshot": cursorSnapshotSeeds(),
		"FuzzDecodeCursorEvent":    cursorEventSeeds(),
	}
	for target, seeds := range targets {
		dir := filepath.Join("testdata", "fuzz", target)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for i, s := range seeds {
			body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", s)
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed-%02d", i)), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func TestBatchIter_RangeStopsAtTo(t *testing.T) {
	seg := validSegment(5) // batches at 0, 3, 6, 9, 12
	it := NewBatchRange(seg, 4, 9)
	var bases []uint64
	for {
		h, _, ok := it.Next()
		if !ok {
			break
		}
		bases = append(bases, h.BaseOffset)
	}
	if it.Err() != nil || len(bases) != 2 || bases[0] != 3 || bases[1] != 6 {
		t.Fatalf("bases %v err %v, want [3 6]", bases, it.Err())
	}
	one := validSegment(1)
	if raw := it.Raw(); !bytes.Equal(raw, seg[2*len(one):3*len(one)]) {
		t.Fatalf("Raw is not the last batch's bytes")
	}
	it = NewBatchIter(seg[:len(seg)-5], 0)
	n := 0
	for _, _, ok := it.Next(); ok; _, _, ok = it.Next() {
		n++
	}
	if n != 4 || it.Err() != nil {
		t.Fatalf("a read ending inside the last batch gave %d batches, err %v", n, it.Err())
	}
}
