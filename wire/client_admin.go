package wire

import (
	"unicode/utf8"

	"github.com/ringstream/ringstream/internal/assert"
)

// Client requests and replies (commands 60 to 99). Every one carries the client's request id in the first
// 8 bytes of its per-command area, and a reply echoes it. Requests about one stream (produce, fetch,
// cursors) carry the stream id in the header's Group, so the node routes them to the owning shard from
// the header alone; Incarnation 0 there means "the current incarnation". A client sends sender 0.

const (
	// NameSizeMax is the longest stream or consumer name in bytes.
	NameSizeMax = 255
	// MessageSizeMax is the longest error message in bytes.
	MessageSizeMax = 4096

	clientRequestID = 0 // every client frame: request_id u64 at area offset 0
)

// ConfirmPolicy is how many copies must hold a record durably before it is confirmed.
type ConfirmPolicy uint8

// Confirm policies (the stream-failover spec's "One rule for W").
const (
	PolicyAll      ConfirmPolicy = 1 // every copy (local_durable)
	PolicyMajority ConfirmPolicy = 2 // a majority of the copies (majority_durable, the default)
	PolicyCount    ConfirmPolicy = 3 // ConfirmCount copies, capped at the copy count
)

func (p ConfirmPolicy) valid() bool { return p >= PolicyAll && p <= PolicyCount }

// validPolicy reports whether a policy and its count go together (PolicyRule, the copy count unknown).
func validPolicy(p ConfirmPolicy, count uint8) bool { return ValidatePolicy(p, count, 0) == nil }

// CreateStream asks for a new stream (command 60). Area: request_id u64 | copies u8 | policy u8 |
// confirm_count u8. Body: the name.
type CreateStream struct {
	RequestID    uint64
	Name         []byte
	Copies       uint8 // E, at least 1
	Policy       ConfirmPolicy
	ConfirmCount uint8 // only with PolicyCount
}

const (
	createCopies  = 8
	createPolicy  = 9
	createConfirm = 10
	createAreaEnd = 11
)

// AppendCreateStream appends a create-stream request.
func AppendCreateStream(dst []byte, from From, m *CreateStream) []byte {
	assert.True(validStreamName(m.Name), "wire: create stream with an invalid name")
	assert.True(ValidateCopies(m.Copies, 0) == nil, "wire: create stream with a copy count out of range")
	assert.True(ValidatePolicy(m.Policy, m.ConfirmCount, m.Copies) == nil, "wire: create stream with an invalid policy")
	h := Header{Command: CommandCreateStream}
	put64(h.Area[:], clientRequestID, m.RequestID)
	h.Area[createCopies] = m.Copies
	h.Area[createPolicy] = uint8(m.Policy)
	h.Area[createConfirm] = m.ConfirmCount
	dst, start := startFrame(dst, from, &h)
	dst = append(dst, m.Name...)
	return endFrame(dst, start, 0)
}

// DecodeCreateStream reads a parsed create-stream request; Name aliases body.
func DecodeCreateStream(h *Header, body []byte) (CreateStream, error) {
	if err := checkHeader(h, CommandCreateStream, createAreaEnd); err != nil {
		return CreateStream{}, err
	}
	m := CreateStream{
		RequestID:    get64(h.Area[:], clientRequestID),
		Name:         body,
		Copies:       h.Area[createCopies],
		Policy:       ConfirmPolicy(h.Area[createPolicy]),
		ConfirmCount: h.Area[createConfirm],
	}
	if err := validateName(body, "stream", CodeBadStreamName, StreamNameRule); err != nil {
		return CreateStream{}, err
	}
	if err := ValidateCopies(m.Copies, 0); err != nil {
		return CreateStream{}, err
	}
	if err := ValidatePolicy(m.Policy, m.ConfirmCount, m.Copies); err != nil {
		return CreateStream{}, err
	}
	return m, nil
}

// StreamIDReply answers a create-stream (command 61) or a delete-stream (command 63) request with the
// stream's id and incarnation. Area: request_id u64 | stream u64 | incarnation u32. Empty body.
type StreamIDReply struct {
	RequestID   uint64
	Stream      uint64
	Incarnation uint32
}

const (
	idReplyStream      = 8
	idReplyIncarnation = 16
	idReplyAreaEnd     = 20
)

// AppendCreateStreamReply appends the reply to a create-stream request.
func AppendCreateStreamReply(dst []byte, from From, m *StreamIDReply) []byte {
	return appendStreamIDReply(dst, from, CommandCreateStreamReply, m)
}

// AppendDeleteStreamReply appends the reply to a delete-stream request.
func AppendDeleteStreamReply(dst []byte, from From, m *StreamIDReply) []byte {
	return appendStreamIDReply(dst, from, CommandDeleteStreamReply, m)
}

func appendStreamIDReply(dst []byte, from From, c Command, m *StreamIDReply) []byte {
	assert.True(m.Stream != 0, "wire: stream reply for stream 0")
	h := Header{Command: c}
	put64(h.Area[:], clientRequestID, m.RequestID)
	put64(h.Area[:], idReplyStream, m.Stream)
	put32(h.Area[:], idReplyIncarnation, m.Incarnation)
	dst, start := startFrame(dst, from, &h)
	return endFrame(dst, start, 0)
}

// DecodeCreateStreamReply reads a parsed create-stream reply.
func DecodeCreateStreamReply(h *Header, body []byte) (StreamIDReply, error) {
	return decodeStreamIDReply(h, body, CommandCreateStreamReply)
}

// DecodeDeleteStreamReply reads a parsed delete-stream reply.
func DecodeDeleteStreamReply(h *Header, body []byte) (StreamIDReply, error) {
	return decodeStreamIDReply(h, body, CommandDeleteStreamReply)
}

func decodeStreamIDReply(h *Header, body []byte, c Command) (StreamIDReply, error) {
	if err := checkHeader(h, c, idReplyAreaEnd); err != nil {
		return StreamIDReply{}, err
	}
	if len(body) != 0 {
		return StreamIDReply{}, ErrTrailingBytes
	}
	m := StreamIDReply{
		RequestID:   get64(h.Area[:], clientRequestID),
		Stream:      get64(h.Area[:], idReplyStream),
		Incarnation: get32(h.Area[:], idReplyIncarnation),
	}
	if m.Stream == 0 {
		return StreamIDReply{}, malformed("stream 0")
	}
	return m, nil
}

// StreamNameRequest names one stream: a delete-stream request (command 62). Area: request_id u64.
// Body: the name.
type StreamNameRequest struct {
	RequestID uint64
	Name      []byte
}

// AppendDeleteStream appends a delete-stream request.
func AppendDeleteStream(dst []byte, from From, m *StreamNameRequest) []byte {
	return appendStreamNameRequest(dst, from, CommandDeleteStream, m)
}

func appendStreamNameRequest(dst []byte, from From, c Command, m *StreamNameRequest) []byte {
	assert.True(validStreamName(m.Name), "wire: stream request with an invalid name")
	h := Header{Command: c}
	put64(h.Area[:], clientRequestID, m.RequestID)
	dst, start := startFrame(dst, from, &h)
	dst = append(dst, m.Name...)
	return endFrame(dst, start, 0)
}

// DecodeDeleteStream reads a parsed delete-stream request; Name aliases body.
func DecodeDeleteStream(h *Header, body []byte) (StreamNameRequest, error) {
	return decodeStreamNameRequest(h, body, CommandDeleteStream)
}

// LookupStream asks who owns the stream named Name (command 74). With AfterEpoch above 0 it is a long
// poll: the metadata primary answers once the stream's assignment is newer than AfterEpoch and has an
// owner (no recovery pending), or when WaitMs has passed (then with what it holds), whichever comes
// first; a client that lost the owner of epoch E asks for one after E and learns the new owner the
// moment it commits, instead of polling. The node caps the wait (clientreq's lookupWaitMax).
// Area: request_id u64 | after_epoch u32 | wait_ms u32. Body: the name.
type LookupStream struct {
	RequestID  uint64
	Name       []byte
	AfterEpoch uint32
	WaitMs     uint32
}

const (
	lookupAfterEpoch = 8
	lookupWaitMs     = 12
	lookupReqAreaEnd = 16
)

// AppendLookupStream appends a request for a stream's owner and metadata.
func AppendLookupStream(dst []byte, from From, m *LookupStream) []byte {
	assert.True(validStreamName(m.Name), "wire: lookup with an invalid name")
	h := Header{Command: CommandLookupStream}
	put64(h.Area[:], clientRequestID, m.RequestID)
	put32(h.Area[:], lookupAfterEpoch, m.AfterEpoch)
	put32(h.Area[:], lookupWaitMs, m.WaitMs)
	dst, start := startFrame(dst, from, &h)
	dst = append(dst, m.Name...)
	return endFrame(dst, start, 0)
}

// DecodeLookupStream reads a parsed lookup request; Name aliases body.
func DecodeLookupStream(h *Header, body []byte) (LookupStream, error) {
	if err := checkHeader(h, CommandLookupStream, lookupReqAreaEnd); err != nil {
		return LookupStream{}, err
	}
	if err := validateName(body, "stream", CodeBadStreamName, StreamNameRule); err != nil {
		return LookupStream{}, err
	}
	return LookupStream{RequestID: get64(h.Area[:], clientRequestID), Name: body,
		AfterEpoch: get32(h.Area[:], lookupAfterEpoch), WaitMs: get32(h.Area[:], lookupWaitMs)}, nil
}

func decodeStreamNameRequest(h *Header, body []byte, c Command) (StreamNameRequest, error) {
	if err := checkHeader(h, c, 8); err != nil {
		return StreamNameRequest{}, err
	}
	if err := validateName(body, "stream", CodeBadStreamName, StreamNameRule); err != nil {
		return StreamNameRequest{}, err
	}
	return StreamNameRequest{RequestID: get64(h.Area[:], clientRequestID), Name: body}, nil
}

// LookupStreamReply says who owns a stream now (command 75). Owner 0 means no owner right now (a
// recovery is pending); then OwnerAddr is empty. Area: request_id u64 | stream u64 | incarnation u32 |
// epoch u32 | owner u16. Body: the owner's client address, host:port.
type LookupStreamReply struct {
	RequestID   uint64
	Stream      uint64
	Incarnation uint32
	Epoch       uint32
	Owner       uint16
	OwnerAddr   []byte
}

const (
	lookupStream      = 8
	lookupIncarnation = 16
	lookupEpoch       = 20
	lookupOwner       = 24
	lookupAreaEnd     = 26
)

// AppendLookupStreamReply appends the reply to a lookup request.
func AppendLookupStreamReply(dst []byte, from From, m *LookupStreamReply) []byte {
	assert.True(m.Stream != 0, "wire: lookup reply for stream 0")
	assert.True(len(m.OwnerAddr) <= NameSizeMax, "wire: lookup reply address too long")
	assert.True(m.Owner != 0 || len(m.OwnerAddr) == 0, "wire: lookup reply address without an owner")
	h := Header{Command: CommandLookupStreamReply}
	put64(h.Area[:], clientRequestID, m.RequestID)
	put64(h.Area[:], lookupStream, m.Stream)
	put32(h.Area[:], lookupIncarnation, m.Incarnation)
	put32(h.Area[:], lookupEpoch, m.Epoch)
	put16(h.Area[:], lookupOwner, m.Owner)
	dst, start := startFrame(dst, from, &h)
	dst = append(dst, m.OwnerAddr...)
	return endFrame(dst, start, 0)
}

// DecodeLookupStreamReply reads a parsed lookup reply; OwnerAddr aliases body.
func DecodeLookupStreamReply(h *Header, body []byte) (LookupStreamReply, error) {
	if err := checkHeader(h, CommandLookupStreamReply, lookupAreaEnd); err != nil {
		return LookupStreamReply{}, err
	}
	m := LookupStreamReply{
		RequestID:   get64(h.Area[:], clientRequestID),
		Stream:      get64(h.Area[:], lookupStream),
		Incarnation: get32(h.Area[:], lookupIncarnation),
		Epoch:       get32(h.Area[:], lookupEpoch),
		Owner:       get16(h.Area[:], lookupOwner),
		OwnerAddr:   nilIfEmpty(body),
	}
	switch {
	case m.Stream == 0:
		return LookupStreamReply{}, malformed("stream 0")
	case len(body) > NameSizeMax || !utf8.Valid(body):
		return LookupStreamReply{}, malformed("owner address")
	case m.Owner == 0 && len(body) != 0:
		return LookupStreamReply{}, malformed("owner address without an owner")
	}
	return m, nil
}

// ListStreams asks for up to Limit streams with ids above After, in id order (command 64). Area:
// request_id u64 | after u64 | limit u32. Empty body.
type ListStreams struct {
	RequestID uint64
	After     uint64
	Limit     uint32
}

const (
	listAfter   = 8
	listLimit   = 16
	listAreaEnd = 20
)

// AppendListStreams appends a list request.
func AppendListStreams(dst []byte, from From, m *ListStreams) []byte {
	assert.True(m.Limit != 0, "wire: list streams with limit 0")
	h := Header{Command: CommandListStreams}
	put64(h.Area[:], clientRequestID, m.RequestID)
	put64(h.Area[:], listAfter, m.After)
	put32(h.Area[:], listLimit, m.Limit)
	dst, start := startFrame(dst, from, &h)
	return endFrame(dst, start, 0)
}

// DecodeListStreams reads a parsed list request.
func DecodeListStreams(h *Header, body []byte) (ListStreams, error) {
	if err := checkHeader(h, CommandListStreams, listAreaEnd); err != nil {
		return ListStreams{}, err
	}
	if len(body) != 0 {
		return ListStreams{}, ErrTrailingBytes
	}
	m := ListStreams{
		RequestID: get64(h.Area[:], clientRequestID),
		After:     get64(h.Area[:], listAfter),
		Limit:     get32(h.Area[:], listLimit),
	}
	if err := ValidateCount("limit", uint64(m.Limit)); err != nil {
		return ListStreams{}, err
	}
	return m, nil
}

// StreamInfo describes one stream in a list reply. Wire layout: stream u64 | incarnation u32 | copies u8
// | policy u8 | confirm_count u8 | name_len u8 | name [name_len].
type StreamInfo struct {
	Stream       uint64
	Incarnation  uint32
	Copies       uint8
	Policy       ConfirmPolicy
	ConfirmCount uint8
	Name         []byte
}

const streamInfoFixedSize = 16

// ListStreamsReply answers a list request (command 65). More says streams past the last one listed
// remain. Area: request_id u64 | more u8. Body: EntryCount StreamInfo entries.
type ListStreamsReply struct {
	RequestID uint64
	More      bool
}

const (
	listReplyMore    = 8
	listReplyAreaEnd = 9
)

// AppendListStreamsReply appends a list reply carrying streams.
func AppendListStreamsReply(dst []byte, from From, m *ListStreamsReply, streams []StreamInfo) []byte {
	h := Header{Command: CommandListStreamsReply}
	put64(h.Area[:], clientRequestID, m.RequestID)
	if m.More {
		h.Area[listReplyMore] = 1
	}
	dst, start := startFrame(dst, from, &h)
	for i := range streams {
		s := &streams[i]
		assert.True(s.Stream != 0, "wire: stream info for stream 0")
		assert.True(validStreamName(s.Name), "wire: stream info with an invalid name")
		assert.True(validPolicy(s.Policy, s.ConfirmCount), "wire: stream info with an invalid policy")
		dst = AppendU64(dst, s.Stream)
		dst = AppendU32(dst, s.Incarnation)
		dst = append(dst, s.Copies, uint8(s.Policy), s.ConfirmCount, uint8(len(s.Name)))
		dst = append(dst, s.Name...)
	}
	return endFrame(dst, start, uint32(len(streams)))
}

// DecodeListStreamsReply reads a parsed list reply and checks every entry; the list aliases body.
func DecodeListStreamsReply(h *Header, body []byte) (ListStreamsReply, StreamInfos, error) {
	if err := checkHeader(h, CommandListStreamsReply, listReplyAreaEnd); err != nil {
		return ListStreamsReply{}, StreamInfos{}, err
	}
	more := h.Area[listReplyMore]
	if more > 1 {
		return ListStreamsReply{}, StreamInfos{}, malformed("more")
	}
	if uint64(h.EntryCount)*streamInfoFixedSize > uint64(len(body)) {
		return ListStreamsReply{}, StreamInfos{}, ErrEntryCount
	}
	list := StreamInfos{raw: body, count: int(h.EntryCount)}
	check := list
	for {
		_, ok, err := check.next()
		if err != nil {
			return ListStreamsReply{}, StreamInfos{}, err
		}
		if !ok {
			break
		}
	}
	if check.off != len(body) {
		return ListStreamsReply{}, StreamInfos{}, ErrTrailingBytes
	}
	return ListStreamsReply{RequestID: get64(h.Area[:], clientRequestID), More: more == 1}, list, nil
}

// StreamInfos iterates a list reply's entries in place; the decoder already checked them all.
type StreamInfos struct {
	raw   []byte
	off   int
	count int
	read  int
}

// Len is the number of entries.
func (l *StreamInfos) Len() int { return l.count }

// Next returns the next entry, or false after the last. Name aliases the frame's body.
func (l *StreamInfos) Next() (StreamInfo, bool) {
	s, ok, err := l.next()
	assert.True(err == nil, "wire: stream list changed after it was checked")
	return s, ok
}

func (l *StreamInfos) next() (StreamInfo, bool, error) {
	if l.read == l.count {
		return StreamInfo{}, false, nil
	}
	r := NewBodyReader(l.raw[l.off:])
	s := StreamInfo{Stream: r.U64(), Incarnation: r.U32(), Copies: r.U8(), Policy: ConfirmPolicy(r.U8()), ConfirmCount: r.U8()}
	s.Name = r.Bytes(int(r.U8()))
	if err := r.Err(); err != nil {
		return StreamInfo{}, false, err
	}
	switch {
	case s.Stream == 0:
		return StreamInfo{}, false, malformed("stream 0")
	case !validStreamName(s.Name):
		return StreamInfo{}, false, malformed("stream name")
	case s.Copies == 0:
		return StreamInfo{}, false, malformed("copies 0")
	case !validPolicy(s.Policy, s.ConfirmCount):
		return StreamInfo{}, false, malformed("confirm policy")
	}
	l.off += streamInfoFixedSize + len(s.Name)
	l.read++
	return s, true, nil
}

// ErrorCode says why a node refused a client request.
type ErrorCode uint16

// Error codes of an error reply.
const (
	CodeNotOwner       ErrorCode = 1 // this node does not own the stream; look it up again
	CodeUnknownStream  ErrorCode = 2 // no stream of that name, id or incarnation
	CodeStreamExists   ErrorCode = 3 // create of a name already taken
	CodeInvalidRequest ErrorCode = 4 // the request breaks a rule (its message says which)
	CodeUnavailable    ErrorCode = 5 // the stream is recovering or lacks copies to confirm; retry later
	CodeFenced         ErrorCode = 6 // the copy is sealed at a newer epoch
	CodeOverloaded     ErrorCode = 7 // a bounded queue is full; retry later
	CodeInternal       ErrorCode = 8 // a fault on the node (storage error); see its log
	// Stream copy refusals (engine/stream), each with one meaning.
	CodeStaleIncarnation ErrorCode = 9  // the request names an older incarnation of the stream
	CodeBatchTooLarge    ErrorCode = 10 // the produced batch is above the stream's batch limit
	CodeSequenceGap      ErrorCode = 11 // the producer's sequence skips ahead of (or falls behind) what was appended
	CodeLogFailed        ErrorCode = 12 // the copy's log failed (write or fsync error); it serves nothing until reopened
	// 13 is left to the storage work of another change.

	// CodeNotYet: a passing state on the node; the same request succeeds once it passes, so a client
	// retries it within its bounds. The copy of a new incarnation is being created or opened, the
	// stream's assignment is moving, the metadata group is electing a primary.
	CodeNotYet ErrorCode = 14
	// Refusals of a value that breaks one of the rules of rules.go, each naming its rule. Final: the
	// same request is refused again.
	CodeBadStreamName   ErrorCode = 15 // StreamNameRule
	CodeBadConsumerName ErrorCode = 16 // ConsumerNameRule
	CodeBadCopies       ErrorCode = 17 // CopiesRule
	CodeBadPolicy       ErrorCode = 18 // PolicyRule
	CodeBadCount        ErrorCode = 19 // CountRule
	CodeBadSize         ErrorCode = 20 // SizeRule
	CodeBadFormat       ErrorCode = 21 // FormatRule
	// 22 is left to the offset-for-time request.

	// CodeProducerFenced: a Kafka producer's batch carries a producer epoch older than the one of
	// that producer's last batch in the stream (a newer session of the producer fenced it). Final.
	CodeProducerFenced ErrorCode = 23

	codeMax = CodeProducerFenced
)

// ErrorReply refuses a client request (command 99). Stream is the stream the request addressed, or 0.
// Owner is the node that owns the stream, with CodeNotOwner when the refusing node knows it (else 0).
// Area: request_id u64 | code u16 | owner u16. Body: a human-readable message, UTF-8, at most
// MessageSizeMax bytes.
type ErrorReply struct {
	RequestID uint64
	Stream    uint64
	Code      ErrorCode
	Owner     uint16
	Message   []byte
}

const (
	errorCode    = 8
	errorOwner   = 10
	errorAreaEnd = 12
)

// AppendErrorReply appends an error reply.
func AppendErrorReply(dst []byte, from From, m *ErrorReply) []byte {
	assert.True(m.Code >= 1 && m.Code <= codeMax, "wire: error reply with an unknown code")
	assert.True(len(m.Message) <= MessageSizeMax, "wire: error reply message too long")
	assert.True(m.Owner == 0 || m.Code == CodeNotOwner, "wire: error reply names an owner without CodeNotOwner")
	h := Header{Command: CommandErrorReply, Group: m.Stream}
	put64(h.Area[:], clientRequestID, m.RequestID)
	put16(h.Area[:], errorCode, uint16(m.Code))
	put16(h.Area[:], errorOwner, m.Owner)
	dst, start := startFrame(dst, from, &h)
	dst = append(dst, m.Message...)
	return endFrame(dst, start, 0)
}

// DecodeErrorReply reads a parsed error reply; Message aliases body.
func DecodeErrorReply(h *Header, body []byte) (ErrorReply, error) {
	if err := checkHeader(h, CommandErrorReply, errorAreaEnd); err != nil {
		return ErrorReply{}, err
	}
	m := ErrorReply{
		RequestID: get64(h.Area[:], clientRequestID),
		Stream:    h.Group,
		Code:      ErrorCode(get16(h.Area[:], errorCode)),
		Owner:     get16(h.Area[:], errorOwner),
		Message:   nilIfEmpty(body),
	}
	switch {
	case m.Code < 1 || m.Code > codeMax:
		return ErrorReply{}, malformed("error code")
	case m.Owner != 0 && m.Code != CodeNotOwner:
		return ErrorReply{}, malformed("owner without CodeNotOwner")
	case len(body) > MessageSizeMax || !utf8.Valid(body):
		return ErrorReply{}, malformed("error message")
	}
	return m, nil
}
