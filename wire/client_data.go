package wire

import (
	"math"

	"github.com/ringstream/ringstream/internal/assert"
)

// Client data requests and replies: produce, fetch and cursors. They address one stream through the
// header's Group (and Incarnation, 0 for the current one), so the node routes them to the owning shard.

// Produce appends one batch of records to a stream (command 66). ProducerID and Sequence identify the
// batch, so a retried batch is answered with its first offset instead of being appended again; producer
// id 0 opts out of that. Batch is opaque: the producer's possibly compressed records. Codec names the
// producer's compression (0 none; the node stores it in the batch header and never reads it). Format is
// the records' format (FormatValues or FormatRecords, FormatRule), stored as the batch header's version so
// a reader knows how to decode the payload; a sender that leaves it 0 (one that predates formats) means
// FormatValues, and DecodeProduce reads it so.
//
// Header: Group is the stream id, Incarnation the stream's incarnation or 0, EntryCount the number of
// records in Batch. Area: request_id u64 | producer_id u64 | sequence u64 | codec u8 | format u8. Body:
// the batch.
type Produce struct {
	RequestID   uint64
	Stream      uint64
	Incarnation uint32
	ProducerID  uint64
	Sequence    uint64
	Codec       uint8
	Format      uint8
	Count       uint32
	Batch       []byte
	// BatchSum is xxhash64 of Batch when BatchSummed: DecodeProduce takes it from the frame's body
	// checksum, which the frame's parser verified and which covers exactly Batch, so the owner stores
	// it as the batch's payload checksum without hashing the payload a second time.
	BatchSum    uint64
	BatchSummed bool
}

const (
	produceProducerID = 8
	produceSequence   = 16
	produceCodec      = 24
	produceFormat     = 25
	produceAreaEnd    = 26
)

// AppendProduce appends a produce request.
func AppendProduce(dst []byte, from From, m *Produce) []byte {
	assert.True(m.Stream != 0, "wire: produce to stream 0")
	assert.True(m.Count != 0, "wire: produce of no records")
	assert.True(len(m.Batch) != 0, "wire: produce of an empty batch")
	h := Header{Command: CommandProduce, Group: m.Stream, Incarnation: m.Incarnation}
	put64(h.Area[:], clientRequestID, m.RequestID)
	put64(h.Area[:], produceProducerID, m.ProducerID)
	put64(h.Area[:], produceSequence, m.Sequence)
	h.Area[produceCodec] = m.Codec
	h.Area[produceFormat] = m.Format
	dst, start := startFrame(dst, from, &h)
	dst = append(dst, m.Batch...)
	return endFrame(dst, start, m.Count)
}

// DecodeProduce reads a parsed produce request; Batch aliases body. h must be the header ParseFrame
// or FrameReader checked against body (its body checksum is taken as Batch's checksum).
func DecodeProduce(h *Header, body []byte) (Produce, error) {
	if err := checkHeader(h, CommandProduce, produceAreaEnd); err != nil {
		return Produce{}, err
	}
	m := Produce{
		RequestID:   get64(h.Area[:], clientRequestID),
		Stream:      h.Group,
		Incarnation: h.Incarnation,
		ProducerID:  get64(h.Area[:], produceProducerID),
		Sequence:    get64(h.Area[:], produceSequence),
		Codec:       h.Area[produceCodec],
		Format:      h.Area[produceFormat],
		Count:       h.EntryCount,
		Batch:       body,
		BatchSum:    h.ChecksumBody,
		BatchSummed: true,
	}
	if m.Format == 0 {
		m.Format = FormatValues
	}
	if err := ValidateFormat(m.Format); err != nil {
		return Produce{}, err
	}
	switch {
	case m.Stream == 0:
		return Produce{}, malformed("stream 0")
	case m.Count == 0 || len(body) == 0:
		return Produce{}, ErrEntryCount
	}
	return m, nil
}

// ProduceReply confirms a produce (command 67): the batch's records hold offsets BaseOffset to
// BaseOffset+Count-1 and are confirmed. Duplicate says the batch had been appended before and was not
// appended again. Area: request_id u64 | base_offset u64 | count u32 | epoch u32 | duplicate u8.
type ProduceReply struct {
	RequestID   uint64
	Stream      uint64
	Incarnation uint32
	Epoch       uint32
	BaseOffset  uint64
	Count       uint32
	Duplicate   bool
}

const (
	produceReplyBaseOffset = 8
	produceReplyCount      = 16
	produceReplyEpoch      = 20
	produceReplyDuplicate  = 24
	produceReplyAreaEnd    = 25
)

// AppendProduceReply appends a produce reply.
func AppendProduceReply(dst []byte, from From, m *ProduceReply) []byte {
	assert.True(m.Stream != 0, "wire: produce reply for stream 0")
	assert.True(m.Count != 0, "wire: produce reply for no records")
	h := Header{Command: CommandProduceReply, Group: m.Stream, Incarnation: m.Incarnation}
	put64(h.Area[:], clientRequestID, m.RequestID)
	put64(h.Area[:], produceReplyBaseOffset, m.BaseOffset)
	put32(h.Area[:], produceReplyCount, m.Count)
	put32(h.Area[:], produceReplyEpoch, m.Epoch)
	if m.Duplicate {
		h.Area[produceReplyDuplicate] = 1
	}
	dst, start := startFrame(dst, from, &h)
	return endFrame(dst, start, 0)
}

// DecodeProduceReply reads a parsed produce reply.
func DecodeProduceReply(h *Header, body []byte) (ProduceReply, error) {
	if err := checkHeader(h, CommandProduceReply, produceReplyAreaEnd); err != nil {
		return ProduceReply{}, err
	}
	if len(body) != 0 {
		return ProduceReply{}, ErrTrailingBytes
	}
	dup := h.Area[produceReplyDuplicate]
	m := ProduceReply{
		RequestID:   get64(h.Area[:], clientRequestID),
		Stream:      h.Group,
		Incarnation: h.Incarnation,
		Epoch:       get32(h.Area[:], produceReplyEpoch),
		BaseOffset:  get64(h.Area[:], produceReplyBaseOffset),
		Count:       get32(h.Area[:], produceReplyCount),
		Duplicate:   dup == 1,
	}
	switch {
	case m.Stream == 0:
		return ProduceReply{}, malformed("stream 0")
	case m.Count == 0:
		return ProduceReply{}, malformed("count 0")
	case m.BaseOffset > math.MaxUint64-uint64(m.Count):
		return ProduceReply{}, malformed("base_offset + count overflows")
	case dup > 1:
		return ProduceReply{}, malformed("duplicate")
	}
	return m, nil
}

// Fetch reads confirmed records from Offset on, up to BytesMax bytes of batches and RecordsMax records
// (0: no record limit) (command 68). When nothing is confirmed at Offset yet, the owner holds the
// request up to WaitMs milliseconds (a long poll; 0 answers at once) and answers as soon as records are
// confirmed there. Area: request_id u64 | offset u64 | bytes_max u32 | records_max u32 | wait_ms u32.
type Fetch struct {
	RequestID   uint64
	Stream      uint64
	Incarnation uint32
	Offset      uint64
	BytesMax    uint32
	RecordsMax  uint32
	WaitMs      uint32
}

const (
	fetchOffset     = 8
	fetchBytesMax   = 16
	fetchRecordsMax = 20
	fetchWaitMs     = 24
	fetchAreaEnd    = 28
)

// AppendFetch appends a fetch request.
func AppendFetch(dst []byte, from From, m *Fetch) []byte {
	assert.True(m.Stream != 0, "wire: fetch from stream 0")
	assert.True(m.BytesMax != 0, "wire: fetch of 0 bytes")
	h := Header{Command: CommandFetch, Group: m.Stream, Incarnation: m.Incarnation}
	put64(h.Area[:], clientRequestID, m.RequestID)
	put64(h.Area[:], fetchOffset, m.Offset)
	put32(h.Area[:], fetchBytesMax, m.BytesMax)
	put32(h.Area[:], fetchRecordsMax, m.RecordsMax)
	put32(h.Area[:], fetchWaitMs, m.WaitMs)
	dst, start := startFrame(dst, from, &h)
	return endFrame(dst, start, 0)
}

// DecodeFetch reads a parsed fetch request.
func DecodeFetch(h *Header, body []byte) (Fetch, error) {
	if err := checkHeader(h, CommandFetch, fetchAreaEnd); err != nil {
		return Fetch{}, err
	}
	if len(body) != 0 {
		return Fetch{}, ErrTrailingBytes
	}
	m := Fetch{
		RequestID:   get64(h.Area[:], clientRequestID),
		Stream:      h.Group,
		Incarnation: h.Incarnation,
		Offset:      get64(h.Area[:], fetchOffset),
		BytesMax:    get32(h.Area[:], fetchBytesMax),
		RecordsMax:  get32(h.Area[:], fetchRecordsMax),
		WaitMs:      get32(h.Area[:], fetchWaitMs),
	}
	if m.Stream == 0 {
		return Fetch{}, malformed("stream 0")
	}
	if err := ValidateSize("bytes_max", uint64(m.BytesMax)); err != nil {
		return Fetch{}, err
	}
	return m, nil
}

// FetchReply carries confirmed records (command 69): Count records from BaseOffset in Batches, opaque,
// and the stream's confirmed tail. An empty reply (Count 0) means nothing is confirmed at the offset yet.
// Header: EntryCount is Count. Area: request_id u64 | base_offset u64 | confirmed_tail u64.
type FetchReply struct {
	RequestID     uint64
	Stream        uint64
	Incarnation   uint32
	BaseOffset    uint64
	Count         uint32
	ConfirmedTail uint64
	Batches       []byte
}

const (
	fetchReplyBaseOffset    = 8
	fetchReplyConfirmedTail = 16
	fetchReplyAreaEnd       = 24
)

// AppendFetchReply appends a fetch reply.
func AppendFetchReply(dst []byte, from From, m *FetchReply) []byte {
	assert.True(m.Stream != 0, "wire: fetch reply for stream 0")
	assert.True((m.Count == 0) == (len(m.Batches) == 0), "wire: fetch reply count disagrees with its batches")
	h := Header{Command: CommandFetchReply, Group: m.Stream, Incarnation: m.Incarnation}
	put64(h.Area[:], clientRequestID, m.RequestID)
	put64(h.Area[:], fetchReplyBaseOffset, m.BaseOffset)
	put64(h.Area[:], fetchReplyConfirmedTail, m.ConfirmedTail)
	dst, start := startFrame(dst, from, &h)
	dst = append(dst, m.Batches...)
	return endFrame(dst, start, m.Count)
}

// DecodeFetchReply reads a parsed fetch reply; Batches aliases body.
func DecodeFetchReply(h *Header, body []byte) (FetchReply, error) {
	if err := checkHeader(h, CommandFetchReply, fetchReplyAreaEnd); err != nil {
		return FetchReply{}, err
	}
	m := FetchReply{
		RequestID:     get64(h.Area[:], clientRequestID),
		Stream:        h.Group,
		Incarnation:   h.Incarnation,
		BaseOffset:    get64(h.Area[:], fetchReplyBaseOffset),
		Count:         h.EntryCount,
		ConfirmedTail: get64(h.Area[:], fetchReplyConfirmedTail),
		Batches:       nilIfEmpty(body),
	}
	switch {
	case m.Stream == 0:
		return FetchReply{}, malformed("stream 0")
	case (m.Count == 0) != (len(body) == 0):
		return FetchReply{}, ErrEntryCount
	case m.BaseOffset > math.MaxUint64-uint64(m.Count):
		return FetchReply{}, malformed("base_offset + count overflows")
	case m.BaseOffset+uint64(m.Count) > m.ConfirmedTail:
		return FetchReply{}, malformed("records past the confirmed tail")
	}
	return m, nil
}

// CursorRequest commits a consumer's cursor (command 70, Offset is the next offset to read) or asks for
// it (command 72, Offset 0). Area: request_id u64 | offset u64. Body: the consumer name.
type CursorRequest struct {
	RequestID   uint64
	Stream      uint64
	Incarnation uint32
	Consumer    []byte
	Offset      uint64
}

const (
	cursorOffset  = 8
	cursorAreaEnd = 16
)

// AppendCommitCursor appends a commit-cursor request.
func AppendCommitCursor(dst []byte, from From, m *CursorRequest) []byte {
	return appendCursorRequest(dst, from, CommandCommitCursor, m)
}

// AppendGetCursor appends a get-cursor request; m.Offset must be 0.
func AppendGetCursor(dst []byte, from From, m *CursorRequest) []byte {
	assert.True(m.Offset == 0, "wire: get cursor with an offset")
	return appendCursorRequest(dst, from, CommandGetCursor, m)
}

func appendCursorRequest(dst []byte, from From, c Command, m *CursorRequest) []byte {
	assert.True(m.Stream != 0, "wire: cursor request for stream 0")
	assert.True(validConsumerName(m.Consumer), "wire: cursor request with an invalid consumer name")
	h := Header{Command: c, Group: m.Stream, Incarnation: m.Incarnation}
	put64(h.Area[:], clientRequestID, m.RequestID)
	put64(h.Area[:], cursorOffset, m.Offset)
	dst, start := startFrame(dst, from, &h)
	dst = append(dst, m.Consumer...)
	return endFrame(dst, start, 0)
}

// DecodeCommitCursor reads a parsed commit-cursor request; Consumer aliases body.
func DecodeCommitCursor(h *Header, body []byte) (CursorRequest, error) {
	return decodeCursorRequest(h, body, CommandCommitCursor, cursorAreaEnd)
}

// DecodeGetCursor reads a parsed get-cursor request; Consumer aliases body.
func DecodeGetCursor(h *Header, body []byte) (CursorRequest, error) {
	return decodeCursorRequest(h, body, CommandGetCursor, cursorOffset)
}

func decodeCursorRequest(h *Header, body []byte, c Command, areaEnd int) (CursorRequest, error) {
	if err := checkHeader(h, c, areaEnd); err != nil {
		return CursorRequest{}, err
	}
	m := CursorRequest{
		RequestID:   get64(h.Area[:], clientRequestID),
		Stream:      h.Group,
		Incarnation: h.Incarnation,
		Consumer:    body,
		Offset:      get64(h.Area[:], cursorOffset),
	}
	if m.Stream == 0 {
		return CursorRequest{}, malformed("stream 0")
	}
	if err := validateName(body, "consumer", CodeBadConsumerName, ConsumerNameRule); err != nil {
		return CursorRequest{}, err
	}
	return m, nil
}

// CursorReply answers a commit-cursor (command 71) or a get-cursor (command 73) request with the
// consumer's offset. Found is false when a get finds no cursor (Offset is then 0); a commit reply is
// always found. Area: request_id u64 | offset u64 | found u8.
type CursorReply struct {
	RequestID   uint64
	Stream      uint64
	Incarnation uint32
	Offset      uint64
	Found       bool
}

const (
	cursorReplyOffset  = 8
	cursorReplyFound   = 16
	cursorReplyAreaEnd = 17
)

// AppendCommitCursorReply appends a commit-cursor reply; m.Found must be true.
func AppendCommitCursorReply(dst []byte, from From, m *CursorReply) []byte {
	assert.True(m.Found, "wire: commit cursor reply without a cursor")
	return appendCursorReply(dst, from, CommandCommitCursorReply, m)
}

// AppendGetCursorReply appends a get-cursor reply.
func AppendGetCursorReply(dst []byte, from From, m *CursorReply) []byte {
	return appendCursorReply(dst, from, CommandGetCursorReply, m)
}

func appendCursorReply(dst []byte, from From, c Command, m *CursorReply) []byte {
	assert.True(m.Stream != 0, "wire: cursor reply for stream 0")
	assert.True(m.Found || m.Offset == 0, "wire: cursor reply with an offset but no cursor")
	h := Header{Command: c, Group: m.Stream, Incarnation: m.Incarnation}
	put64(h.Area[:], clientRequestID, m.RequestID)
	put64(h.Area[:], cursorReplyOffset, m.Offset)
	if m.Found {
		h.Area[cursorReplyFound] = 1
	}
	dst, start := startFrame(dst, from, &h)
	return endFrame(dst, start, 0)
}

// DecodeCommitCursorReply reads a parsed commit-cursor reply.
func DecodeCommitCursorReply(h *Header, body []byte) (CursorReply, error) {
	m, err := decodeCursorReply(h, body, CommandCommitCursorReply)
	if err == nil && !m.Found {
		return CursorReply{}, malformed("commit cursor reply without a cursor")
	}
	return m, err
}

// DecodeGetCursorReply reads a parsed get-cursor reply.
func DecodeGetCursorReply(h *Header, body []byte) (CursorReply, error) {
	return decodeCursorReply(h, body, CommandGetCursorReply)
}

func decodeCursorReply(h *Header, body []byte, c Command) (CursorReply, error) {
	if err := checkHeader(h, c, cursorReplyAreaEnd); err != nil {
		return CursorReply{}, err
	}
	if len(body) != 0 {
		return CursorReply{}, ErrTrailingBytes
	}
	found := h.Area[cursorReplyFound]
	m := CursorReply{
		RequestID:   get64(h.Area[:], clientRequestID),
		Stream:      h.Group,
		Incarnation: h.Incarnation,
		Offset:      get64(h.Area[:], cursorReplyOffset),
		Found:       found == 1,
	}
	switch {
	case m.Stream == 0:
		return CursorReply{}, malformed("stream 0")
	case found > 1:
		return CursorReply{}, malformed("found")
	case !m.Found && m.Offset != 0:
		return CursorReply{}, malformed("offset without a cursor")
	}
	return m, nil
}
