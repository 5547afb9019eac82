package meta

import "encoding/binary"

// decoder reads little-endian fields from input bytes. A read past the end sets short and returns
// zero values, so a decode function reads every field and checks once at the end; it never panics
// and never allocates, except for the strings and lists it returns.
type decoder struct {
	buf   []byte
	off   int
	short bool
}

func (d *decoder) take(n int) []byte {
	if d.short || n < 0 || len(d.buf)-d.off < n {
		d.short = true
		return nil
	}
	b := d.buf[d.off : d.off+n]
	d.off += n
	return b
}

func (d *decoder) u8() uint8 {
	b := d.take(1)
	if b == nil {
		return 0
	}
	return b[0]
}

func (d *decoder) u16() uint16 {
	b := d.take(2)
	if b == nil {
		return 0
	}
	return binary.LittleEndian.Uint16(b)
}

func (d *decoder) u32() uint32 {
	b := d.take(4)
	if b == nil {
		return 0
	}
	return binary.LittleEndian.Uint32(b)
}

func (d *decoder) u64() uint64 {
	b := d.take(8)
	if b == nil {
		return 0
	}
	return binary.LittleEndian.Uint64(b)
}

// str reads a string prefixed with its u8 length.
func (d *decoder) str() string {
	n := int(d.u8())
	return string(d.take(n))
}

// nodes reads a list of node ids prefixed with its u8 count. A count above limit marks the input bad.
func (d *decoder) nodes(limit int) []uint16 {
	n := int(d.u8())
	if n > limit {
		d.short = true
		return nil
	}
	if n == 0 {
		return nil
	}
	out := make([]uint16, 0, n)
	for range n {
		out = append(out, d.u16())
	}
	if d.short {
		return nil
	}
	return out
}

func (d *decoder) policy() Policy {
	return Policy{Kind: PolicyKind(d.u8()), Count: d.u8()}
}

// done reports whether every read fit and the input was used exactly.
func (d *decoder) done() bool { return !d.short && d.off == len(d.buf) }

func appendStr(dst []byte, s string) []byte {
	dst = append(dst, uint8(len(s)))
	return append(dst, s...)
}

func appendNodes(dst []byte, nodes []uint16) []byte {
	dst = append(dst, uint8(len(nodes)))
	for _, n := range nodes {
		dst = binary.LittleEndian.AppendUint16(dst, n)
	}
	return dst
}

func appendPolicy(dst []byte, p Policy) []byte {
	return append(dst, uint8(p.Kind), p.Count)
}
