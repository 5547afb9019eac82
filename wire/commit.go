package wire

import (
	"encoding/binary"
	"errors"

	"github.com/ringstream/ringstream/internal/assert"
)

const (
	// CommitEntrySize is the size of one Commit entry (R10).
	CommitEntrySize = 40
	// CommitReplyEntrySize is the size of one CommitReply entry (R26).
	CommitReplyEntrySize = 32
	// CommitEntriesMax is the most Commit entries one frame holds, about 1.7 million (R13). A batch is
	// never split across frames; the encoder asserts the limit.
	CommitEntriesMax = BodySizeMax / CommitEntrySize
	// CommitReplyEntriesMax is the most CommitReply entries one frame holds.
	CommitReplyEntriesMax = BodySizeMax / CommitReplyEntrySize
)

// HeartbeatState says why a Commit entry was sent (R21). The wire holds no interval.
type HeartbeatState uint8

// The three heartbeat states. Any other value makes the entry bad (R17, R21).
const (
	HeartbeatBusy  HeartbeatState = 1 // heartbeat of a busy group
	HeartbeatIdle  HeartbeatState = 2 // heartbeat of an idle group
	HeartbeatEager HeartbeatState = 3 // eager Commit right after the commit point moved
)

// Valid reports whether s is one of the three states.
func (s HeartbeatState) Valid() bool {
	return s >= HeartbeatBusy && s <= HeartbeatEager
}

// String names the state.
func (s HeartbeatState) String() string {
	switch s {
	case HeartbeatBusy:
		return "busy"
	case HeartbeatIdle:
		return "idle"
	case HeartbeatEager:
		return "eager"
	}
	return "invalid"
}

// ErrBadEntry matches every reason an entry of a batch is rejected alone (errors.Is(reason, ErrBadEntry)).
// The frame's other entries are still handed on (R17, R29).
var ErrBadEntry = errors.New("wire: bad entry")

// Reasons an entry is bad. Each is its own sentinel and also matches ErrBadEntry.
var (
	ErrEntryGroup          error = &entryError{"wire: entry for group 0"}
	ErrEntryReserved       error = &entryError{"wire: entry reserved bytes not zero"}
	ErrEntryHeartbeatState error = &entryError{"wire: entry heartbeat_state outside 1..3"}
	ErrEntryRole           error = &entryError{"wire: entry role unknown"}
)

type entryError struct{ msg string }

func (e *entryError) Error() string        { return e.msg }
func (e *entryError) Is(target error) bool { return target == ErrBadEntry }

// CommitEntry is one group's Commit inside a batch (R10). Layout, 40 bytes: group u64 |
// partition_incarnation u32 | view u32 | commit u64 | timestamp_monotonic u64 | heartbeat_state u8 |
// replica u8 | reserved [6].
type CommitEntry struct {
	Group              uint64
	Incarnation        uint32 // partition_incarnation
	View               uint32
	Commit             uint64 // the primary's commit point (commit_min)
	TimestampMonotonic uint64 // grows per group (R14)
	HeartbeatState     HeartbeatState
	Replica            uint8 // the sender's member index in this group
}

// CommitReplyEntry is one backup's reply inside a batch (R26). Layout, 32 bytes: group u64 |
// partition_incarnation u32 | view u32 | timestamp_monotonic u64 | replica u8 | reserved [7].
type CommitReplyEntry struct {
	Group              uint64
	Incarnation        uint32
	View               uint32
	TimestampMonotonic uint64 // echoes the Commit it answers
	Replica            uint8  // the replying backup's member index in this group
}

// AppendCommitEntry writes e's 40 bytes at the end of dst, in place, and returns dst. It allocates only
// when dst has to grow.
func AppendCommitEntry(dst []byte, e CommitEntry) []byte {
	assert.True(e.Group != 0, "wire: Commit entry for group 0")
	assert.True(e.HeartbeatState.Valid(), "wire: Commit entry with an invalid heartbeat_state")
	n := len(dst)
	dst = grow(dst, CommitEntrySize)
	b := dst[n : n+CommitEntrySize]
	binary.LittleEndian.PutUint64(b[0:], e.Group)
	binary.LittleEndian.PutUint32(b[8:], e.Incarnation)
	binary.LittleEndian.PutUint32(b[12:], e.View)
	binary.LittleEndian.PutUint64(b[16:], e.Commit)
	binary.LittleEndian.PutUint64(b[24:], e.TimestampMonotonic)
	// heartbeat_state, replica and the six reserved zero bytes in one store.
	binary.LittleEndian.PutUint64(b[32:], uint64(e.HeartbeatState)|uint64(e.Replica)<<8)
	return dst
}

// AppendCommitReplyEntry writes e's 32 bytes at the end of dst, in place, and returns dst.
func AppendCommitReplyEntry(dst []byte, e CommitReplyEntry) []byte {
	assert.True(e.Group != 0, "wire: CommitReply entry for group 0")
	n := len(dst)
	dst = grow(dst, CommitReplyEntrySize)
	b := dst[n : n+CommitReplyEntrySize]
	binary.LittleEndian.PutUint64(b[0:], e.Group)
	binary.LittleEndian.PutUint32(b[8:], e.Incarnation)
	binary.LittleEndian.PutUint32(b[12:], e.View)
	binary.LittleEndian.PutUint64(b[16:], e.TimestampMonotonic)
	binary.LittleEndian.PutUint64(b[24:], uint64(e.Replica))
	return dst
}

// decodeCommitEntry reads and checks one 40-byte entry. b holds exactly CommitEntrySize bytes.
func decodeCommitEntry(b []byte) (CommitEntry, error) {
	var e CommitEntry
	if err := decodeCommitEntryInto(b, &e); err != nil {
		return CommitEntry{}, err
	}
	return e, nil
}

// decodeCommitEntryInto reads and checks one 40-byte entry into e; on error e is partly written.
func decodeCommitEntryInto(b []byte, e *CommitEntry) error {
	b = b[:CommitEntrySize]
	tail := binary.LittleEndian.Uint64(b[32:])
	e.Group = binary.LittleEndian.Uint64(b[0:])
	e.Incarnation = binary.LittleEndian.Uint32(b[8:])
	e.View = binary.LittleEndian.Uint32(b[12:])
	e.Commit = binary.LittleEndian.Uint64(b[16:])
	e.TimestampMonotonic = binary.LittleEndian.Uint64(b[24:])
	e.HeartbeatState = HeartbeatState(tail)
	e.Replica = uint8(tail >> 8)
	if e.Group == 0 {
		return ErrEntryGroup
	}
	if !e.HeartbeatState.Valid() {
		return ErrEntryHeartbeatState
	}
	if tail>>16 != 0 {
		return ErrEntryReserved
	}
	return nil
}

// decodeCommitReplyEntry reads and checks one 32-byte entry. b holds exactly CommitReplyEntrySize bytes.
func decodeCommitReplyEntry(b []byte) (CommitReplyEntry, error) {
	var e CommitReplyEntry
	if err := decodeCommitReplyEntryInto(b, &e); err != nil {
		return CommitReplyEntry{}, err
	}
	return e, nil
}

// decodeCommitReplyEntryInto reads and checks one 32-byte entry into e; on error e is partly written.
func decodeCommitReplyEntryInto(b []byte, e *CommitReplyEntry) error {
	b = b[:CommitReplyEntrySize]
	tail := binary.LittleEndian.Uint64(b[24:])
	e.Group = binary.LittleEndian.Uint64(b[0:])
	e.Incarnation = binary.LittleEndian.Uint32(b[8:])
	e.View = binary.LittleEndian.Uint32(b[12:])
	e.TimestampMonotonic = binary.LittleEndian.Uint64(b[16:])
	e.Replica = uint8(tail)
	if e.Group == 0 {
		return ErrEntryGroup
	}
	if tail>>8 != 0 {
		return ErrEntryReserved
	}
	return nil
}
