package wire

import (
	"bytes"
	"fmt"
	"unicode/utf8"

	"github.com/ringstream/ringstream/internal/assert"
)

// Batched stream creation and deletion (issue 25): one request names many streams and its reply
// carries one outcome per name, in the request's order, as Kafka's CreateTopics and DeleteTopics
// do. The names of a request are strictly ascending (bytewise), so a request holds no name twice and
// the node's metadata ops take them in the order they come; the client sorts them.

// StreamsPerRequestMax bounds the names of one CreateStreams or DeleteStreams request. At most 256
// bytes a name, a request stays under 256 KiB, well within any frame limit a node sets.
const StreamsPerRequestMax = 1000

// CreateStreams asks for many new streams with one set of copies and policy (command 86). Area:
// request_id u64 | copies u8 | policy u8 | confirm_count u8. Body: EntryCount names, each name_len u8 |
// name.
type CreateStreams struct {
	RequestID    uint64
	Copies       uint8
	Policy       ConfirmPolicy
	ConfirmCount uint8
	Names        StreamNames
}

// DeleteStreams asks for many streams to be deleted (command 88). Area: request_id u64. Body: the
// names as in CreateStreams.
type DeleteStreams struct {
	RequestID uint64
	Names     StreamNames
}

// StreamNames is a request's list of names, read in place. The decoder checked every name (the
// stream name rule, strictly ascending), so reading it cannot fail.
type StreamNames struct {
	raw   []byte
	count int
}

// Len is the number of names.
func (l StreamNames) Len() int { return l.count }

// All calls yield with each name in order until it returns false; a name aliases the frame's body.
func (l StreamNames) All(yield func(name []byte) bool) {
	r := NewBodyReader(l.raw)
	for range l.count {
		name := r.Bytes(int(r.U8()))
		assert.True(r.Err() == nil, "wire: stream names changed after they were checked")
		if !yield(name) {
			return
		}
	}
}

// StreamNamesOf packs names for a request. It returns the rule a name or the list breaks: a name
// outside StreamNameRule, names not strictly ascending, none, or more than StreamsPerRequestMax.
func StreamNamesOf(names [][]byte) (StreamNames, error) {
	var raw []byte
	for _, n := range names {
		raw = append(raw, uint8(len(n)))
		raw = append(raw, n...)
	}
	return decodeStreamNames(uint32(len(names)), raw)
}

// decodeStreamNames is the one check of a request's names: 1..StreamsPerRequestMax of them, each a
// valid stream name, strictly ascending, and nothing after the last.
func decodeStreamNames(count uint32, body []byte) (StreamNames, error) {
	if err := ValidateCount("names", uint64(count)); err != nil {
		return StreamNames{}, err
	}
	if count > StreamsPerRequestMax {
		return StreamNames{}, ruleError(CodeBadCount, CountRule, "%d names in one request (at most %d)", count, StreamsPerRequestMax)
	}
	r := NewBodyReader(body)
	var prev []byte
	for i := range int(count) {
		name := r.Bytes(int(r.U8()))
		if err := r.Err(); err != nil {
			return StreamNames{}, err
		}
		if err := validateName(name, "stream", CodeBadStreamName, StreamNameRule); err != nil {
			return StreamNames{}, err
		}
		if i > 0 && bytes.Compare(prev, name) >= 0 {
			return StreamNames{}, ruleError(CodeBadStreamName, StreamNameRule,
				"name %d (%q) is not after %q: a request's names are strictly ascending, each once", i, name, prev)
		}
		prev = name
	}
	if r.Remaining() != 0 {
		return StreamNames{}, ErrTrailingBytes
	}
	return StreamNames{raw: body, count: int(count)}, nil
}

const (
	createsCopies  = 8
	createsPolicy  = 9
	createsConfirm = 10
	createsAreaEnd = 11
	deletesAreaEnd = 8
)

// AppendCreateStreams appends a batched create request.
func AppendCreateStreams(dst []byte, from From, m *CreateStreams) []byte {
	assert.True(m.Names.count > 0, "wire: create streams without names")
	assert.True(ValidateCopies(m.Copies, 0) == nil, "wire: create streams with a copy count out of range")
	assert.True(ValidatePolicy(m.Policy, m.ConfirmCount, m.Copies) == nil, "wire: create streams with an invalid policy")
	h := Header{Command: CommandCreateStreams}
	put64(h.Area[:], clientRequestID, m.RequestID)
	h.Area[createsCopies] = m.Copies
	h.Area[createsPolicy] = uint8(m.Policy)
	h.Area[createsConfirm] = m.ConfirmCount
	dst, start := startFrame(dst, from, &h)
	dst = append(dst, m.Names.raw...)
	return endFrame(dst, start, uint32(m.Names.count))
}

// DecodeCreateStreams reads a parsed batched create request; the names alias body.
func DecodeCreateStreams(h *Header, body []byte) (CreateStreams, error) {
	if err := checkHeader(h, CommandCreateStreams, createsAreaEnd); err != nil {
		return CreateStreams{}, err
	}
	m := CreateStreams{
		RequestID:    get64(h.Area[:], clientRequestID),
		Copies:       h.Area[createsCopies],
		Policy:       ConfirmPolicy(h.Area[createsPolicy]),
		ConfirmCount: h.Area[createsConfirm],
	}
	if err := ValidateCopies(m.Copies, 0); err != nil {
		return CreateStreams{}, err
	}
	if err := ValidatePolicy(m.Policy, m.ConfirmCount, m.Copies); err != nil {
		return CreateStreams{}, err
	}
	names, err := decodeStreamNames(h.EntryCount, body)
	if err != nil {
		return CreateStreams{}, err
	}
	m.Names = names
	return m, nil
}

// AppendDeleteStreams appends a batched delete request.
func AppendDeleteStreams(dst []byte, from From, m *DeleteStreams) []byte {
	assert.True(m.Names.count > 0, "wire: delete streams without names")
	h := Header{Command: CommandDeleteStreams}
	put64(h.Area[:], clientRequestID, m.RequestID)
	dst, start := startFrame(dst, from, &h)
	dst = append(dst, m.Names.raw...)
	return endFrame(dst, start, uint32(m.Names.count))
}

// DecodeDeleteStreams reads a parsed batched delete request; the names alias body.
func DecodeDeleteStreams(h *Header, body []byte) (DeleteStreams, error) {
	if err := checkHeader(h, CommandDeleteStreams, deletesAreaEnd); err != nil {
		return DeleteStreams{}, err
	}
	names, err := decodeStreamNames(h.EntryCount, body)
	if err != nil {
		return DeleteStreams{}, err
	}
	return DeleteStreams{RequestID: get64(h.Area[:], clientRequestID), Names: names}, nil
}

// StreamOutcome is one name's outcome in a StreamsReply: Code 0 when it took effect (Stream and
// Incarnation name the stream created or deleted), else the code its single request would have been
// refused with, and a message saying why.
type StreamOutcome struct {
	Code        ErrorCode
	Stream      uint64
	Incarnation uint32
	Message     []byte
}

// OK reports whether the name's create or delete took effect.
func (o StreamOutcome) OK() bool { return o.Code == 0 }

// StreamsReply answers a CreateStreams (command 87) or DeleteStreams (command 89) request with one
// outcome per name, in the request's order. Area: request_id u64. Body: EntryCount outcomes, each
// code u16 | incarnation u32 | stream u64 | message_len u16 | message.
type StreamsReply struct {
	RequestID uint64
}

const (
	outcomeFixedSize    = 16
	streamsReplyAreaEnd = 8
)

// AppendCreateStreamsReply appends the reply to a batched create.
func AppendCreateStreamsReply(dst []byte, from From, m *StreamsReply, outcomes []StreamOutcome) []byte {
	return appendStreamsReply(dst, from, CommandCreateStreamsReply, m, outcomes)
}

// AppendDeleteStreamsReply appends the reply to a batched delete.
func AppendDeleteStreamsReply(dst []byte, from From, m *StreamsReply, outcomes []StreamOutcome) []byte {
	return appendStreamsReply(dst, from, CommandDeleteStreamsReply, m, outcomes)
}

func appendStreamsReply(dst []byte, from From, c Command, m *StreamsReply, outcomes []StreamOutcome) []byte {
	h := Header{Command: c}
	put64(h.Area[:], clientRequestID, m.RequestID)
	dst, start := startFrame(dst, from, &h)
	for i := range outcomes {
		o := &outcomes[i]
		assert.True(o.Code <= codeMax, "wire: stream outcome with an unknown code")
		assert.True(o.Code != 0 || o.Stream != 0, "wire: stream outcome took effect on stream 0")
		assert.True(len(o.Message) <= MessageSizeMax, "wire: stream outcome message too long")
		dst = AppendU16(dst, uint16(o.Code))
		dst = AppendU32(dst, o.Incarnation)
		dst = AppendU64(dst, o.Stream)
		dst = AppendU16(dst, uint16(len(o.Message)))
		dst = append(dst, o.Message...)
	}
	return endFrame(dst, start, uint32(len(outcomes)))
}

// DecodeCreateStreamsReply reads a parsed batched create reply and checks every outcome.
func DecodeCreateStreamsReply(h *Header, body []byte) (StreamsReply, []StreamOutcome, error) {
	return decodeStreamsReply(h, body, CommandCreateStreamsReply)
}

// DecodeDeleteStreamsReply reads a parsed batched delete reply and checks every outcome.
func DecodeDeleteStreamsReply(h *Header, body []byte) (StreamsReply, []StreamOutcome, error) {
	return decodeStreamsReply(h, body, CommandDeleteStreamsReply)
}

// decodeStreamsReply checks the outcomes (known codes, a stream for each that took effect, UTF-8
// messages within MessageSizeMax) and returns them; messages alias body.
func decodeStreamsReply(h *Header, body []byte, c Command) (StreamsReply, []StreamOutcome, error) {
	if err := checkHeader(h, c, streamsReplyAreaEnd); err != nil {
		return StreamsReply{}, nil, err
	}
	if h.EntryCount > StreamsPerRequestMax || uint64(h.EntryCount)*outcomeFixedSize > uint64(len(body)) {
		return StreamsReply{}, nil, ErrEntryCount
	}
	out := make([]StreamOutcome, 0, h.EntryCount)
	r := NewBodyReader(body)
	for range h.EntryCount {
		o := StreamOutcome{Code: ErrorCode(r.U16()), Incarnation: r.U32(), Stream: r.U64()}
		o.Message = r.Bytes(int(r.U16()))
		if err := r.Err(); err != nil {
			return StreamsReply{}, nil, err
		}
		switch {
		case o.Code > codeMax:
			return StreamsReply{}, nil, malformed(fmt.Sprintf("outcome code %d", o.Code))
		case o.Code == 0 && o.Stream == 0:
			return StreamsReply{}, nil, malformed("outcome on stream 0")
		case len(o.Message) > MessageSizeMax || !utf8.Valid(o.Message):
			return StreamsReply{}, nil, malformed("outcome message")
		}
		out = append(out, o)
	}
	if r.Remaining() != 0 {
		return StreamsReply{}, nil, ErrTrailingBytes
	}
	return StreamsReply{RequestID: get64(h.Area[:], clientRequestID)}, out, nil
}
