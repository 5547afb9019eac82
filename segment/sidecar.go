package segment

import (
	"encoding/binary"
	"fmt"
	"strconv"

	"github.com/cespare/xxhash/v2"
)

// A closed segment's sidecar, <base>.index, version 1, little endian:
//
//	magic "RSX1" u32 | version u16 | reserved u16 | base u64 | end u64 | size u64 | digest u64 |
//	max timestamp i64 | entry count u32 | reserved u32 | entries (offset u64, position u64)... |
//	xxhash64 of everything before it u64
//
// It is written once, after the segment's last bytes are durable and its digest is computed, and
// never fsynced: a torn or missing sidecar fails its checksum and open rebuilds it by scanning the
// segment. A valid sidecar therefore also says "every byte of this segment was durable".
const (
	sidecarMagic      = 0x31585352 // "RSX1"
	sidecarVersion    = 1
	sidecarFixedSize  = 56
	sidecarEntrySize  = 16
	sidecarEntriesMax = 1 << 22
)

// indexEntry maps a batch's base offset to its byte position in the segment file.
type indexEntry struct {
	offset uint64
	pos    int64
}

// segmentName and sidecarName give a segment's file names: the base offset in 20 decimal digits,
// so names sort in offset order.
func segmentName(base uint64) string { return pad20(base) + ".log" }
func sidecarName(base uint64) string { return pad20(base) + ".index" }

func pad20(v uint64) string {
	s := strconv.FormatUint(v, 10)
	const zeros = "00000000000000000000"
	return zeros[:20-len(s)] + s
}

// parseSegmentName returns the base offset of a "<20 digits>.log" name.
func parseSegmentName(name string) (uint64, bool) {
	if len(name) != 24 || name[20:] != ".log" {
		return 0, false
	}
	v, err := strconv.ParseUint(name[:20], 10, 64)
	return v, err == nil
}

// encodeSidecar returns the sidecar bytes of a closed, fully durable segment.
func encodeSidecar(seg *segment) []byte {
	n := len(seg.index)
	b := make([]byte, sidecarFixedSize+n*sidecarEntrySize+8)
	le := binary.LittleEndian
	le.PutUint32(b[0:], sidecarMagic)
	le.PutUint16(b[4:], sidecarVersion)
	le.PutUint64(b[8:], seg.base)
	le.PutUint64(b[16:], seg.end)
	le.PutUint64(b[24:], uint64(seg.size))
	le.PutUint64(b[32:], seg.digest)
	le.PutUint64(b[40:], uint64(seg.maxTimestamp))
	le.PutUint32(b[48:], uint32(n))
	p := sidecarFixedSize
	for _, e := range seg.index {
		le.PutUint64(b[p:], e.offset)
		le.PutUint64(b[p+8:], uint64(e.pos))
		p += sidecarEntrySize
	}
	le.PutUint64(b[p:], xxhash.Sum64(b[:p]))
	return b
}

// sidecar is a decoded sidecar.
type sidecar struct {
	base, end    uint64
	size         int64
	digest       uint64
	maxTimestamp int64
	index        []indexEntry
}

// decodeSidecar decodes and checks a sidecar. It never panics.
func decodeSidecar(b []byte) (sidecar, error) {
	var sc sidecar
	if len(b) < sidecarFixedSize+8 {
		return sc, fmt.Errorf("%w: sidecar of %d bytes", ErrCorrupt, len(b))
	}
	le := binary.LittleEndian
	sum := len(b) - 8
	if le.Uint64(b[sum:]) != xxhash.Sum64(b[:sum]) {
		return sc, fmt.Errorf("%w: sidecar checksum", ErrCorrupt)
	}
	if le.Uint32(b[0:]) != sidecarMagic || le.Uint16(b[4:]) != sidecarVersion {
		return sc, fmt.Errorf("%w: sidecar magic or version", ErrCorrupt)
	}
	n := le.Uint32(b[48:])
	if n > sidecarEntriesMax || sidecarFixedSize+int(n)*sidecarEntrySize != sum {
		return sc, fmt.Errorf("%w: sidecar entry count %d", ErrCorrupt, n)
	}
	sc.base = le.Uint64(b[8:])
	sc.end = le.Uint64(b[16:])
	sc.size = int64(le.Uint64(b[24:]))
	sc.digest = le.Uint64(b[32:])
	sc.maxTimestamp = int64(le.Uint64(b[40:]))
	if sc.end < sc.base || sc.size < 0 {
		return sc, fmt.Errorf("%w: sidecar range", ErrCorrupt)
	}
	sc.index = make([]indexEntry, n)
	p := sidecarFixedSize
	for i := range sc.index {
		e := indexEntry{offset: le.Uint64(b[p:]), pos: int64(le.Uint64(b[p+8:]))}
		if e.offset < sc.base || e.offset >= sc.end || e.pos < 0 || e.pos >= sc.size {
			return sc, fmt.Errorf("%w: sidecar entry %d out of range", ErrCorrupt, i)
		}
		if i > 0 && (e.offset <= sc.index[i-1].offset || e.pos <= sc.index[i-1].pos) {
			return sc, fmt.Errorf("%w: sidecar entry %d out of order", ErrCorrupt, i)
		}
		sc.index[i] = e
		p += sidecarEntrySize
	}
	return sc, nil
}
