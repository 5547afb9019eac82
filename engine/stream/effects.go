package stream

import (
	"github.com/ringstream/ringstream/wire"
)

// Effects is what the copy asks its host (the shard through segment, or engine/sim) to do. Ready
// returns it; the host carries it out in this order:
//
//  1. Epochs: append each log-epoch entry durably (fdatasynced), then report EpochDone. The copy
//     queues no append of that epoch before the report.
//  2. Appends, in order, onto the log each names (group-committed by the host). Payload and
//     Encoded alias the message of the Step that made them: append them before that message's
//     bytes are released. Report AppendDone(log, end) as the durable tail moves, never before the
//     fsync that covers it completed, and LogFailed if the log fails or refuses an append (the
//     copy's records would no longer match its log).
//  3. SyncCursors: commit the cursor log's queued events (one fsync for all).
//  4. Reads: read each from the log and report ReadDone with the tag.
//  5. Prepares to followers and PrepareOKs to the owner. A prepare carries its batches (read from
//     the log), or names a run of this Effects' Appends, or the records appended past the durable
//     tail (SourceUnsynced); for the last two the host sends the encoded bytes its log holds for
//     its next group commits, and keeps them alive until the send completes. Every PrepareOK
//     vouches only for what AppendDone covered.
//  6. Replies to clients.
//
// Heartbeat is the copy's state for the shard's heartbeat schedule, read after every Ready.
//
// Everything here aliases memory the copy reuses: use it before the next Ready. Byte slices that
// alias a read's data (Prepare.Msg.Batches, Reply.Fetch.Batches) stay the host's: it keeps the read
// buffer alive until the sends that reference it complete.
type Effects struct {
	Epochs      []wire.LogEpoch
	Appends     []Append
	SyncCursors bool
	Reads       []Read
	Prepares    []Prepare
	PrepareOKs  []PrepareOK
	Replies     []Reply
	Heartbeat   Heartbeat

	text        []byte            // refusal texts of Replies, and consumer names of cursor lists
	cursorInfos []wire.CursorInfo // the entries of cursor list replies
}

// addText copies s into the effects' text buffer and returns it. Earlier texts stay valid when the
// buffer grows: they keep the old array.
func (fx *Effects) addText(s string) []byte {
	n := len(fx.text)
	fx.text = append(fx.text, s...)
	return fx.text[n:len(fx.text):len(fx.text)]
}

// Append is one batch to queue on a log. The owner's appends carry Header and Payload (the host
// encodes them, segment.Copy.Append; the host stamps the timestamps, the copy has no clock); a
// follower's carry Encoded, the owner's batch as it came (segment.Copy.AppendEncoded). A cursor
// commit on the owner is Log LogCursors with CursorName and CursorOffset (segment.Copy.CommitCursor
// at Header.Epoch). The host's log must give the batch Header.BaseOffset.
type Append struct {
	Log           wire.LogKind
	Header        BatchHeader
	Payload       []byte
	PayloadSum    uint64 // xxhash64 of Payload when PayloadSummed (the produce frame's body checksum)
	PayloadSummed bool
	Encoded       []byte
	CursorName    []byte
	CursorOffset  uint64
	// CursorDelete: the cursor event is a tombstone for CursorName (segment.Copy.DeleteCursor).
	CursorDelete bool
}

// Read asks for the batches of Log from offset From on, BytesMax bytes of them counted from From.
// A host whose reads start below From (segment reads from the sparse index entry at or below it)
// reads that much more (segment: IndexIntervalBytes). Tag comes back in ReadDone; a read the host
// cannot start is reported at once as ReadDone with the error, and the copy tries again later.
type Read struct {
	Tag      uint64
	Log      wire.LogKind
	From     uint64
	BytesMax int
}

// PrepareSource says where a prepare's batches are.
type PrepareSource uint8

const (
	// SourceAppends: the batches are the encoded bytes of Effects.Appends[AppendFrom:AppendTo]; the
	// host sends them as appended (no second encoding) and Msg.Batches is nil.
	SourceAppends PrepareSource = 1
	// SourceMsg: Msg.Batches holds the batches (from a read), or the prepare is an empty probe.
	SourceMsg PrepareSource = 2
	// SourceUnsynced: the batches are every record from Msg.BaseOffset, the durable tail the copy
	// knew when Ready returned, to the appended tail: appended, none reported durable. The host's
	// log holds their encoded bytes in its groups waiting for commit until it reports them durable,
	// so it must carry this out before it dispatches more completions; it sends those bytes, as for
	// SourceAppends, and Msg.Batches is nil.
	SourceUnsynced PrepareSource = 3
)

// Prepare is one stream prepare for follower node To.
type Prepare struct {
	To         uint16
	Source     PrepareSource
	AppendFrom int
	AppendTo   int
	Msg        wire.StreamPrepare
}

// PrepareOK is a follower's answer to its owner, node To, with the log epochs that go with it
// (Epochs is set on a mismatch).
type PrepareOK struct {
	To     uint16
	Msg    wire.StreamPrepareOK
	Epochs []wire.LogEpoch
}

// ReplyKind says which client reply a Reply holds.
type ReplyKind uint8

const (
	ReplyProduce      ReplyKind = 1
	ReplyFetch        ReplyKind = 2
	ReplyCommitCursor ReplyKind = 3
	ReplyGetCursor    ReplyKind = 4
	ReplyError        ReplyKind = 5
	ReplyListCursors  ReplyKind = 6 // CursorList and Cursors
	ReplyDeleteCursor ReplyKind = 7 // Cursor: Found says a cursor was deleted, at Offset
)

// Reply is one answer to the client the host knows as Client (Message.Client of the request).
type Reply struct {
	Client  uint64
	Kind    ReplyKind
	Produce wire.ProduceReply
	Fetch   wire.FetchReply
	Cursor  wire.CursorReply
	Error   wire.ErrorReply // Message is a constant text naming the cause
	// CursorList and Cursors answer a cursor list; Cursors aliases the effects' buffers.
	CursorList wire.ListCursorsReply
	Cursors    []wire.CursorInfo
	// ProduceBytes is a confirmed produce's batch size as appended (batch header included); 0 for
	// a duplicate, whose batch was appended by the produce it repeats.
	ProduceBytes uint32
}

// Heartbeat is the copy's state for the shard's heartbeat schedule (R20-R22): an owner is a group
// on the schedule whose commit is the confirmed tail, Busy while produces wait for it (or records
// are unconfirmed) and Idle otherwise. Holders are the followers whose acknowledged tail reached the
// confirmed tail (for eager Commits).
type Heartbeat struct {
	Role    Role
	Epoch   uint32
	Commit  uint64
	State   wire.HeartbeatState
	Holders []uint16
}

// reset empties fx keeping every slice's capacity.
func (fx *Effects) reset() {
	clear(fx.Appends) // drop payload references
	fx.Epochs = fx.Epochs[:0]
	fx.Appends = fx.Appends[:0]
	fx.SyncCursors = false
	fx.Reads = fx.Reads[:0]
	clear(fx.Prepares)
	fx.Prepares = fx.Prepares[:0]
	clear(fx.PrepareOKs)
	fx.PrepareOKs = fx.PrepareOKs[:0]
	clear(fx.Replies)
	fx.Replies = fx.Replies[:0]
	fx.Heartbeat.Holders = fx.Heartbeat.Holders[:0]
	fx.text = fx.text[:0]
	clear(fx.cursorInfos)
	fx.cursorInfos = fx.cursorInfos[:0]
}
