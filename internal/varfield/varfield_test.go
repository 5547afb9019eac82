package varfield

import (
	"encoding/binary"
	"testing"
)

func TestReader(t *testing.T) {
	b := binary.AppendVarint(nil, -3)
	b = binary.AppendVarint(b, 2)
	b = append(b, "ab"...)
	b = binary.AppendVarint(b, -1)
	r := Reader{B: b}
	if v := r.Varint("v"); v != -3 {
		t.Fatalf("varint %d", v)
	}
	if f := r.Field("f", false); string(f) != "ab" || cap(f) != 2 {
		t.Fatalf("field %q cap %d", f, cap(f))
	}
	if f := r.Field("null", true); f != nil || r.Bad != "" || len(r.B) != 0 {
		t.Fatalf("nullable field %q, bad %q, left %d", f, r.Bad, len(r.B))
	}
	for _, c := range []struct {
		b    []byte
		null bool
	}{
		{binary.AppendVarint(nil, -1), false}, // -1 where not nullable
		{binary.AppendVarint(nil, 5), true},   // longer than what is left
		{binary.AppendVarint(nil, -2), true},  // negative
		{[]byte{0x80}, true},                  // a truncated varint
	} {
		r := Reader{B: c.b}
		if r.Field("x", c.null); r.Bad != "x" {
			t.Fatalf("% x: bad %q, want x", c.b, r.Bad)
		}
		if v := r.Varint("y"); v != 0 || r.Bad != "x" {
			t.Fatalf("a read after a failure: %d, bad %q", v, r.Bad)
		}
	}
}
