// Package varfield reads the fields of Kafka's v2 record layout, which record format 2 stores: zigzag
// varints and byte strings behind a varint length, in place and without allocating. The first field
// that fails sticks and names itself, so a caller reads a whole record and checks once. The client's
// record reader and the Kafka listener's batch validation share it.
package varfield

import "encoding/binary"

// Reader reads fields from B, moving past each; Bad names the first field that failed ("" while
// every read succeeded), after which every read returns the zero value.
type Reader struct {
	B   []byte
	Bad string
}

// Varint reads a zigzag varint named what.
func (r *Reader) Varint(what string) int64 {
	if r.Bad != "" {
		return 0
	}
	v, k := binary.Varint(r.B)
	if k <= 0 {
		r.Bad = what
		return 0
	}
	r.B = r.B[k:]
	return v
}

// Field reads a byte string named what behind its varint length; nullable allows the length -1
// (returned as nil). The result aliases B, its capacity cut to its length.
func (r *Reader) Field(what string, nullable bool) []byte {
	n := r.Varint(what)
	switch {
	case r.Bad != "":
		return nil
	case n == -1 && nullable:
		return nil
	case n < 0 || n > int64(len(r.B)):
		r.Bad = what
		return nil
	}
	f := r.B[:n:n]
	r.B = r.B[n:]
	return f
}
