package wire

import (
	"strconv"

	"github.com/ringstream/ringstream/internal/assert"
)

// CopyRole is a stream copy's role on the node that reports it.
type CopyRole uint8

// Copy roles.
const (
	RoleOwner    CopyRole = 1
	RoleFollower CopyRole = 2
	RoleSealed   CopyRole = 3
)

func (r CopyRole) valid() bool { return r >= RoleOwner && r <= RoleSealed }

// CopyTailSize is the size of one copy's entry in a node heartbeat.
const CopyTailSize = 40

// CopyFlags are a copy entry's flag bits.
type CopyFlags uint8

// CopyOwnerSilent: this follower has heard nothing from its owner for its timeout. The controller lists
// it under attention while it still sees the owner's node alive.
const CopyOwnerSilent CopyFlags = 1

// CopyOwnerRestarted: this owner reopened within its own epoch (its node restarted before anyone saw it
// lost) and may have lost records its followers hold. It serves nothing and applies no assignment that
// keeps it owner until a recovery seals it; the controller records that recovery when it sees the flag.
const CopyOwnerRestarted CopyFlags = 2

// CopyLogFailed: this copy's log failed (a write, fsync or read error, or its copy did not open): it
// confirms nothing, acknowledges nothing and serves nothing until it heals. The entry's Cause says why.
// The controller fails an owner flagged so over as a lost owner, and waits for no seal answer of a
// copy flagged so (engine/control). An entry with this flag carries a Cause; one without, none.
const CopyLogFailed CopyFlags = 4

const copyFlagsKnown = CopyOwnerSilent | CopyOwnerRestarted | CopyLogFailed

// LogFailCause names why a copy's log failed, carried by a CopyLogFailed entry.
type LogFailCause uint8

// Causes of a failed log.
const (
	LogFailNone     LogFailCause = 0 // the log did not fail
	LogFailNoSpace  LogFailCause = 1 // ENOSPC or EDQUOT: the file system is full
	LogFailIO       LogFailCause = 2 // EIO: the device failed a write, a read or an fsync
	LogFailReadOnly LogFailCause = 3 // EROFS: the file system went read-only
	LogFailCorrupt  LogFailCause = 4 // a checksum or a structure on disk did not verify
	LogFailOther    LogFailCause = 5 // any other error (the node's log line and status carry it)

	logFailCauseMax = LogFailOther
)

func (c LogFailCause) String() string {
	switch c {
	case LogFailNone:
		return "none"
	case LogFailNoSpace:
		return "no_space"
	case LogFailIO:
		return "io_error"
	case LogFailReadOnly:
		return "read_only"
	case LogFailCorrupt:
		return "corrupt"
	case LogFailOther:
		return "other"
	}
	return "cause(" + strconv.Itoa(int(c)) + ")"
}

// CopyTail is what a node publishes about one stream copy it holds: its role and epoch, its durable
// record and cursor event tails, its flags, and why its log failed (CopyLogFailed). Wire layout, 40
// bytes: stream u64 | incarnation u32 | epoch u32 | record_tail u64 | cursor_tail u64 | role u8 |
// flags u8 | log_fail_cause u8 | reserved [5].
type CopyTail struct {
	Stream      uint64
	Incarnation uint32
	Epoch       uint32
	RecordTail  uint64
	CursorTail  uint64
	Role        CopyRole
	Flags       CopyFlags
	Cause       LogFailCause // set exactly when Flags has CopyLogFailed
}

// causeValid reports whether a copy entry's cause matches its CopyLogFailed flag.
func (c *CopyTail) causeValid() bool {
	if c.Flags&CopyLogFailed == 0 {
		return c.Cause == LogFailNone
	}
	return c.Cause != LogFailNone && c.Cause <= logFailCauseMax
}

// HeartbeatFlags are a node heartbeat's flag bits.
type HeartbeatFlags uint8

// FlagShuttingDown: the node is stopping cleanly; the controller fails its streams over at once
// instead of waiting out liveness (eager failover).
const FlagShuttingDown HeartbeatFlags = 1

const heartbeatFlagsKnown = FlagShuttingDown

// NodeHeartbeat is a node's liveness message to the metadata primary (command 52). Sequence grows
// with every heartbeat the node sends. The body lists every copy the node holds with its tails.
//
// Header: node-level (Group and Incarnation 0); EntryCount is the number of copies. Area: sequence u64
// | flags u8. Body: CopyTailSize bytes per copy.
type NodeHeartbeat struct {
	Sequence uint64
	Flags    HeartbeatFlags
}

const (
	heartbeatSequence = 0
	heartbeatFlags    = 8
	heartbeatAreaEnd  = 9
)

// AppendNodeHeartbeat appends a node heartbeat frame carrying m and copies to dst.
func AppendNodeHeartbeat(dst []byte, from From, m *NodeHeartbeat, copies []CopyTail) []byte {
	assert.True(m.Flags&^heartbeatFlagsKnown == 0, "wire: node heartbeat with unknown flags")
	assert.True(len(copies) <= BodySizeMax/CopyTailSize, "wire: node heartbeat past one frame")
	h := Header{Command: CommandNodeHeartbeat}
	put64(h.Area[:], heartbeatSequence, m.Sequence)
	h.Area[heartbeatFlags] = uint8(m.Flags)
	dst, start := startFrame(dst, from, &h)
	for _, c := range copies {
		dst = AppendCopyTail(dst, c)
	}
	return endFrame(dst, start, uint32(len(copies)))
}

// AppendCopyTail writes one copy's 40 bytes at the end of dst in place, for a heartbeat body built
// entry by entry between BeginFrame and EndFrame.
func AppendCopyTail(dst []byte, c CopyTail) []byte {
	assert.True(c.Stream != 0, "wire: copy tail for stream 0")
	assert.True(c.Role.valid(), "wire: copy tail with an unknown role")
	assert.True(c.Flags&^copyFlagsKnown == 0, "wire: copy tail with unknown flags")
	assert.True(c.causeValid(), "wire: copy tail whose log-fail cause does not match its flag")
	n := len(dst)
	dst = grow(dst, CopyTailSize)
	b := dst[n:]
	put64(b, 0, c.Stream)
	put32(b, 8, c.Incarnation)
	put32(b, 12, c.Epoch)
	put64(b, 16, c.RecordTail)
	put64(b, 24, c.CursorTail)
	put64(b, 32, uint64(c.Role)|uint64(c.Flags)<<8|uint64(c.Cause)<<16)
	return dst
}

// DecodeNodeHeartbeat reads a parsed node heartbeat frame; its copies alias body and are checked one
// by one as they are read, so one bad copy does not hide the others.
func DecodeNodeHeartbeat(h *Header, body []byte) (NodeHeartbeat, CopyTails, error) {
	if err := checkHeader(h, CommandNodeHeartbeat, heartbeatAreaEnd); err != nil {
		return NodeHeartbeat{}, CopyTails{}, err
	}
	m := NodeHeartbeat{
		Sequence: get64(h.Area[:], heartbeatSequence),
		Flags:    HeartbeatFlags(h.Area[heartbeatFlags]),
	}
	if m.Flags&^heartbeatFlagsKnown != 0 {
		return NodeHeartbeat{}, CopyTails{}, malformed("heartbeat flags")
	}
	if uint64(len(body)) != uint64(h.EntryCount)*CopyTailSize {
		return NodeHeartbeat{}, CopyTails{}, ErrEntryCount
	}
	return m, CopyTails{raw: nilIfEmpty(body)}, nil
}

// CopyTails is a node heartbeat's list of copies, read in place.
type CopyTails struct {
	raw []byte
}

// Len is the number of entries, good and bad.
func (l CopyTails) Len() int { return len(l.raw) / CopyTailSize }

// At decodes entry i (0 <= i < Len). A bad entry (stream 0, unknown role, unknown flags or reserved
// bytes set, a log-fail cause without its flag or a flag without a known cause) returns a reason
// that matches ErrBadEntry; the caller skips it and reads on.
func (l CopyTails) At(i int) (CopyTail, error) {
	assert.True(i >= 0 && i < l.Len(), "wire: copy tail index out of range")
	b := l.raw[i*CopyTailSize : (i+1)*CopyTailSize]
	tail := get64(b, 32)
	c := CopyTail{
		Stream:      get64(b, 0),
		Incarnation: get32(b, 8),
		Epoch:       get32(b, 12),
		RecordTail:  get64(b, 16),
		CursorTail:  get64(b, 24),
		Role:        CopyRole(tail),
		Flags:       CopyFlags(tail >> 8),
		Cause:       LogFailCause(tail >> 16),
	}
	switch {
	case c.Stream == 0:
		return CopyTail{}, ErrEntryGroup
	case tail>>24 != 0 || c.Flags&^copyFlagsKnown != 0 || !c.causeValid():
		return CopyTail{}, ErrEntryReserved
	case !c.Role.valid():
		return CopyTail{}, ErrEntryRole
	}
	return c, nil
}
