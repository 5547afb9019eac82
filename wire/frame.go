package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"

	"github.com/cespare/xxhash/v2"

	"github.com/ringstream/ringstream/internal/assert"
)

const (
	// HeaderSize is the size of every frame header in bytes.
	HeaderSize = 256
	// FrameSizeMax is the largest frame, header included.
	FrameSizeMax = 64 << 20
	// BodySizeMax is the largest body: FrameSizeMax minus the header.
	BodySizeMax = FrameSizeMax - HeaderSize
	// Revision is the wire revision this build speaks. Revision 1 is refused (R18).
	Revision = 2

	// AreaOffset is where the per-command area starts inside the header.
	AreaOffset = 64
	// AreaSize is the size of the per-command area: the rest of the header.
	AreaSize = HeaderSize - AreaOffset
)

// Header offsets, pinned by TestHeaderOffsets. The header checksum covers [offsetChecksumBody, HeaderSize).
const (
	offsetChecksum     = 0
	offsetChecksumBody = 8
	offsetCluster      = 16
	offsetGroup        = 24
	offsetIncarnation  = 32
	offsetBodySize     = 36
	offsetEntryCount   = 40
	offsetSender       = 44
	offsetCommand      = 46
	offsetRevision     = 48
	offsetReserved     = 50
)

// Sentinel errors of frame parsing. Each has one meaning; wrapped errors add the values that failed.
var (
	// ErrShortFrame: the buffer ends before the header or before the body the header announces.
	ErrShortFrame = errors.New("wire: frame shorter than its header says")
	// ErrTrailingBytes: the buffer holds bytes past the end of the frame.
	ErrTrailingBytes = errors.New("wire: bytes past the end of the frame")
	// ErrChecksum: the header or the body checksum does not match; the frame is dropped whole (R15).
	ErrChecksum = errors.New("wire: checksum mismatch")
	// ErrFrameTooLarge: the header announces a body past BodySizeMax (or past a reader's limit).
	ErrFrameTooLarge = errors.New("wire: frame too large")
	// ErrRevision: the frame or the handshake speaks another wire revision (R18).
	ErrRevision = errors.New("wire: unsupported wire revision")
	// ErrUnknownCommand: the command number is not one this revision defines.
	ErrUnknownCommand = errors.New("wire: unknown command")
	// ErrReserved: reserved header bytes are not zero.
	ErrReserved = errors.New("wire: reserved header bytes not zero")
	// ErrSender: a node-to-node frame carries sender node id 0.
	ErrSender = errors.New("wire: invalid sender node id")
	// ErrChunk: a state transfer message (CommandVSRSnapshot, CommandVSRRequestSnapshot) whose chunk
	// is empty, ends past the checkpoint's total length, or rides on a request.
	ErrChunk = errors.New("wire: vsr state transfer chunk out of shape")
	// ErrRouting: a node-level frame carries a group or an incarnation.
	ErrRouting = errors.New("wire: routing fields set on a node-level frame")
)

// Command is a frame's command number. The numbers are fixed across the project (see the constants).
type Command uint16

// Command numbers. 20 to 32 are the metadata group's VSR messages, declared in vsr.go.
const (
	CommandHandshake Command = 1
	// CommandHandshakeProof is the dialer's proof of the cluster secret, after the acceptor's answer.
	CommandHandshakeProof Command = 2
	CommandCommit         Command = 9  // batch of 40-byte Commit entries (R10)
	CommandCommitReply    Command = 10 // batch of 32-byte CommitReply entries (R26)

	CommandVSRMin Command = 20 // first number of the metadata group's VSR messages
	CommandVSRMax Command = 32 // last number of the metadata group's VSR messages

	CommandStreamPrepare   Command = 40
	CommandStreamPrepareOK Command = 41
	CommandStreamSeal      Command = 50
	CommandStreamSealReply Command = 51
	CommandNodeHeartbeat   Command = 52
	// CommandStreamAssignment carries an assignment with its history starts (assignment.go).
	CommandStreamAssignment Command = 53

	CommandCreateStream       Command = 60
	CommandCreateStreamReply  Command = 61
	CommandDeleteStream       Command = 62
	CommandDeleteStreamReply  Command = 63
	CommandListStreams        Command = 64
	CommandListStreamsReply   Command = 65
	CommandProduce            Command = 66
	CommandProduceReply       Command = 67
	CommandFetch              Command = 68
	CommandFetchReply         Command = 69
	CommandCommitCursor       Command = 70
	CommandCommitCursorReply  Command = 71
	CommandGetCursor          Command = 72
	CommandGetCursorReply     Command = 73
	CommandLookupStream       Command = 74 // metadata: which node owns a stream
	CommandLookupStreamReply  Command = 75
	CommandClientHello        Command = 76 // client handshake: the client's nonce
	CommandClientChallenge    Command = 77 // client handshake: the node's nonce and proof
	CommandClientProof        Command = 78 // client handshake: the client's proof
	CommandListCursors        Command = 82 // a stream's consumers and their cursors (cursors.go)
	CommandListCursorsReply   Command = 83
	CommandDeleteCursor       Command = 84 // forget one consumer's cursor (cursors.go)
	CommandDeleteCursorReply  Command = 85
	CommandCreateStreams      Command = 86 // many streams created in one request (client_batch.go)
	CommandCreateStreamsReply Command = 87
	CommandDeleteStreams      Command = 88 // many streams deleted in one request (client_batch.go)
	CommandDeleteStreamsReply Command = 89
	CommandErrorReply         Command = 99

	clientCommandMin Command = 60
	clientCommandMax Command = 99
)

// name returns the command's name, or "" when this revision does not define it (the VSR range aside).
func (c Command) name() string {
	switch c {
	case CommandHandshake:
		return "handshake"
	case CommandHandshakeProof:
		return "handshake_proof"
	case CommandCommit:
		return "commit"
	case CommandCommitReply:
		return "commit_reply"
	case CommandStreamPrepare:
		return "stream_prepare"
	case CommandStreamPrepareOK:
		return "stream_prepare_ok"
	case CommandStreamSeal:
		return "stream_seal"
	case CommandStreamSealReply:
		return "stream_seal_reply"
	case CommandNodeHeartbeat:
		return "node_heartbeat"
	case CommandStreamAssignment:
		return "stream_assignment"
	case CommandCreateStream:
		return "create_stream"
	case CommandCreateStreamReply:
		return "create_stream_reply"
	case CommandDeleteStream:
		return "delete_stream"
	case CommandDeleteStreamReply:
		return "delete_stream_reply"
	case CommandListStreams:
		return "list_streams"
	case CommandListStreamsReply:
		return "list_streams_reply"
	case CommandProduce:
		return "produce"
	case CommandProduceReply:
		return "produce_reply"
	case CommandFetch:
		return "fetch"
	case CommandFetchReply:
		return "fetch_reply"
	case CommandCommitCursor:
		return "commit_cursor"
	case CommandCommitCursorReply:
		return "commit_cursor_reply"
	case CommandGetCursor:
		return "get_cursor"
	case CommandGetCursorReply:
		return "get_cursor_reply"
	case CommandLookupStream:
		return "lookup_stream"
	case CommandLookupStreamReply:
		return "lookup_stream_reply"
	case CommandClientHello:
		return "client_hello"
	case CommandClientChallenge:
		return "client_challenge"
	case CommandClientProof:
		return "client_proof"
	case CommandListCursors:
		return "list_cursors"
	case CommandListCursorsReply:
		return "list_cursors_reply"
	case CommandDeleteCursor:
		return "delete_cursor"
	case CommandDeleteCursorReply:
		return "delete_cursor_reply"
	case CommandCreateStreams:
		return "create_streams"
	case CommandCreateStreamsReply:
		return "create_streams_reply"
	case CommandDeleteStreams:
		return "delete_streams"
	case CommandDeleteStreamsReply:
		return "delete_streams_reply"
	case CommandErrorReply:
		return "error_reply"
	}
	return ""
}

// Known reports whether this revision defines the command. The whole VSR range counts as known.
func (c Command) Known() bool {
	if c >= CommandVSRMin && c <= CommandVSRMax {
		return true
	}
	return c.name() != ""
}

// NodeLevel reports whether frames of this command address a node, not a group: their header's Group
// and Incarnation are zero.
func (c Command) NodeLevel() bool {
	switch c {
	case CommandHandshake, CommandHandshakeProof, CommandCommit, CommandCommitReply, CommandNodeHeartbeat:
		return true
	}
	return false
}

// Client reports whether the command is a client request or reply (60 to 99).
func (c Command) Client() bool {
	return c >= clientCommandMin && c <= clientCommandMax
}

// String returns the command's name, "vsr(n)" for the VSR range, or its number.
func (c Command) String() string {
	if c >= CommandVSRMin && c <= CommandVSRMax {
		return "vsr(" + strconv.Itoa(int(c)) + ")"
	}
	if n := c.name(); n != "" {
		return n
	}
	return "command(" + strconv.Itoa(int(c)) + ")"
}

// Header is a decoded frame header. Group and Incarnation route group-addressed frames (stream
// replication, seal, VSR) to the owning shard without decoding the body; they are zero on node-level
// frames. Area is the per-command area: each command's fixed fields.
type Header struct {
	Checksum     uint64 // xxhash64 of header bytes [8, 256)
	ChecksumBody uint64 // xxhash64 of the body
	Cluster      uint64
	Group        uint64
	Incarnation  uint32
	BodySize     uint32
	EntryCount   uint32
	Sender       uint16 // node id, 1..65535; 0 only on client frames
	Command      Command
	Revision     uint16
	Area         [AreaSize]byte
}

// BeginFrame appends a header built from h to dst and returns dst; the frame starts at the old len(dst).
// It writes Revision whatever h.Revision holds, and leaves the checksums, body size and entry count
// zero: append the body, then call EndFrame on the frame's bytes.
func BeginFrame(dst []byte, h *Header) []byte {
	assert.True(h.Command.Known(), "wire: BeginFrame with an unknown command")
	assert.True(!h.Command.NodeLevel() || h.Group == 0, "wire: node-level frame with a group")
	assert.True(!h.Command.NodeLevel() || h.Incarnation == 0, "wire: node-level frame with an incarnation")
	assert.True(h.Command.Client() || h.Sender != 0, "wire: node frame without a sender")
	start := len(dst)
	dst = grow(dst, HeaderSize)
	b := dst[start : start+HeaderSize]
	clear(b[:AreaOffset])
	binary.LittleEndian.PutUint64(b[offsetCluster:], h.Cluster)
	binary.LittleEndian.PutUint64(b[offsetGroup:], h.Group)
	binary.LittleEndian.PutUint32(b[offsetIncarnation:], h.Incarnation)
	binary.LittleEndian.PutUint16(b[offsetSender:], h.Sender)
	binary.LittleEndian.PutUint16(b[offsetCommand:], uint16(h.Command))
	binary.LittleEndian.PutUint16(b[offsetRevision:], Revision)
	copy(b[AreaOffset:], h.Area[:])
	return dst
}

// EndFrame fixes the body size, the entry count, the body checksum and then the header checksum of frame
// in place. frame is the header BeginFrame wrote followed by the whole body.
func EndFrame(frame []byte, entryCount uint32) {
	assert.True(len(frame) >= HeaderSize, "wire: EndFrame on less than a header")
	assert.True(len(frame) <= FrameSizeMax, "wire: frame past FrameSizeMax")
	binary.LittleEndian.PutUint32(frame[offsetBodySize:], uint32(len(frame)-HeaderSize))
	binary.LittleEndian.PutUint32(frame[offsetEntryCount:], entryCount)
	binary.LittleEndian.PutUint64(frame[offsetChecksumBody:], xxhash.Sum64(frame[HeaderSize:]))
	binary.LittleEndian.PutUint64(frame[offsetChecksum:], xxhash.Sum64(frame[offsetChecksumBody:HeaderSize]))
}

// EndHeader is EndFrame for a header kept apart from its body, as when a frame leaves as two iovecs
// (the shard's SendData): it fixes the body size, the entry count and the body checksum of body, then
// the header checksum, in header (the HeaderSize bytes BeginFrame wrote). body is only read.
func EndHeader(header, body []byte, entryCount uint32) {
	assert.True(len(header) == HeaderSize, "wire: EndHeader on a header of the wrong size")
	assert.True(len(body) <= BodySizeMax, "wire: body past BodySizeMax")
	binary.LittleEndian.PutUint32(header[offsetBodySize:], uint32(len(body)))
	binary.LittleEndian.PutUint32(header[offsetEntryCount:], entryCount)
	binary.LittleEndian.PutUint64(header[offsetChecksumBody:], xxhash.Sum64(body))
	binary.LittleEndian.PutUint64(header[offsetChecksum:], xxhash.Sum64(header[offsetChecksumBody:HeaderSize]))
}

// ParseHeader checks and decodes the header at the start of buf: its checksum, revision, reserved bytes,
// body size, command, sender and routing fields. It does not look at the body. FrameReader and a shard
// that routes frames by their header use it; everyone else calls ParseFrame.
func ParseHeader(buf []byte) (Header, error) {
	if len(buf) < HeaderSize {
		return Header{}, ErrShortFrame
	}
	b := buf[:HeaderSize]
	h := decodeHeader(b)
	if h.Checksum != xxhash.Sum64(b[offsetChecksumBody:]) {
		return Header{}, fmt.Errorf("%w: header", ErrChecksum)
	}
	if h.Revision != Revision {
		return Header{}, fmt.Errorf("%w: frame revision %d, this node speaks %d", ErrRevision, h.Revision, Revision)
	}
	if !zero(b[offsetReserved:AreaOffset]) {
		return Header{}, ErrReserved
	}
	if h.BodySize > BodySizeMax {
		return Header{}, fmt.Errorf("%w: body %d bytes, limit %d", ErrFrameTooLarge, h.BodySize, BodySizeMax)
	}
	if !h.Command.Known() {
		return Header{}, fmt.Errorf("%w: %d", ErrUnknownCommand, h.Command)
	}
	if h.Sender == 0 && !h.Command.Client() {
		return Header{}, fmt.Errorf("%w: 0 on %s", ErrSender, h.Command)
	}
	if h.Command.NodeLevel() && (h.Group != 0 || h.Incarnation != 0) {
		return Header{}, fmt.Errorf("%w: %s", ErrRouting, h.Command)
	}
	return h, nil
}

// ParseFrame checks the one frame that buf holds exactly (sizes, revision, both checksums, the header
// rules of ParseHeader) and returns its header and its body, which aliases buf.
func ParseFrame(buf []byte) (Header, []byte, error) {
	h, err := ParseHeader(buf)
	if err != nil {
		return Header{}, nil, err
	}
	size := HeaderSize + int(h.BodySize)
	if len(buf) < size {
		return Header{}, nil, ErrShortFrame
	}
	if len(buf) > size {
		return Header{}, nil, ErrTrailingBytes
	}
	body := buf[HeaderSize:size]
	if err := checkBody(&h, body); err != nil {
		return Header{}, nil, err
	}
	return h, body, nil
}

// checkBody checks body against the body checksum of h, whose header ParseHeader accepted.
func checkBody(h *Header, body []byte) error {
	if h.ChecksumBody != xxhash.Sum64(body) {
		return fmt.Errorf("%w: body", ErrChecksum)
	}
	return nil
}

// decodeHeader reads every header field from b (at least HeaderSize bytes) without checking anything.
func decodeHeader(b []byte) Header {
	var h Header
	h.Checksum = binary.LittleEndian.Uint64(b[offsetChecksum:])
	h.ChecksumBody = binary.LittleEndian.Uint64(b[offsetChecksumBody:])
	h.Cluster = binary.LittleEndian.Uint64(b[offsetCluster:])
	h.Group = binary.LittleEndian.Uint64(b[offsetGroup:])
	h.Incarnation = binary.LittleEndian.Uint32(b[offsetIncarnation:])
	h.BodySize = binary.LittleEndian.Uint32(b[offsetBodySize:])
	h.EntryCount = binary.LittleEndian.Uint32(b[offsetEntryCount:])
	h.Sender = binary.LittleEndian.Uint16(b[offsetSender:])
	h.Command = Command(binary.LittleEndian.Uint16(b[offsetCommand:]))
	h.Revision = binary.LittleEndian.Uint16(b[offsetRevision:])
	copy(h.Area[:], b[AreaOffset:HeaderSize])
	return h
}

// grow extends dst by n bytes (contents unspecified) and returns it, reallocating only when the
// capacity is short.
func grow(dst []byte, n int) []byte {
	l := len(dst)
	if cap(dst)-l < n {
		bigger := make([]byte, l, 2*cap(dst)+n)
		copy(bigger, dst)
		dst = bigger
	}
	return dst[:l+n]
}

// zero reports whether every byte of b is zero.
func zero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
