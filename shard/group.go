package shard

import (
	"github.com/ringstream/ringstream/ring"
	"github.com/ringstream/ringstream/shard/heartbeat"
	"github.com/ringstream/ringstream/wire"
)

// Role is a group's role on this node.
type Role uint8

const (
	RoleOffline Role = iota // not serving: off every schedule (recovering, view change in progress)
	RolePrimary             // leads the group: on the shard's heartbeat schedule (R1-R6)
	RoleBackup              // follows the primary of its current view: watched by a heartbeat timeout
)

func (r Role) String() string {
	switch r {
	case RolePrimary:
		return "primary"
	case RoleBackup:
		return "backup"
	}
	return "offline"
}

// Member is one member of a group: its member index inside the group and the node that holds it. The
// same node has a different member index in each group.
type Member struct {
	Index uint8  // 0 .. heartbeat.MembersMax-1
	Node  uint16 // node id
}

// SuperblockSave is a group's pending superblock write. The shard issues the saves of one tick together
// on its ring (a write linked to an fdatasync per group) before that tick's batches (R12). Buf must stay
// untouched until the group hears SuperblockSaved.
type SuperblockSave struct {
	FD  int
	Buf []byte
	Off int64
}

// Group is what a shard schedules and routes to: the metadata group (engine/vsr through
// engine/metagroup) and, later, stream copies. Every method runs on the owning shard's goroutine; a
// group must not block and must not keep the slices it is handed past the call.
//
// The shard reads the state methods at every tick it polls the group (every tick, unless the group is
// a Sleeper that sleeps): a change of Role or View restarts the heartbeat
// schedule (a primary's first heartbeat goes on the next send tick, R2), and a higher Commit while
// primary owes an eager Commit to the members in CommitHolders (R6).
type Group interface {
	// ID is the group id (a stream's id; the metadata group's fixed id). Never 0.
	ID() uint64
	// Incarnation is partition_incarnation: it grows each time a group of this id is created again.
	Incarnation() uint32
	// View is the current view (epoch).
	View() uint32
	// Commit is commit_min: the highest op committed here.
	Commit() uint64
	// CommitHolders is the set of backups known to hold op Commit() (primary only), for eager Commits.
	CommitHolders() heartbeat.Members
	// Role is this node's role in the group now.
	Role() Role
	// Self is this node's member index in the group; Primary the member index of the current view's
	// primary. Members lists every member, self included; the shard does not keep the slice.
	Self() uint8
	Primary() uint8
	Members() []Member
	// Quorum is how many members, the primary included, must be heard in the quorum window (R24).
	Quorum() int

	// PendingSuperblock returns the superblock save the group needs before its next Commit entries
	// may join a batch, if any (R12). While a save is pending or failed, the group is left out.
	PendingSuperblock() (SuperblockSave, bool)
	// SuperblockSaved reports the outcome of the save PendingSuperblock returned (nil: durable).
	SuperblockSaved(err error)

	// OnCommit receives a Commit entry from the primary of the current view that is newer than any seen
	// (R8, R22); the shard has restarted the heartbeat timeout and queued the CommitReply (R27).
	OnCommit(from uint16, e wire.CommitEntry)
	// OnCommitReply receives a CommitReply entry that counted in the quorum window (R24, R29).
	OnCommitReply(from uint16, e wire.CommitReplyEntry)
	// OnPrimarySilent says the backup's heartbeat timeout expired: the primary is silent (R8, R22).
	OnPrimarySilent()
	// OnQuorumLost says the primary did not hear a quorum of CommitReplies within
	// commit_heartbeat_timeout: it must step down (R24).
	OnQuorumLost()
	// OnFrame receives any other frame addressed to the group (its header's Group is ID()). The body
	// aliases a receive buffer: copy what must outlive the call.
	OnFrame(from uint16, h *wire.Header, body []byte)
	// OnTick runs once per shard tick, before the shard reads the group's state: the group advances
	// its own tick-counted timers here (R5).
	OnTick(tick uint64)
	// Attach hands the group its Sender once, when the group is added to a shard.
	Attach(s Sender)
}

// Sender is what a shard offers the groups it holds: sending any frame to a peer node through the
// shard's link (an outbox for arbitrary frames, sent with the next batch of the tick), and the shard's
// ring for the group's own I/O. Every method runs on the shard's goroutine only.
type Sender interface {
	// Ring is the shard's ring. A group may queue its own operations on it (with its own Handler and
	// tags) from the shard goroutine, from its first OnTick on; their completions are dispatched in the
	// shard's loop. An ErrQueueFull is the group's to handle (try again on a later tick).
	Ring() ring.Ring
	// SendFrame appends one whole frame (header and body, as wire.BeginFrame and wire.EndFrame built it)
	// to the outbox of node. It returns ErrLinkDown when the link is not connected (counted, not
	// retried) and ErrOutboxFull when the outbox has no room; the frame is then not sent.
	SendFrame(node uint16, frame []byte) error
	// SendData queues one frame to node as its header (wire.BeginFrame, then wire.EndHeader over
	// body) and its body, sent with one SENDMSG straight from these slices: nothing is copied, so
	// neither may change until done.DataSent(node, tag, err) runs. Data frames leave in the order they
	// were queued; with the outbox they take turns at frame boundaries. It returns ErrLinkDown (done
	// is not called) or ErrOutboxFull when DataQueueFrames are queued (OnOutboxDrained follows).
	SendData(node uint16, header, body []byte, done DataSent, tag uint64) error
	// Wake puts group back on every tick's poll if it sleeps (Sleeper): something changed it that
	// the shard did not route to it. Cheap, and a no-op on a group that is awake or unknown.
	Wake(group uint64)
}

// Sleeper is an optional interface of a Group whose own timers are rare: a copy of a quiet stream
// has nothing to time between its idle checks. After polling such a group on a tick, the shard asks
// it until which tick it needs no OnTick, and when the shard's own side of the group (its heartbeat
// schedule) owes nothing either, the group sleeps: it is not polled, and costs nothing per tick,
// until that tick, the shard's next send tick (where every group is polled and the schedule kept), or
// anything reaching it, whichever comes first. What reaches it: a Commit, a CommitReply, a frame, a
// save's outcome, a link event, or the group's own Sender.Wake (for inputs the shard does not route,
// such as a client's produce). A missed Wake costs the group at most the time to the next send tick;
// it never sleeps longer.
type Sleeper interface {
	// SleepUntil is asked on tick now, after the group's OnTick and the shard's reads: the tick the
	// group next needs OnTick at for its own timers, or any value not above now+1 to be polled on
	// every tick. The answer holds until the group changes; the group calls Sender.Wake when it does.
	SleepUntil(now uint64) uint64
}

// Stopper is an optional interface of a Group. When its shard begins to drain for Stop, OnStop runs
// once on the shard goroutine: the group must finish or abandon the operations it queued on the ring
// (close or shut down their files and sockets, queue nothing new). Operations that are still in flight
// after Config.DrainTimeout are abandoned with the ring and their completions never arrive.
type Stopper interface {
	OnStop()
}
