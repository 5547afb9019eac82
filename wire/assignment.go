package wire

import (
	"github.com/ringstream/ringstream/internal/assert"
)

// AssignmentFollowersMax bounds a stream assignment's followers (the metadata state's CopiesMax, 7
// copies, less the owner).
const AssignmentFollowersMax = 6

// StreamAssignment carries one stream's assignment from the metadata primary to a node that holds, or
// is to hold, a copy (command 53), with the stream's history starts: before any role change at Epoch
// the copy cuts itself onto the recorded history, so it needs the starts with the assignment. A frame
// whose starts do not decode is refused whole, so a copy never applies an assignment without the
// starts it was recorded with (stream-failover spec: an unreadable list withholds the assignment).
//
// PolicyKind and PolicyCount are the confirm policy stamped on the assignment, in engine/meta's
// numbering (wire does not interpret them beyond carrying them). StartsVersion is the version of the
// starts list in the metadata state, so a copy can tell a newer list from an older one at one epoch.
//
// Header: Group is the stream id, Incarnation its incarnation, EntryCount the number of history starts.
// Area: epoch u32 | owner u16 | policy_kind u8 | policy_count u8 | follower_count u8 | reserved [7] |
// starts_version u64 | followers [6]u16 (unused slots zero). Body: history starts, 24 bytes each, every
// start's epoch at or below the assignment's epoch, strictly increasing.
type StreamAssignment struct {
	Stream        uint64
	Incarnation   uint32
	Epoch         uint32
	Owner         uint16
	PolicyKind    uint8
	PolicyCount   uint8
	StartsVersion uint64
	FollowerCount uint8
	Followers     [AssignmentFollowersMax]uint16 // the first FollowerCount, ascending
}

const (
	assignEpoch         = 0
	assignOwner         = 4
	assignPolicyKind    = 6
	assignPolicyCount   = 7
	assignFollowerCount = 8
	assignStartsVersion = 16
	assignFollowers     = 24
	assignAreaEnd       = assignFollowers + 2*AssignmentFollowersMax
)

// FollowerList returns the assignment's followers (aliasing m).
func (m *StreamAssignment) FollowerList() []uint16 { return m.Followers[:m.FollowerCount] }

// AppendStreamAssignment appends an assignment frame carrying m and the stream's history starts.
func AppendStreamAssignment(dst []byte, from From, m *StreamAssignment, starts []HistoryStart) []byte {
	assert.True(m.Stream != 0, "wire: assignment for stream 0")
	assert.True(m.Epoch != 0, "wire: assignment at epoch 0")
	assert.True(m.Owner != 0, "wire: assignment without an owner")
	assert.True(m.FollowerCount <= AssignmentFollowersMax, "wire: assignment with too many followers")
	assert.True(checkFollowers(m) == "", "wire: assignment followers not ascending, 0, or the owner")
	assert.True(len(starts) == 0 || starts[len(starts)-1].Epoch <= m.Epoch, "wire: history start past the assignment epoch")
	h := Header{Command: CommandStreamAssignment, Group: m.Stream, Incarnation: m.Incarnation}
	put32(h.Area[:], assignEpoch, m.Epoch)
	put16(h.Area[:], assignOwner, m.Owner)
	h.Area[assignPolicyKind] = m.PolicyKind
	h.Area[assignPolicyCount] = m.PolicyCount
	h.Area[assignFollowerCount] = m.FollowerCount
	put64(h.Area[:], assignStartsVersion, m.StartsVersion)
	for i, f := range m.FollowerList() {
		put16(h.Area[:], assignFollowers+2*i, f)
	}
	dst, start := startFrame(dst, from, &h)
	dst = appendHistoryStarts(dst, starts)
	return endFrame(dst, start, uint32(len(starts)))
}

// DecodeStreamAssignment reads a parsed assignment frame and its history starts, which alias body.
func DecodeStreamAssignment(h *Header, body []byte) (StreamAssignment, HistoryStarts, error) {
	if err := checkHeader(h, CommandStreamAssignment, assignAreaEnd); err != nil {
		return StreamAssignment{}, HistoryStarts{}, err
	}
	if !zero(h.Area[assignFollowerCount+1 : assignStartsVersion]) {
		return StreamAssignment{}, HistoryStarts{}, ErrReserved
	}
	m := StreamAssignment{
		Stream:        h.Group,
		Incarnation:   h.Incarnation,
		Epoch:         get32(h.Area[:], assignEpoch),
		Owner:         get16(h.Area[:], assignOwner),
		PolicyKind:    h.Area[assignPolicyKind],
		PolicyCount:   h.Area[assignPolicyCount],
		StartsVersion: get64(h.Area[:], assignStartsVersion),
		FollowerCount: h.Area[assignFollowerCount],
	}
	switch {
	case m.Stream == 0:
		return StreamAssignment{}, HistoryStarts{}, malformed("stream 0")
	case m.Epoch == 0:
		return StreamAssignment{}, HistoryStarts{}, malformed("epoch 0")
	case m.Owner == 0:
		return StreamAssignment{}, HistoryStarts{}, malformed("owner 0")
	case m.FollowerCount > AssignmentFollowersMax:
		return StreamAssignment{}, HistoryStarts{}, malformed("follower_count")
	}
	for i := range AssignmentFollowersMax {
		m.Followers[i] = get16(h.Area[:], assignFollowers+2*i)
	}
	if !zero(h.Area[assignFollowers+2*int(m.FollowerCount) : assignAreaEnd]) {
		return StreamAssignment{}, HistoryStarts{}, ErrReserved
	}
	if why := checkFollowers(&m); why != "" {
		return StreamAssignment{}, HistoryStarts{}, malformed(why)
	}
	starts, err := decodeHistoryStarts(h.EntryCount, body)
	if err != nil {
		return StreamAssignment{}, HistoryStarts{}, err
	}
	if n := starts.Len(); n > 0 && starts.At(n-1).Epoch > m.Epoch {
		return StreamAssignment{}, HistoryStarts{}, malformed("history start past the assignment epoch")
	}
	return m, starts, nil
}

// checkFollowers says what is wrong with m's followers, or "" when they are ascending, not 0 and not
// the owner.
func checkFollowers(m *StreamAssignment) string {
	for i, f := range m.FollowerList() {
		switch {
		case f == 0:
			return "follower 0"
		case f == m.Owner:
			return "owner is also a follower"
		case i > 0 && m.Followers[i-1] >= f:
			return "followers not strictly ascending"
		}
	}
	return ""
}
