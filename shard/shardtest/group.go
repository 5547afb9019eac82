// Package shardtest holds a minimal shard.Group for tests: a primary or a backup with a commit counter
// and, optionally, a real superblock file. It stands in for the metadata group and stream copies, which
// implement shard.Group in their own packages.
//
// It owns nothing but its counters and its superblock file; it never starts a goroutine. Every method
// the shard calls runs on the shard's goroutine; tests read the results after the node stopped (Stop
// returns after the shard goroutines ended, which orders those reads after every write).
package shardtest

import (
	"encoding/binary"
	"errors"
	"os"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/ringstream/ringstream/ring"
	"github.com/ringstream/ringstream/shard"
	"github.com/ringstream/ringstream/shard/heartbeat"
	"github.com/ringstream/ringstream/wire"
)

// Group is a test group. Set its fields before the node starts.
type Group struct {
	Cluster    uint64 // for frames the group builds (FrameAt)
	Node       uint16 // this node's id, for frames the group builds
	GroupID    uint64
	Inc        uint32
	ViewNumber uint32
	SelfIndex  uint8
	PrimaryIdx uint8
	MemberList []shard.Member
	// CommitEvery makes a primary busy: on every tick that is a multiple of CommitEvery one more op is
	// committed and all backups hold it (0: the commit point never moves, the group goes idle).
	CommitEvery int
	// Ready, when set, keeps a primary offline until it reads true (tests set it once every link is
	// up); the primary comes online on its first tick after that. Backups follow from the start.
	Ready *atomic.Bool
	// Superblock, when set, is saved (view and commit, 16 bytes at offset 0) before the first batch and
	// before each batch that carries a new commit point (R12).
	Superblock *os.File
	// FailSaves makes that many superblock saves fail (they are issued on fd -1).
	FailSaves int
	// FrameAt, FrameTo: from tick FrameAt the group sends one group frame (stream prepare, body
	// "ringstream") to node FrameTo through its shard, again each tick while the link is down (a
	// peer node that started late); FrameErr holds the result.
	FrameAt   uint64
	FrameTo   uint16
	FrameErr  error
	frameSent bool
	// NopAt: on tick NopAt the group queues a Nop on its shard's ring; NopDone counts its completions.
	NopAt   uint64
	NopErr  error
	NopDone int
	// ParkAt: on tick ParkAt the group queues a Recv on a socket nobody writes to, an operation only
	// its OnStop ends (by shutting the socket down). With IgnoreStop, OnStop does nothing and the
	// shard's drain deadline has to end it. ParkErr, ParkDone and Stops are results; Close releases
	// the socket after the node stopped.
	ParkAt     uint64
	IgnoreStop bool
	ParkErr    error
	ParkDone   int
	Stops      int
	park       [2]int
	parkBuf    []byte

	commit     uint64
	role       shard.Role
	roleSet    bool
	online     bool
	heard      bool   // a Commit was accepted
	OnlineTick uint64 // the tick the primary came online (result)
	sender     shard.Sender
	sbBuf      []byte
	sbSaved    uint64 // commit the superblock holds
	sbValid    bool   // the superblock was saved at least once
	sbPending  uint64 // commit of the save in flight
	sbInFlight bool

	// DiscardReceived keeps OnCommit from recording entries (allocation tests).
	DiscardReceived bool

	// Results, read after Stop.
	Received       []wire.CommitEntry      // accepted Commit entries, in order
	Replies        []wire.CommitReplyEntry // replies that counted
	Frames         [][]byte                // other frames, copied
	SilentEvents   int
	SilentHeard    int // silent reports after a Commit was accepted (the primary went quiet after it spoke)
	QuorumLost     int
	SaveErrors     int
	SavesCompleted int
}

// SetRole sets the role before start (default: primary when SelfIndex == PrimaryIdx, else backup).
func (g *Group) SetRole(r shard.Role) { g.role, g.roleSet = r, true }

func (g *Group) ID() uint64          { return g.GroupID }
func (g *Group) Incarnation() uint32 { return g.Inc }
func (g *Group) View() uint32        { return g.ViewNumber }
func (g *Group) Self() uint8         { return g.SelfIndex }
func (g *Group) Primary() uint8      { return g.PrimaryIdx }
func (g *Group) Members() []shard.Member {
	return g.MemberList
}
func (g *Group) Quorum() int { return len(g.MemberList)/2 + 1 }

func (g *Group) Role() shard.Role {
	if g.roleSet {
		return g.role
	}
	if g.SelfIndex == g.PrimaryIdx {
		if g.Ready != nil && !g.online {
			return shard.RoleOffline
		}
		return shard.RolePrimary
	}
	return shard.RoleBackup
}

// OnTick commits one more op on a busy primary every CommitEvery ticks.
func (g *Group) OnTick(tick uint64) {
	if !g.online && (g.Ready == nil || g.Ready.Load()) {
		g.online = true
		g.OnlineTick = tick
	}
	if g.CommitEvery > 0 && g.Role() == shard.RolePrimary && tick%uint64(g.CommitEvery) == 0 {
		g.commit++
	}
	if g.NopAt != 0 && tick == g.NopAt {
		g.NopErr = g.sender.Ring().Nop(nopHandler{g}, 7, 0)
	}
	if g.ParkAt != 0 && tick == g.ParkAt {
		g.ParkErr = g.parkRecv()
	}
	if g.FrameAt != 0 && tick >= g.FrameAt && !g.frameSent {
		frame := wire.BeginFrame(nil, &wire.Header{Cluster: g.Cluster, Sender: g.Node,
			Command: wire.CommandStreamPrepare, Group: g.GroupID, Incarnation: g.Inc})
		frame = append(frame, "ringstream"...)
		wire.EndFrame(frame, 0)
		g.FrameErr = g.Send(g.FrameTo, frame)
		g.frameSent = !errors.Is(g.FrameErr, shard.ErrLinkDown)
	}
}

func (g *Group) Commit() uint64 { return g.commit }

// CommitHolders says every backup holds the newest op.
func (g *Group) CommitHolders() heartbeat.Members {
	var m heartbeat.Members
	for _, mem := range g.MemberList {
		if mem.Index != g.SelfIndex {
			m |= heartbeat.MemberOf(mem.Index)
		}
	}
	return m
}

func (g *Group) PendingSuperblock() (shard.SuperblockSave, bool) {
	if g.Superblock == nil || (g.sbValid && g.commit == g.sbSaved) || g.sbInFlight {
		return shard.SuperblockSave{}, false
	}
	if g.sbBuf == nil {
		g.sbBuf = make([]byte, 16)
	}
	binary.LittleEndian.PutUint64(g.sbBuf[0:], uint64(g.ViewNumber))
	binary.LittleEndian.PutUint64(g.sbBuf[8:], g.commit)
	g.sbPending = g.commit
	g.sbInFlight = true
	fd := int(g.Superblock.Fd())
	if g.FailSaves > 0 {
		g.FailSaves--
		fd = -1
	}
	return shard.SuperblockSave{FD: fd, Buf: g.sbBuf, Off: 0}, true
}

func (g *Group) SuperblockSaved(err error) {
	g.sbInFlight = false
	if err != nil {
		g.SaveErrors++
		return
	}
	g.SavesCompleted++
	g.sbSaved = g.sbPending
	g.sbValid = true
}

func (g *Group) OnCommit(from uint16, e wire.CommitEntry) {
	g.heard = true
	if !g.DiscardReceived {
		g.Received = append(g.Received, e)
	}
	if e.Commit > g.commit {
		g.commit = e.Commit
	}
}

func (g *Group) OnCommitReply(from uint16, e wire.CommitReplyEntry) { g.Replies = append(g.Replies, e) }
func (g *Group) OnQuorumLost()                                      { g.QuorumLost++ }
func (g *Group) Attach(s shard.Sender)                              { g.sender = s }

func (g *Group) OnPrimarySilent() {
	g.SilentEvents++
	if g.heard {
		g.SilentHeard++
	}
}

func (g *Group) OnFrame(from uint16, h *wire.Header, body []byte) {
	g.Frames = append(g.Frames, append([]byte(nil), body...))
}

// Send sends a frame to node through the group's shard. Call it from the shard goroutine only.
func (g *Group) Send(node uint16, frame []byte) error {
	if g.sender == nil {
		return errors.New("shardtest: group not attached")
	}
	return g.sender.SendFrame(node, frame)
}

// parkRecv queues a Recv that completes only when the socket is shut down.
func (g *Group) parkRecv() error {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	g.park = [2]int{fds[0], fds[1]}
	g.parkBuf = make([]byte, 64)
	return g.sender.Ring().Recv(nopHandler{g}, 8, fds[0], g.parkBuf, 0, 0)
}

// OnStop ends the parked Recv (shard.Stopper), unless IgnoreStop.
func (g *Group) OnStop() {
	g.Stops++
	if g.IgnoreStop || g.parkBuf == nil {
		return
	}
	_ = unix.Shutdown(g.park[0], unix.SHUT_RDWR)
}

// Close releases the parked socket. Call it after the node stopped.
func (g *Group) Close() {
	if g.parkBuf != nil {
		unix.Close(g.park[0])
		unix.Close(g.park[1])
		g.parkBuf = nil
	}
}

// nopHandler receives the completion of the group's Nop.
type nopHandler struct{ g *Group }

func (h nopHandler) Complete(c ring.Completion) {
	switch {
	case c.Tag == 7 && c.Res == 0:
		h.g.NopDone++
	case c.Tag == 8:
		h.g.ParkDone++
	}
}
