package wire

import (
	"math"

	"github.com/ringstream/ringstream/internal/assert"
)

// LogKind says which of a stream copy's two logs a prepare carries.
type LogKind uint8

// The two logs of a stream copy.
const (
	LogRecords LogKind = 1 // the record log
	LogCursors LogKind = 2 // the cursor event log
)

func (k LogKind) valid() bool { return k == LogRecords || k == LogCursors }

// StreamPrepare carries a run of batches from a stream's owner to one follower (command 40). Batches
// are opaque here: the bytes the segment stores, passed through without a copy. PrevEpoch is the epoch
// of the record just before BaseOffset (0 when BaseOffset is 0); the follower refuses the prepare when
// its own record there has another epoch (log matching, DESIGN.md section 8).
//
// Header: Group is the stream id, Incarnation the stream's incarnation, EntryCount the number of
// records (or cursor events) in Batches. Area: epoch u32 | prev_epoch u32 | base_offset u64 | log u8 |
// reserved [7] | confirmed_tail u64.
type StreamPrepare struct {
	Stream        uint64
	Incarnation   uint32
	Epoch         uint32 // the owner's epoch; at least 1
	PrevEpoch     uint32
	Log           LogKind
	BaseOffset    uint64
	Count         uint32 // records (or cursor events) in Batches
	ConfirmedTail uint64 // the owner's confirmed tail when it sent this
	Batches       []byte
}

const (
	prepareEpoch         = 0
	preparePrevEpoch     = 4
	prepareBaseOffset    = 8
	prepareLog           = 16
	prepareConfirmedTail = 24
	prepareAreaEnd       = 32
)

// AppendStreamPrepare appends a stream prepare frame to dst.
func AppendStreamPrepare(dst []byte, from From, m *StreamPrepare) []byte {
	h := prepareHeader(m)
	dst, start := startFrame(dst, from, &h)
	dst = append(dst, m.Batches...)
	return endFrame(dst, start, m.Count)
}

// AppendStreamPrepareHeader appends only the header of the stream prepare frame whose body is
// m.Batches, for a sender that sends the header and the batches as two slices (a shard's SendData):
// the batches are read for the body checksum, never copied.
func AppendStreamPrepareHeader(dst []byte, from From, m *StreamPrepare) []byte {
	h := prepareHeader(m)
	dst, start := startFrame(dst, from, &h)
	EndHeader(dst[start:], m.Batches, m.Count)
	return dst
}

func prepareHeader(m *StreamPrepare) Header {
	assert.True(m.Stream != 0, "wire: stream prepare for stream 0")
	assert.True(m.Log.valid(), "wire: stream prepare with an unknown log")
	assert.True((m.Count == 0) == (len(m.Batches) == 0), "wire: stream prepare count disagrees with its batches")
	h := Header{Command: CommandStreamPrepare, Group: m.Stream, Incarnation: m.Incarnation}
	put32(h.Area[:], prepareEpoch, m.Epoch)
	put32(h.Area[:], preparePrevEpoch, m.PrevEpoch)
	put64(h.Area[:], prepareBaseOffset, m.BaseOffset)
	h.Area[prepareLog] = uint8(m.Log)
	put64(h.Area[:], prepareConfirmedTail, m.ConfirmedTail)
	return h
}

// DecodeStreamPrepare reads a parsed stream prepare frame. Batches aliases body.
func DecodeStreamPrepare(h *Header, body []byte) (StreamPrepare, error) {
	if err := checkHeader(h, CommandStreamPrepare, prepareAreaEnd); err != nil {
		return StreamPrepare{}, err
	}
	if !zero(h.Area[prepareLog+1 : prepareConfirmedTail]) {
		return StreamPrepare{}, ErrReserved
	}
	m := StreamPrepare{
		Stream:        h.Group,
		Incarnation:   h.Incarnation,
		Epoch:         get32(h.Area[:], prepareEpoch),
		PrevEpoch:     get32(h.Area[:], preparePrevEpoch),
		Log:           LogKind(h.Area[prepareLog]),
		BaseOffset:    get64(h.Area[:], prepareBaseOffset),
		Count:         h.EntryCount,
		ConfirmedTail: get64(h.Area[:], prepareConfirmedTail),
		Batches:       nilIfEmpty(body),
	}
	switch {
	case m.Stream == 0:
		return StreamPrepare{}, malformed("stream 0")
	case m.Epoch == 0:
		return StreamPrepare{}, malformed("epoch 0")
	case m.PrevEpoch > m.Epoch:
		return StreamPrepare{}, malformed("prev_epoch after epoch")
	case m.BaseOffset == 0 && m.PrevEpoch != 0:
		return StreamPrepare{}, malformed("prev_epoch without a previous record")
	case !m.Log.valid():
		return StreamPrepare{}, malformed("log")
	case (m.Count == 0) != (len(body) == 0):
		return StreamPrepare{}, ErrEntryCount
	case m.BaseOffset > math.MaxUint64-uint64(m.Count):
		return StreamPrepare{}, malformed("base_offset + count overflows")
	}
	return m, nil
}

// PrepareStatus is a follower's answer to a stream prepare.
type PrepareStatus uint8

// Prepare answers.
const (
	// PrepareAppended: the batches are durable; the tails say how far.
	PrepareAppended PrepareStatus = 1
	// PrepareMismatch: the record before BaseOffset has another epoch here, or BaseOffset is past this
	// copy's tail; the reply's log epochs let the owner find where the histories agree.
	PrepareMismatch PrepareStatus = 2
	// PrepareStaleEpoch: this copy is at a newer epoch (sealed or following a newer owner).
	PrepareStaleEpoch PrepareStatus = 3
)

func (s PrepareStatus) valid() bool { return s >= PrepareAppended && s <= PrepareStaleEpoch }

// StreamPrepareOK is a follower's answer to a stream prepare (command 41): its record and cursor
// tails and, on a mismatch, its log epochs. With PrepareAppended the tails are durable and agreed with
// the owner; with PrepareMismatch they are what the copy holds (durable or queued), where the owner's
// next prepare must start. BaseOffset is the base offset of the prepare answered, so the owner can
// tell the answer to its latest probe from answers to older prepares.
//
// Header: Group and Incarnation as in the prepare; EntryCount the number of log epochs in the body.
// Area: epoch u32 | status u8 | log u8 | reserved [2] | record_tail u64 | cursor_tail u64 |
// base_offset u64. Body: log epochs, 24 bytes each.
type StreamPrepareOK struct {
	Stream      uint64
	Incarnation uint32
	Epoch       uint32 // the follower's epoch
	Status      PrepareStatus
	Log         LogKind // the log of the prepare this answers
	RecordTail  uint64  // record tail (durable with PrepareAppended)
	CursorTail  uint64  // cursor event tail (durable with PrepareAppended)
	BaseOffset  uint64  // base offset of the prepare answered
}

const (
	prepareOKEpoch      = 0
	prepareOKStatus     = 4
	prepareOKLog        = 5
	prepareOKRecordTail = 8
	prepareOKCursorTail = 16
	prepareOKBaseOffset = 24
	prepareOKAreaEnd    = 32
)

// AppendStreamPrepareOK appends a prepare-ok frame carrying m and the follower's log epochs.
func AppendStreamPrepareOK(dst []byte, from From, m *StreamPrepareOK, epochs []LogEpoch) []byte {
	assert.True(m.Stream != 0, "wire: prepare-ok for stream 0")
	assert.True(m.Status.valid(), "wire: prepare-ok with an unknown status")
	assert.True(m.Log.valid(), "wire: prepare-ok with an unknown log")
	h := Header{Command: CommandStreamPrepareOK, Group: m.Stream, Incarnation: m.Incarnation}
	put32(h.Area[:], prepareOKEpoch, m.Epoch)
	h.Area[prepareOKStatus] = uint8(m.Status)
	h.Area[prepareOKLog] = uint8(m.Log)
	put64(h.Area[:], prepareOKRecordTail, m.RecordTail)
	put64(h.Area[:], prepareOKCursorTail, m.CursorTail)
	put64(h.Area[:], prepareOKBaseOffset, m.BaseOffset)
	dst, start := startFrame(dst, from, &h)
	dst = appendLogEpochs(dst, epochs)
	return endFrame(dst, start, uint32(len(epochs)))
}

// DecodeStreamPrepareOK reads a parsed prepare-ok frame and its log epochs, which alias body.
func DecodeStreamPrepareOK(h *Header, body []byte) (StreamPrepareOK, LogEpochs, error) {
	if err := checkHeader(h, CommandStreamPrepareOK, prepareOKAreaEnd); err != nil {
		return StreamPrepareOK{}, LogEpochs{}, err
	}
	if !zero(h.Area[prepareOKLog+1 : prepareOKRecordTail]) {
		return StreamPrepareOK{}, LogEpochs{}, ErrReserved
	}
	m := StreamPrepareOK{
		Stream:      h.Group,
		Incarnation: h.Incarnation,
		Epoch:       get32(h.Area[:], prepareOKEpoch),
		Status:      PrepareStatus(h.Area[prepareOKStatus]),
		Log:         LogKind(h.Area[prepareOKLog]),
		RecordTail:  get64(h.Area[:], prepareOKRecordTail),
		CursorTail:  get64(h.Area[:], prepareOKCursorTail),
		BaseOffset:  get64(h.Area[:], prepareOKBaseOffset),
	}
	switch {
	case m.Stream == 0:
		return StreamPrepareOK{}, LogEpochs{}, malformed("stream 0")
	case !m.Status.valid():
		return StreamPrepareOK{}, LogEpochs{}, malformed("status")
	case !m.Log.valid():
		return StreamPrepareOK{}, LogEpochs{}, malformed("log")
	}
	epochs, err := decodeLogEpochs(h.EntryCount, body)
	if err != nil {
		return StreamPrepareOK{}, LogEpochs{}, err
	}
	return m, epochs, nil
}

// StreamSeal fences one copy of a stream at FenceEpoch for the recovery transition TransitionID
// (command 50). It carries the stream's history starts, so the copy first cuts itself onto the
// recorded history and only then reports its tails (DESIGN.md section 9).
//
// Header: Group is the stream id, Incarnation its incarnation, EntryCount the number of history starts.
// Area: fence_epoch u32 | reserved u32 | transition_id u64. Body: history starts, 24 bytes each.
type StreamSeal struct {
	Stream       uint64
	Incarnation  uint32
	FenceEpoch   uint32
	TransitionID uint64
}

const (
	sealFenceEpoch   = 0
	sealTransitionID = 8
	sealAreaEnd      = 16
)

// AppendStreamSeal appends a seal frame carrying m and the stream's history starts (every start's epoch
// below the fence, in increasing order).
func AppendStreamSeal(dst []byte, from From, m *StreamSeal, starts []HistoryStart) []byte {
	assert.True(m.Stream != 0, "wire: seal for stream 0")
	assert.True(m.FenceEpoch != 0, "wire: seal at epoch 0")
	assert.True(m.TransitionID != 0, "wire: seal without a transition id")
	h := Header{Command: CommandStreamSeal, Group: m.Stream, Incarnation: m.Incarnation}
	put32(h.Area[:], sealFenceEpoch, m.FenceEpoch)
	put64(h.Area[:], sealTransitionID, m.TransitionID)
	dst, start := startFrame(dst, from, &h)
	dst = appendHistoryStarts(dst, starts)
	return endFrame(dst, start, uint32(len(starts)))
}

// DecodeStreamSeal reads a parsed seal frame and its history starts, which alias body.
func DecodeStreamSeal(h *Header, body []byte) (StreamSeal, HistoryStarts, error) {
	if err := checkHeader(h, CommandStreamSeal, sealAreaEnd); err != nil {
		return StreamSeal{}, HistoryStarts{}, err
	}
	if !zero(h.Area[sealFenceEpoch+4 : sealTransitionID]) {
		return StreamSeal{}, HistoryStarts{}, ErrReserved
	}
	m := StreamSeal{
		Stream:       h.Group,
		Incarnation:  h.Incarnation,
		FenceEpoch:   get32(h.Area[:], sealFenceEpoch),
		TransitionID: get64(h.Area[:], sealTransitionID),
	}
	switch {
	case m.Stream == 0:
		return StreamSeal{}, HistoryStarts{}, malformed("stream 0")
	case m.FenceEpoch == 0:
		return StreamSeal{}, HistoryStarts{}, malformed("fence_epoch 0")
	case m.TransitionID == 0:
		return StreamSeal{}, HistoryStarts{}, malformed("transition_id 0")
	}
	starts, err := decodeHistoryStarts(h.EntryCount, body)
	if err != nil {
		return StreamSeal{}, HistoryStarts{}, err
	}
	if n := starts.Len(); n > 0 && starts.At(n-1).Epoch >= m.FenceEpoch {
		return StreamSeal{}, HistoryStarts{}, malformed("history start at or past the fence epoch")
	}
	return m, starts, nil
}

// SealStatus is a copy's answer to a seal.
type SealStatus uint8

// Seal answers.
const (
	// SealSealed: the copy is fenced at FenceEpoch (fsynced) and reports its tails.
	SealSealed SealStatus = 1
	// SealStale: the copy is already at a newer fence or took a newer transition at this fence.
	SealStale SealStatus = 2
	// SealNoCopy: this node holds no copy of that stream incarnation.
	SealNoCopy SealStatus = 3
)

func (s SealStatus) valid() bool { return s >= SealSealed && s <= SealNoCopy }

// StreamSealReply is a copy's answer to a seal (command 51): its record and cursor event tails after the
// cut onto the recorded history, the seal digest of its retained record log, and its log epochs.
//
// Header: Group and Incarnation as in the seal; EntryCount the number of log epochs. Area: fence_epoch
// u32 | status u8 | reserved [3] | transition_id u64 | record_tail u64 | cursor_tail u64 | digest u64.
// Body: log epochs, 24 bytes each.
type StreamSealReply struct {
	Stream       uint64
	Incarnation  uint32
	FenceEpoch   uint32
	Status       SealStatus
	TransitionID uint64
	RecordTail   uint64
	CursorTail   uint64
	Digest       uint64
}

const (
	sealReplyFenceEpoch   = 0
	sealReplyStatus       = 4
	sealReplyTransitionID = 8
	sealReplyRecordTail   = 16
	sealReplyCursorTail   = 24
	sealReplyDigest       = 32
	sealReplyAreaEnd      = 40
)

// AppendStreamSealReply appends a seal reply frame carrying m and the copy's log epochs.
func AppendStreamSealReply(dst []byte, from From, m *StreamSealReply, epochs []LogEpoch) []byte {
	assert.True(m.Stream != 0, "wire: seal reply for stream 0")
	assert.True(m.Status.valid(), "wire: seal reply with an unknown status")
	h := Header{Command: CommandStreamSealReply, Group: m.Stream, Incarnation: m.Incarnation}
	put32(h.Area[:], sealReplyFenceEpoch, m.FenceEpoch)
	h.Area[sealReplyStatus] = uint8(m.Status)
	put64(h.Area[:], sealReplyTransitionID, m.TransitionID)
	put64(h.Area[:], sealReplyRecordTail, m.RecordTail)
	put64(h.Area[:], sealReplyCursorTail, m.CursorTail)
	put64(h.Area[:], sealReplyDigest, m.Digest)
	dst, start := startFrame(dst, from, &h)
	dst = appendLogEpochs(dst, epochs)
	return endFrame(dst, start, uint32(len(epochs)))
}

// DecodeStreamSealReply reads a parsed seal reply frame and its log epochs, which alias body.
func DecodeStreamSealReply(h *Header, body []byte) (StreamSealReply, LogEpochs, error) {
	if err := checkHeader(h, CommandStreamSealReply, sealReplyAreaEnd); err != nil {
		return StreamSealReply{}, LogEpochs{}, err
	}
	if !zero(h.Area[sealReplyStatus+1 : sealReplyTransitionID]) {
		return StreamSealReply{}, LogEpochs{}, ErrReserved
	}
	m := StreamSealReply{
		Stream:       h.Group,
		Incarnation:  h.Incarnation,
		FenceEpoch:   get32(h.Area[:], sealReplyFenceEpoch),
		Status:       SealStatus(h.Area[sealReplyStatus]),
		TransitionID: get64(h.Area[:], sealReplyTransitionID),
		RecordTail:   get64(h.Area[:], sealReplyRecordTail),
		CursorTail:   get64(h.Area[:], sealReplyCursorTail),
		Digest:       get64(h.Area[:], sealReplyDigest),
	}
	switch {
	case m.Stream == 0:
		return StreamSealReply{}, LogEpochs{}, malformed("stream 0")
	case !m.Status.valid():
		return StreamSealReply{}, LogEpochs{}, malformed("status")
	}
	epochs, err := decodeLogEpochs(h.EntryCount, body)
	if err != nil {
		return StreamSealReply{}, LogEpochs{}, err
	}
	return m, epochs, nil
}
