package kafka

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// ErrBadHeader is a request whose header breaks a rule (named in the message): the connection
// closes, since no response can name a request it could not read.
var ErrBadHeader = errors.New("kafka: bad request header")

// requestHeader is a parsed Kafka request header (v1, or v2 for flexible versions: the same plus
// tagged fields). ClientID aliases the frame.
type requestHeader struct {
	Key           int16
	Version       int16
	CorrelationID int32
	ClientID      []byte
}

// clientIDMax bounds a request's client id, as Kafka's int16-length string does.
const clientIDMax = 1<<15 - 1

// parseHeaderFixed reads the header's fixed part and client id, and returns the bytes after them:
// the tagged fields (flexible versions only) and the body. The KafkaHandler's first validation.
func parseHeaderFixed(frame []byte) (requestHeader, []byte, error) {
	if len(frame) < 10 {
		return requestHeader{}, nil, fmt.Errorf("%w: %d bytes, a header takes at least 10 (api key, version, "+
			"correlation id, client id length)", ErrBadHeader, len(frame))
	}
	h := requestHeader{
		Key:           int16(binary.BigEndian.Uint16(frame[0:])),
		Version:       int16(binary.BigEndian.Uint16(frame[2:])),
		CorrelationID: int32(binary.BigEndian.Uint32(frame[4:])),
	}
	if h.Version < 0 {
		return requestHeader{}, nil, fmt.Errorf("%w: api version %d is negative", ErrBadHeader, h.Version)
	}
	n := int(int16(binary.BigEndian.Uint16(frame[8:])))
	rest := frame[10:]
	switch {
	case n == -1:
	case n < 0 || n > len(rest):
		return requestHeader{}, nil, fmt.Errorf("%w: client id length %d, %d bytes left", ErrBadHeader, n, len(rest))
	default:
		h.ClientID, rest = rest[:n:n], rest[n:]
	}
	return h, rest, nil
}

// skipTags skips a tagged-field section (a uvarint count, then per field a uvarint tag, a uvarint
// size and that many bytes) and returns what follows it. It checks every length against the bytes
// left and that tags ascend.
func skipTags(b []byte) ([]byte, error) {
	count, k := binary.Uvarint(b)
	if k <= 0 {
		return nil, fmt.Errorf("%w: tagged field count", ErrBadHeader)
	}
	b = b[k:]
	if count > uint64(len(b)/2) { // a field takes at least 2 bytes
		return nil, fmt.Errorf("%w: %d tagged fields in %d bytes", ErrBadHeader, count, len(b))
	}
	prev := int64(-1)
	for range count {
		tag, k := binary.Uvarint(b)
		if k <= 0 || tag > 1<<31 || int64(tag) <= prev {
			return nil, fmt.Errorf("%w: tagged field tag", ErrBadHeader)
		}
		prev = int64(tag)
		b = b[k:]
		size, k := binary.Uvarint(b)
		if k <= 0 || size > uint64(len(b)-k) {
			return nil, fmt.Errorf("%w: tagged field %d size", ErrBadHeader, tag)
		}
		b = b[k+int(size):]
	}
	return b, nil
}

// appendResponseHeader appends a response's size placeholder and header: the correlation id, and
// for a flexible response (header v1) an empty tagged-field section. finishResponse fills the size.
func appendResponseHeader(dst []byte, correlationID int32, flexible bool) []byte {
	dst = append(dst, 0, 0, 0, 0)
	dst = binary.BigEndian.AppendUint32(dst, uint32(correlationID))
	if flexible {
		dst = append(dst, 0)
	}
	return dst
}

// finishResponse writes the size of the response that starts at start of dst.
func finishResponse(dst []byte, start int) []byte {
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-4))
	return dst
}
