package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Sentinel errors of body decoding. Each has one meaning.
var (
	// ErrShortBody: the body ends before the fields its header or its own length fields announce.
	ErrShortBody = errors.New("wire: body shorter than its fields")
	// ErrCommand: a decoder was handed a frame of another command.
	ErrCommand = errors.New("wire: frame of another command")
	// ErrEntryCount: the header's entry count does not match the body.
	ErrEntryCount = errors.New("wire: entry count does not match the body")
	// ErrMalformed: a field holds a value its command does not allow; the error names the field.
	ErrMalformed = errors.New("wire: field value out of range")
)

// malformed wraps ErrMalformed with the field's name. Only error paths call it.
func malformed(field string) error {
	return fmt.Errorf("%w: %s", ErrMalformed, field)
}

// wrongCommand wraps ErrCommand with both commands. Only error paths call it.
func wrongCommand(got, want Command) error {
	return fmt.Errorf("%w: got %s, want %s", ErrCommand, got, want)
}

// AppendU8, AppendU16, AppendU32 and AppendU64 append v in little endian, for bodies built field by field.
func AppendU8(dst []byte, v uint8) []byte { return append(dst, v) }

// AppendU16 appends v in little endian.
func AppendU16(dst []byte, v uint16) []byte { return binary.LittleEndian.AppendUint16(dst, v) }

// AppendU32 appends v in little endian.
func AppendU32(dst []byte, v uint32) []byte { return binary.LittleEndian.AppendUint32(dst, v) }

// AppendU64 appends v in little endian.
func AppendU64(dst []byte, v uint64) []byte { return binary.LittleEndian.AppendUint64(dst, v) }

// BodyReader reads little-endian fields from the front of a body, checking the length before every
// read. A read past the end returns zero and makes Err report ErrShortBody; it never panics. Slices it
// returns alias the body.
type BodyReader struct {
	buf   []byte
	off   int
	short bool
}

// NewBodyReader returns a reader positioned at the start of b.
func NewBodyReader(b []byte) BodyReader {
	return BodyReader{buf: b}
}

// take returns the next n bytes, or nil (and marks the reader short) when fewer remain.
func (r *BodyReader) take(n int) []byte {
	if r.short || n < 0 || len(r.buf)-r.off < n {
		r.short = true
		return nil
	}
	b := r.buf[r.off : r.off+n]
	r.off += n
	return b
}

// U8 reads one byte.
func (r *BodyReader) U8() uint8 {
	if b := r.take(1); b != nil {
		return b[0]
	}
	return 0
}

// U16 reads a little-endian uint16.
func (r *BodyReader) U16() uint16 {
	if b := r.take(2); b != nil {
		return binary.LittleEndian.Uint16(b)
	}
	return 0
}

// U32 reads a little-endian uint32.
func (r *BodyReader) U32() uint32 {
	if b := r.take(4); b != nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}

// U64 reads a little-endian uint64.
func (r *BodyReader) U64() uint64 {
	if b := r.take(8); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}

// Bytes returns the next n bytes, aliasing the body, or nil when fewer remain.
func (r *BodyReader) Bytes(n int) []byte {
	return r.take(n)
}

// Remaining is the number of bytes not read yet.
func (r *BodyReader) Remaining() int {
	return len(r.buf) - r.off
}

// Err is ErrShortBody once any read ran past the end, nil before.
func (r *BodyReader) Err() error {
	if r.short {
		return ErrShortBody
	}
	return nil
}

// Finish is Err, or ErrTrailingBytes when the body holds bytes past the last field read.
func (r *BodyReader) Finish() error {
	if r.short {
		return ErrShortBody
	}
	if r.off != len(r.buf) {
		return ErrTrailingBytes
	}
	return nil
}

// From names who sends a frame: the cluster id and the sender's node id (0 for a client).
type From struct {
	Cluster uint64
	Node    uint16
}

// startFrame appends the header of h (cluster and sender from from) and returns the buffer and the
// offset where the frame starts; the caller appends the body and calls endFrame.
func startFrame(dst []byte, from From, h *Header) ([]byte, int) {
	h.Cluster = from.Cluster
	h.Sender = from.Node
	start := len(dst)
	return BeginFrame(dst, h), start
}

// endFrame closes the frame that starts at start and returns dst.
func endFrame(dst []byte, start int, count uint32) []byte {
	EndFrame(dst[start:], count)
	return dst
}

// checkHeader checks a frame's command and that its per-command area is zero from areaEnd on.
func checkHeader(h *Header, want Command, areaEnd int) error {
	if h.Command != want {
		return wrongCommand(h.Command, want)
	}
	if !zero(h.Area[areaEnd:]) {
		return ErrReserved
	}
	return nil
}

// nilIfEmpty returns nil for an empty slice, so decoded messages compare equal to the ones encoded.
func nilIfEmpty(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

func put16(b []byte, off int, v uint16) { binary.LittleEndian.PutUint16(b[off:], v) }
func put32(b []byte, off int, v uint32) { binary.LittleEndian.PutUint32(b[off:], v) }
func put64(b []byte, off int, v uint64) { binary.LittleEndian.PutUint64(b[off:], v) }
func get16(b []byte, off int) uint16    { return binary.LittleEndian.Uint16(b[off:]) }
func get32(b []byte, off int) uint32    { return binary.LittleEndian.Uint32(b[off:]) }
func get64(b []byte, off int) uint64    { return binary.LittleEndian.Uint64(b[off:]) }
