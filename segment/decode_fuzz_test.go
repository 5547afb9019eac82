package segment

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// Seeds for the small decoders: one valid encoding each, plus a damaged and a short copy.
func sidecarSeeds() [][]byte {
	s := &segment{base: 100, end: 130, size: 4000, digest: 0xfeed, maxTimestamp: 77,
		index: []indexEntry{{100, 0}, {110, 1500}, {120, 3000}}}
	v := encodeSidecar(s)
	return [][]byte{v, v[:len(v)-3], flipAt(v, 20), {}}
}

func epochsSeeds() [][]byte {
	b := binary.LittleEndian.AppendUint32(nil, epochsMagic)
	b = binary.LittleEndian.AppendUint32(b, epochsVersion)
	for i, e := range []EpochEntry{{1, 0, 0}, {2, 10, 3}, {5, 40, 9}} {
		var ent [epochEntrySize]byte
		encodeEpochEntry(ent[:], i, e)
		b = append(b, ent[:]...)
	}
	return [][]byte{b, b[:len(b)-5], flipAt(b, 12), flipAt(b, len(b)-1)}
}

func fenceSeeds() [][]byte {
	var b [2 * fenceSlotSize]byte
	encodeFenceSlot(b[:fenceSlotSize], 2, 9)
	encodeFenceSlot(b[fenceSlotSize:], 3, 11)
	return [][]byte{b[:], b[:40], flipAt(b[:], 50)}
}

func cursorSnapshotSeeds() [][]byte {
	m := cursorMap{}
	m.set("alpha", 5)
	m.set("b", 1<<40)
	v := encodeCursorSnapshot(12, m)
	return [][]byte{v, v[:len(v)-1], flipAt(v, 22), encodeCursorSnapshot(0, cursorMap{})}
}

func cursorEventSeeds() [][]byte {
	v := appendCursorEvent(nil, "reader", 42)
	return [][]byte{v, v[:3], {0xff, 0xff}, appendCursorDelete(nil, "reader"), v[:9]}
}

func flipAt(b []byte, i int) []byte {
	c := bytes.Clone(b)
	c[i] ^= 0x24
	return c
}

func FuzzDecodeSidecar(f *testing.F) {
	for _, s := range sidecarSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		sc, err := decodeSidecar(b)
		if err != nil {
			return
		}
		s := &segment{base: sc.base, end: sc.end, size: sc.size, digest: sc.digest, maxTimestamp: sc.maxTimestamp, index: sc.index}
		if !bytes.Equal(encodeSidecar(s), b) {
			t.Fatalf("a decoded sidecar does not re-encode to its bytes")
		}
	})
}

func FuzzDecodeEpochs(f *testing.F) {
	for _, s := range epochsSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		entries, valid, err := decodeEpochs(b)
		if err != nil {
			return
		}
		if valid > len(b) || (len(entries) > 0 && valid != epochsHeaderSize+len(entries)*epochEntrySize) {
			t.Fatalf("%d entries in %d valid bytes of %d", len(entries), valid, len(b))
		}
		for i := 1; i < len(entries); i++ {
			if !epochFollows(entries[i-1], entries[i]) {
				t.Fatalf("entry %d does not follow %d", i, i-1)
			}
		}
	})
}

func FuzzDecodeFence(f *testing.F) {
	for _, s := range fenceSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		gen, epoch := decodeFence(b)
		if gen == 0 && epoch != 0 {
			t.Fatalf("epoch %d without a valid slot", epoch)
		}
	})
}

func FuzzDecodeCursorSnapshot(f *testing.F) {
	for _, s := range cursorSnapshotSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		boundary, m, err := decodeCursorSnapshot(b)
		if err != nil {
			return
		}
		b2, m2, err := decodeCursorSnapshot(encodeCursorSnapshot(boundary, m))
		if err != nil || b2 != boundary || len(m2) != len(m) {
			t.Fatalf("re-encoded snapshot differs: %v", err)
		}
		for name, off := range m {
			if *m2[name] != *off {
				t.Fatalf("cursor %q differs after re-encoding", name)
			}
		}
	})
}

func FuzzDecodeCursorEvent(f *testing.F) {
	for _, s := range cursorEventSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		name, off, deleted, err := decodeCursorEvent(b)
		if err != nil {
			return
		}
		again := appendCursorEvent(nil, string(name), off)
		if deleted {
			again = appendCursorDelete(nil, string(name))
			if off != 0 {
				t.Fatalf("a tombstone with offset %d", off)
			}
		}
		if !bytes.Equal(again, b) {
			t.Fatalf("a decoded cursor event does not re-encode to its bytes")
		}
	})
}
