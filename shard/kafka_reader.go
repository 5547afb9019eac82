package shard

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/ringstream/ringstream/internal/assert"
	"github.com/ringstream/ringstream/wire"
)

// Kafka framing: every request is an int32 big-endian size, then that many bytes (the request header
// and body). The reader cuts those frames out of a connection's byte stream; what is inside them is
// the KafkaHandler's to parse.

// errKafkaFrameSize is a size prefix below a request header's fixed part (or negative), and
// errKafkaFrameTooLarge one past ClientConfig.FrameBytesMax. Either closes the connection (counted
// as kafka bad_request and frame_too_large): nothing after it can be trusted to line up with frames.
var (
	errKafkaFrameSize     = errors.New("shard: kafka frame size below a request header")
	errKafkaFrameTooLarge = errors.New("shard: kafka frame larger than client.frame_bytes_max")
)

// kafkaHeaderMin is the fixed part of every Kafka request header: api_key int16, api_version int16,
// correlation_id int32 (the client id and tagged fields follow).
const kafkaHeaderMin = 8

// kafkaReader reassembles size-prefixed Kafka frames from a byte stream. The caller receives into
// free() and hands the count to commit, which calls take with each whole frame (size prefix
// excluded). take may return wire.ErrStall to keep the frame for a later commit(0); any other error
// sticks. A frame larger than the buffer grows the buffer to the frame's size once its prefix is in,
// bounded by frameMax; the grown buffer is dropped after that frame.
type kafkaReader struct {
	buf        []byte
	start, end int
	bufferSize int
	frameMax   int
	need       int // the pending frame's size with its prefix, 0 while the prefix is incomplete
	err        error
}

func newKafkaReader(bufferSize, frameMax int) *kafkaReader {
	assert.True(bufferSize >= 4, "shard: kafka reader buffer smaller than a size prefix")
	return &kafkaReader{buf: make([]byte, bufferSize), bufferSize: bufferSize, frameMax: frameMax}
}

// free is the space to receive the next bytes into; nil once the reader failed.
func (r *kafkaReader) free() []byte {
	if r.err != nil {
		return nil
	}
	if r.start == r.end && len(r.buf) > r.bufferSize {
		r.buf = make([]byte, r.bufferSize) // drop the buffer grown for one large frame
		r.start, r.end = 0, 0
	}
	want := max(r.need, 4)
	if len(r.buf)-r.start < want || r.end == len(r.buf) {
		n := copy(r.buf, r.buf[r.start:r.end])
		r.start, r.end = 0, n
	}
	if len(r.buf) < want {
		bigger := make([]byte, want)
		r.end = copy(bigger, r.buf[:r.end])
		r.buf = bigger
	}
	return r.buf[r.end:]
}

// commit accounts n received bytes and hands every whole frame to take, in order.
func (r *kafkaReader) commit(n int, take func(frame []byte) error) error {
	if r.err != nil {
		return r.err
	}
	assert.True(n >= 0 && n <= len(r.buf)-r.end, "shard: kafka reader commit past its free space")
	r.end += n
	for {
		avail := r.end - r.start
		if r.need == 0 {
			if avail < 4 {
				break
			}
			size := int64(int32(binary.BigEndian.Uint32(r.buf[r.start:])))
			if err := validateKafkaFrameSize(size, r.frameMax); err != nil {
				r.err = err
				return err
			}
			r.need = 4 + int(size)
			continue
		}
		if avail < r.need {
			break
		}
		if err := take(r.buf[r.start+4 : r.start+r.need]); err != nil {
			if !errors.Is(err, wire.ErrStall) {
				r.err = err
			}
			return err
		}
		r.start += r.need
		r.need = 0
	}
	if r.start == r.end {
		r.start, r.end = 0, 0
	}
	return nil
}

// validateKafkaFrameSize checks a Kafka size prefix: at least a request header's fixed part, at most
// frameMax bytes with its prefix.
func validateKafkaFrameSize(size int64, frameMax int) error {
	switch {
	case size < kafkaHeaderMin:
		return fmt.Errorf("%w: %d bytes, want at least %d", errKafkaFrameSize, size, kafkaHeaderMin)
	case size+4 > int64(frameMax):
		return fmt.Errorf("%w: %d bytes, want at most %d", errKafkaFrameTooLarge, size, frameMax-4)
	}
	return nil
}

// buffered is the bytes received and not handed on: the start of the next frame.
func (r *kafkaReader) buffered() int { return r.end - r.start }

// pending is how many more bytes complete the frame under way, once its prefix is in.
func (r *kafkaReader) pending() int {
	if r.need == 0 {
		return 0
	}
	return max(r.need-(r.end-r.start), 0)
}
