package wire

import (
	"errors"
	"fmt"

	"github.com/ringstream/ringstream/internal/assert"
)

// ErrStall is returned by a FrameHandler that cannot take the whole frame now (a full queue behind it).
// The reader keeps the frame and hands it on again at the next Commit (Commit(0, h) retries without new
// bytes); the handler remembers how far into the frame it got. Commit returns ErrStall, and the reader
// stays usable: the caller stops receiving until it retries, so TCP pushes back on the peer.
var ErrStall = errors.New("wire: handler stalled on this frame")

// FrameHandler receives the frames a FrameReader cuts out of a byte stream. body and frame alias the
// reader's buffer and stay valid only until the handler returns; a handler that keeps bytes copies them.
type FrameHandler interface {
	// HandleFrame receives one whole, checked frame. ErrStall keeps the frame for a later retry; any
	// other non-nil error stops the reader, which returns that error from then on.
	HandleFrame(h Header, body []byte, frame []byte) error
	// DropFrame reports a frame whose header is sound but whose body fails its checksum. The frame is
	// dropped whole and the reader goes on with the next one (R15): the header still gave its length,
	// so the stream stays aligned.
	DropFrame(h Header, err error)
}

// FrameReader reassembles frames from a byte stream (one TCP connection): partial reads, several frames
// in one read, a frame split across reads. The caller receives straight into the reader's buffer (Free,
// then Commit with the byte count), so a frame that arrives whole is handed on without a copy; only the
// unfinished tail of a read is moved to the front of the buffer to make room.
//
// A header that fails ParseHeader or a frame past the reader's size limit is returned as an error; the
// connection's bytes can no longer be trusted to line up with frames, so the caller closes it. The error
// is sticky. A frame with a sound header and a wrong body checksum is only dropped (FrameHandler.DropFrame).
//
// The buffer has the size given to NewFrameReader. A frame larger than that is received into a buffer
// that grows as the frame's bytes arrive, doubling each time it is full, up to the frame's size (and the
// limit), and is dropped again once it is drained. A header alone reserves nothing: the memory a reader
// holds is at most its buffer size or twice the bytes of the pending frame actually received, whatever
// size the header claims. A peer that claims a 64 MiB body and sends nothing costs the buffer it
// already had. A FrameReader is used by one goroutine (its shard's).
type FrameReader struct {
	buf          []byte // len(buf) is the usable size; bytes [start, end) are received and not handed on
	start        int
	end          int
	bufferSize   int
	frameSizeMax int
	header       Header // the pending frame's header, once need != 0
	need         int    // size of the pending frame, 0 while its header is incomplete
	verified     bool   // the pending frame's body checksum held (set while a handler stalls on it)
	err          error
}

// NewFrameReader returns a reader with a bufferSize-byte buffer (at least HeaderSize) that refuses frames
// larger than frameSizeMax bytes (at most FrameSizeMax).
func NewFrameReader(bufferSize, frameSizeMax int) *FrameReader {
	assert.True(bufferSize >= HeaderSize, "wire: FrameReader buffer smaller than a header")
	assert.True(frameSizeMax >= HeaderSize, "wire: FrameReader limit smaller than a header")
	assert.True(frameSizeMax <= FrameSizeMax, "wire: FrameReader limit past FrameSizeMax")
	return &FrameReader{buf: make([]byte, bufferSize), bufferSize: bufferSize, frameSizeMax: frameSizeMax}
}

// Free returns the buffer space to receive the next bytes into; it is never empty while the reader has
// no error. Receive into it (a recv on the ring, or a Read) and then call Commit with the byte count.
// Free moves the unfinished frame to the front of the buffer when the frame would not fit behind it, and
// grows the buffer when the frame is larger than the whole buffer and the buffer is full: to twice its
// size, at most the frame's (see the type's comment). So the slice may be shorter than Pending.
func (r *FrameReader) Free() []byte {
	if r.err != nil {
		return nil
	}
	want := max(r.need, HeaderSize)
	if r.start == r.end && len(r.buf) > r.bufferSize {
		r.buf = make([]byte, r.bufferSize) // drop the buffer grown for one large frame
		r.start, r.end = 0, 0
	}
	if len(r.buf)-r.start < want {
		pending := copy(r.buf, r.buf[r.start:r.end])
		r.start, r.end = 0, pending
	}
	if r.end == len(r.buf) && len(r.buf) < want {
		r.grow(want)
	}
	assert.True(r.end < len(r.buf), "wire: FrameReader has no free space")
	return r.buf[r.end:]
}

// grow moves the pending bytes into a buffer twice as large, at most want bytes: it is called only
// once the buffer is full of the pending frame's bytes, so what a reader holds follows what arrived,
// never what a header claims.
func (r *FrameReader) grow(want int) {
	assert.True(r.start == 0, "wire: FrameReader grows with bytes ahead of the pending frame")
	bigger := make([]byte, min(want, 2*len(r.buf)))
	r.end = copy(bigger, r.buf[r.start:r.end])
	r.buf = bigger
}

// Reserved is the size of the reader's buffer now: its buffer size, or more while a frame larger than
// that is being received (at most twice that frame's bytes received so far).
func (r *FrameReader) Reserved() int {
	return len(r.buf)
}

// Commit accounts n bytes received into the slice Free returned and hands every complete frame to h,
// in order. It returns ErrStall when h stalls (retry later with Commit(0, h)), or the error that
// stopped the reader: a bad header (the connection must close) or h's own error.
func (r *FrameReader) Commit(n int, h FrameHandler) error {
	if r.err != nil {
		return r.err
	}
	assert.True(n >= 0 && n <= len(r.buf)-r.end, "wire: FrameReader.Commit past the free space")
	r.end += n
	for r.err == nil {
		avail := r.end - r.start
		if r.need == 0 {
			if avail < HeaderSize {
				break
			}
			r.pendingHeader()
			continue
		}
		if avail < r.need {
			break
		}
		frame := r.buf[r.start : r.start+r.need]
		body := frame[HeaderSize:]
		if !r.verified {
			if err := checkBody(&r.header, body); err != nil {
				r.start += r.need
				r.need = 0
				h.DropFrame(r.header, err)
				continue
			}
			r.verified = true
		}
		if err := h.HandleFrame(r.header, body, frame); err != nil {
			if errors.Is(err, ErrStall) {
				return err
			}
			r.err = err
			break
		}
		r.start += r.need
		r.need = 0
		r.verified = false
	}
	if r.start == r.end {
		r.start, r.end = 0, 0
	}
	return r.err
}

// pendingHeader parses the header at r.start and records the frame's size, or the reader's error.
func (r *FrameReader) pendingHeader() {
	h, err := ParseHeader(r.buf[r.start:r.end])
	if err != nil {
		r.err = err
		return
	}
	size := HeaderSize + int(h.BodySize)
	if size > r.frameSizeMax {
		r.err = fmt.Errorf("%w: %d bytes, this reader's limit is %d", ErrFrameTooLarge, size, r.frameSizeMax)
		return
	}
	r.header = h
	r.need = size
}

// Write copies p into the reader through Free and Commit and hands on the frames it completes, and
// returns how many bytes of p it took. It is for callers that already hold the bytes elsewhere (tests,
// a plain io.Reader); a ring receives into Free. On ErrStall the bytes past n were not taken.
func (r *FrameReader) Write(p []byte, h FrameHandler) (int, error) {
	taken := 0
	for taken < len(p) {
		free := r.Free()
		if free == nil {
			return taken, r.err
		}
		n := copy(free, p[taken:])
		taken += n
		if err := r.Commit(n, h); err != nil {
			return taken, err
		}
	}
	return taken, r.err
}

// Pending is how many more bytes complete the frame being received, once its header is in: 0 while
// the next frame's header is incomplete (or the reader has no frame under way). A caller that receives
// no more than Pending bytes for a large frame ends each read on the frame's last byte, so the reader
// never has to move a large frame's bytes to make room.
func (r *FrameReader) Pending() int {
	if r.need == 0 {
		return 0
	}
	return max(r.need-(r.end-r.start), 0)
}

// Buffered is the number of received bytes not handed on yet: the start of the next frame.
func (r *FrameReader) Buffered() int {
	return r.end - r.start
}

// Err is the error that stopped the reader, or nil.
func (r *FrameReader) Err() error {
	return r.err
}
