package shard

import (
	"github.com/ringstream/ringstream/wire"
)

// receiver reassembles frames from one connection's byte stream in a buffer the connection owns, and
// hands each whole frame to the shard in place (no copy). When a cross-shard queue is full, the frame
// being handled stays in the buffer with the index of its next entry, and the connection stops reading
// until the shard resumes it: back-pressure reaches the peer through TCP, and no entry is dropped or
// handled twice (R16).
type receiver struct {
	buf     []byte // len(buf) is the capacity in use; bytes [start, end) are unhandled
	start   int
	end     int
	resume  int  // next entry of the frame at start, when stalled
	stalled bool // the frame at start is partly handled
}

func newReceiver(size int) receiver {
	return receiver{buf: make([]byte, size)}
}

// space is where the next Recv writes.
func (r *receiver) space() []byte { return r.buf[r.end:] }

// frameSize returns the size of the frame at start, or 0 when its header is not complete yet. A header
// that fails its checks is an error: the stream cannot be trusted past it.
func (r *receiver) frameSize() (int, error) {
	if r.end-r.start < wire.HeaderSize {
		return 0, nil
	}
	h, err := wire.ParseHeader(r.buf[r.start:r.end])
	if err != nil {
		return 0, err
	}
	return wire.HeaderSize + int(h.BodySize), nil
}

// process hands every complete frame to the shard, in order, and makes room for the next Recv. The
// shard returns false to stall on the current frame (it sets resume first). process returns an error
// when a header is corrupt; the caller closes the connection.
func (r *receiver) process(s *Shard, from uint16) error {
	for {
		size, err := r.frameSize()
		if err != nil {
			return err
		}
		if size == 0 || r.end-r.start < size {
			break
		}
		if !s.handleFrame(from, r.buf[r.start:r.start+size], &r.resume) {
			r.stalled = true
			return nil
		}
		r.stalled = false
		r.resume = 0
		r.start += size
	}
	r.compact()
	return nil
}

// compact moves the unhandled tail to the front and grows the buffer when the next frame is larger.
func (r *receiver) compact() {
	if r.start > 0 {
		n := copy(r.buf, r.buf[r.start:r.end])
		r.start, r.end = 0, n
	}
	size, err := r.frameSize()
	if err == nil && size > len(r.buf) {
		// A frame larger than the buffer: grow once to fit it (ParseHeader bounded it by FrameSizeMax).
		bigger := make([]byte, size)
		copy(bigger, r.buf[:r.end])
		r.buf = bigger
	}
}
