package wire

// VSR messages of the metadata group (commands 20 to 32). engine/vsr builds and consumes VSRMessage
// values; this file turns them into frames and back. The metadata group's Commit heartbeats and their
// replies are not here: they are the 40-byte Commit and 32-byte CommitReply entries of the shard's
// batches (R4).
//
// Layout of a VSR frame's body, little endian:
//
//	fixed part, VSRFixedSize bytes:
//	  replica u8 | reserved [3] | view u32 | log_view u32 | offset u32 | op u64 | commit u64 |
//	  checksum u64 | log_base u64 | client u64 | request u64 | payload_size u32 | total u32
//	payload: payload_size bytes (a request's op, a reply's result, a chunk of a checkpoint)
//	entries: the header's EntryCount entries, each
//	  op u64 | view u32 | body_size u32 | client u64 | request u64 | parent u64 | checksum u64 | body
//
// Which fields a command uses is on its constant; unused fields are zero on the wire, and a decoder
// does not look at them, except offset and total: only the state transfer's two commands use them, and
// every other command must carry them zero. Every length is checked before it is used: a decoder never
// panics.
//
// State transfer (engine/vsr's transfer.go) moves a checkpoint in chunks that the receiver pulls: it
// asks (CommandVSRRequestSnapshot) for the bytes from an offset of the checkpoint it is assembling, and
// the sender answers (CommandVSRSnapshot) with the slice there of the checkpoint it holds, its total
// length and its identity (op and the xxhash64 of the whole checkpoint). Offset and total are u32: a
// checkpoint's own format bounds it below 4 GiB. DecodeVSR checks a chunk's shape (a non-empty slice
// that ends within total); whether the total is acceptable, and whether the chunks add up to the
// checkpoint they name, is the receiver's check.

import "github.com/ringstream/ringstream/internal/assert"

// The VSR commands (20 to 32).
const (
	// CommandVSRRequest: a node asks the primary to order an op. Client, Request, Payload (the op).
	CommandVSRRequest Command = 20
	// CommandVSRReply: the primary's answer to a committed request. View, Op, Client, Request, Payload.
	CommandVSRReply Command = 21
	// CommandVSRPrepare: the primary replicates one entry. View, Op, Commit, one entry.
	CommandVSRPrepare Command = 22
	// CommandVSRPrepareOK: a backup holds the log up to Op durably. View, Op, Checksum (entry at Op).
	CommandVSRPrepareOK Command = 23
	// CommandVSRStartViewChange: the sender moved to View and asks for a view change.
	CommandVSRStartViewChange Command = 24
	// CommandVSRDoViewChange: the sender's log for the new View's primary. View, LogView, Op, Commit,
	// Checksum (head), LogBase, entries (LogBase, Op].
	CommandVSRDoViewChange Command = 25
	// CommandVSRStartView: the new primary's log. View, Op, Commit, Checksum (head), LogBase, entries.
	CommandVSRStartView Command = 26
	// CommandVSRRequestPrepare: repair; the sender is missing entries from Op on. View, Op.
	CommandVSRRequestPrepare Command = 27
	// CommandVSRSnapshot: one chunk of the sender's checkpoint at Op (state transfer). View, Op, Commit
	// (the sender's), Checksum (xxhash64 of the whole checkpoint: with Op, the checkpoint's identity),
	// Total (the checkpoint's length), Offset (where Payload starts in it), Payload (at least one byte,
	// ending at or before Total).
	CommandVSRSnapshot Command = 28
	// CommandVSRRequestStartView: the sender is in View but missed its start-view.
	CommandVSRRequestStartView Command = 29
	// CommandVSRRecovery: the sender lost its state and asks the group for it (VR Revisited's recovery).
	// View (the highest the sender knows, 0 if none), Request (the nonce of this recovery).
	CommandVSRRecovery Command = 30
	// CommandVSRRecoveryResponse: a replica in normal status answers a recovery. View, Request (the
	// nonce); the primary of View adds its log: LogView, Op, Commit, Checksum (head), LogBase, entries.
	// Other replicas leave the log fields zero.
	CommandVSRRecoveryResponse Command = 31
	// CommandVSRRequestSnapshot: the sender assembles the checkpoint Op, Checksum and asks for its bytes
	// from Offset on. View, Op, Checksum, Offset. The answer is a CommandVSRSnapshot from the checkpoint
	// the receiver holds now, whatever its identity: the asker restarts when that is another one.
	CommandVSRRequestSnapshot Command = 32
)

const (
	// VSRFixedSize is the fixed part at the start of every VSR body.
	VSRFixedSize = 72
	// VSREntryHeaderSize is the size of an entry before its body.
	VSREntryHeaderSize = 48
	// VSRPayloadMax is the largest payload a VSR frame without entries carries (a snapshot's
	// checkpoint): the body past the fixed part.
	VSRPayloadMax = BodySizeMax - VSRFixedSize
)

// VSREntry is one op of the metadata group's log. Checksum covers every other field and the body, and
// Parent is the checksum of the entry before it, so a log is a hash chain (engine/vsr computes both).
type VSREntry struct {
	Op       uint64
	View     uint32 // the view in which the primary first ordered this op
	Client   uint64
	Request  uint64
	Parent   uint64
	Checksum uint64
	Body     []byte
}

// VSRMessage is one decoded VSR message. Slices alias the frame it was decoded from.
type VSRMessage struct {
	Command  Command
	Replica  uint8 // the sender's member index in the metadata group
	View     uint32
	LogView  uint32
	Op       uint64
	Commit   uint64
	Checksum uint64
	LogBase  uint64
	Client   uint64
	Request  uint64
	// Offset and Total: a checkpoint chunk's place and the whole checkpoint's length (state transfer
	// only; zero in every other command).
	Offset  uint32
	Total   uint32
	Payload []byte
	Entries []VSREntry
}

// IsVSR reports whether c is in the VSR range.
func (c Command) IsVSR() bool { return c >= CommandVSRMin && c <= CommandVSRMax }

// AppendVSREntry appends e in its wire layout.
func AppendVSREntry(dst []byte, e *VSREntry) []byte {
	assert.True(len(e.Body) <= BodySizeMax, "wire: vsr entry body past BodySizeMax")
	dst = AppendU64(dst, e.Op)
	dst = AppendU32(dst, e.View)
	dst = AppendU32(dst, uint32(len(e.Body)))
	dst = AppendU64(dst, e.Client)
	dst = AppendU64(dst, e.Request)
	dst = AppendU64(dst, e.Parent)
	dst = AppendU64(dst, e.Checksum)
	return append(dst, e.Body...)
}

// DecodeVSREntry decodes one entry from the front of b and returns it and its size. The body aliases b.
func DecodeVSREntry(b []byte) (VSREntry, int, error) {
	if len(b) < VSREntryHeaderSize {
		return VSREntry{}, 0, ErrShortBody
	}
	r := NewBodyReader(b)
	var e VSREntry
	e.Op = r.U64()
	e.View = r.U32()
	size := r.U32()
	e.Client = r.U64()
	e.Request = r.U64()
	e.Parent = r.U64()
	e.Checksum = r.U64()
	if uint64(size) > uint64(r.Remaining()) {
		return VSREntry{}, 0, ErrShortBody
	}
	e.Body = nilIfEmpty(r.Bytes(int(size)))
	return e, VSREntryHeaderSize + int(size), nil
}

// AppendVSRFrame appends one frame holding m, sent by from, addressed to group (the metadata group's
// id, so a shard routes it by header), and returns dst.
func AppendVSRFrame(dst []byte, from From, group uint64, m *VSRMessage) []byte {
	assert.True(m.Command.IsVSR(), "wire: vsr frame with a command outside the VSR range")
	h := Header{Command: m.Command, Group: group}
	dst, start := startFrame(dst, from, &h)
	dst = append(dst, m.Replica, 0, 0, 0)
	dst = AppendU32(dst, m.View)
	dst = AppendU32(dst, m.LogView)
	dst = AppendU32(dst, m.Offset)
	dst = AppendU64(dst, m.Op)
	dst = AppendU64(dst, m.Commit)
	dst = AppendU64(dst, m.Checksum)
	dst = AppendU64(dst, m.LogBase)
	dst = AppendU64(dst, m.Client)
	dst = AppendU64(dst, m.Request)
	dst = AppendU32(dst, uint32(len(m.Payload)))
	dst = AppendU32(dst, m.Total)
	dst = append(dst, m.Payload...)
	for i := range m.Entries {
		dst = AppendVSREntry(dst, &m.Entries[i])
	}
	assert.True(len(dst)-start <= FrameSizeMax, "wire: vsr frame past FrameSizeMax")
	return endFrame(dst, start, uint32(len(m.Entries)))
}

// DecodeVSR decodes the body of a VSR frame whose header ParseFrame checked into m. m.Entries keeps its
// capacity between calls, so a receiver that reuses m decodes without allocating; the entries' bodies
// and m.Payload alias body.
func DecodeVSR(h *Header, body []byte, m *VSRMessage) error {
	if !h.Command.IsVSR() {
		return wrongCommand(h.Command, CommandVSRMin)
	}
	if !zero(h.Area[:]) {
		return ErrReserved
	}
	if len(body) < VSRFixedSize {
		return ErrShortBody
	}
	r := NewBodyReader(body)
	entries := m.Entries[:0]
	*m = VSRMessage{Command: h.Command}
	m.Replica = r.U8()
	if !zero(r.Bytes(3)) {
		return ErrReserved
	}
	m.View = r.U32()
	m.LogView = r.U32()
	m.Offset = r.U32()
	m.Op = r.U64()
	m.Commit = r.U64()
	m.Checksum = r.U64()
	m.LogBase = r.U64()
	m.Client = r.U64()
	m.Request = r.U64()
	payload := r.U32()
	m.Total = r.U32()
	if uint64(payload) > uint64(r.Remaining()) {
		return ErrShortBody
	}
	m.Payload = nilIfEmpty(r.Bytes(int(payload)))
	rest := body[len(body)-r.Remaining():]
	// Each entry takes at least its header, so a count the body cannot hold is refused before any
	// slice grows to it.
	if uint64(h.EntryCount) > uint64(len(rest)/VSREntryHeaderSize) {
		return ErrEntryCount
	}
	for i := uint32(0); i < h.EntryCount; i++ {
		e, n, err := DecodeVSREntry(rest)
		if err != nil {
			return err
		}
		entries = append(entries, e)
		rest = rest[n:]
	}
	if len(rest) != 0 {
		return ErrTrailingBytes
	}
	if len(entries) > 0 {
		m.Entries = entries
	}
	return checkVSRShape(m)
}

// checkVSRShape refuses messages whose entry count their command does not allow, and the state
// transfer's fields where they do not belong or do not fit.
func checkVSRShape(m *VSRMessage) error {
	switch m.Command {
	case CommandVSRSnapshot:
		if len(m.Payload) == 0 || uint64(m.Offset)+uint64(len(m.Payload)) > uint64(m.Total) {
			return ErrChunk
		}
	case CommandVSRRequestSnapshot:
		if len(m.Payload) != 0 || m.Total != 0 {
			return ErrChunk
		}
	default:
		if m.Offset != 0 || m.Total != 0 {
			return ErrReserved
		}
	}
	switch m.Command {
	case CommandVSRPrepare:
		if len(m.Entries) != 1 {
			return ErrEntryCount
		}
	case CommandVSRDoViewChange, CommandVSRStartView, CommandVSRRecoveryResponse:
		if uint64(len(m.Entries)) != m.Op-m.LogBase || m.LogBase > m.Op {
			return ErrEntryCount
		}
	default:
		if len(m.Entries) != 0 {
			return ErrEntryCount
		}
	}
	return nil
}
