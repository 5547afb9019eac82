package wire

import (
	"fmt"

	"github.com/ringstream/ringstream/internal/assert"
)

// FrameHandler receives the frames a FrameReader cuts out of a byte stream. body and frame alias the
// reader's buffer and stay valid only until the handler returns; a handler that keeps bytes copies them.
// A non-nil error stops the reader: it returns that error from then on.
type FrameHandler interface {
	HandleFrame(h Header, body []byte, frame []byte) error
}

// FrameReader reassembles frames from a byte stream (one TCP connection): partial reads, several frames
// in one read, a frame split across reads. The caller receives straight into the reader's buffer (Free,
// then Commit with the byte count), so a frame that arrives whole is handed on without a copy; only the
// unfinished tail of a read is moved to the front of the buffer to make room.
//
// A header that fails ParseHeader, a frame past the reader's size limit or a wrong body checksum is
// returned as an error; the connection's bytes can no longer be trusted to line up with frames, so the
// caller closes it. The error is sticky.
//
// The buffer has the size given to NewFrameReader. A frame larger than that is received into a buffer
// grown to the frame's size (up to the limit), which is dropped again once it is drained. A FrameReader is
// used by one goroutine (its shard's).
type FrameReader struct {
	buf          []byte // len(buf) is the usable size; bytes [start, end) are received and not handed on
	start        int
	end          int
	bufferSize   int
	frameSizeMax int
	header       Header // the pending frame's header, once need != 0
	need         int    // size of the pending frame, 0 while its header is incomplete
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
// grows the buffer when the frame is larger than the whole buffer.
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
	if len(r.buf) < want {
		bigger := make([]byte, want)
		r.end = copy(bigger, r.buf[r.start:r.end])
		r.start = 0
		r.buf = bigger
	}
	assert.True(r.end < len(r.buf), "wire: FrameReader has no free space")
	return r.buf[r.end:]
}

// Commit accounts n bytes received into the slice Free returned and hands every complete frame to h,
// in order. It returns the first error: a bad frame (the connection must close) or h's own error.
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
		if err := checkBody(&r.header, body); err != nil {
			r.err = err
			break
		}
		r.start += r.need
		r.need = 0
		if err := h.HandleFrame(r.header, body, frame); err != nil {
			r.err = err
		}
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

// Write copies p into the reader through Free and Commit and hands on the frames it completes. It is for
// callers that already hold the bytes elsewhere (tests, a plain io.Reader); a ring receives into Free.
func (r *FrameReader) Write(p []byte, h FrameHandler) error {
	for len(p) > 0 {
		free := r.Free()
		if free == nil {
			return r.err
		}
		n := copy(free, p)
		p = p[n:]
		if err := r.Commit(n, h); err != nil {
			return err
		}
	}
	return r.err
}

// Buffered is the number of received bytes not handed on yet: the start of the next frame.
func (r *FrameReader) Buffered() int {
	return r.end - r.start
}

// Err is the error that stopped the reader, or nil.
func (r *FrameReader) Err() error {
	return r.err
}
