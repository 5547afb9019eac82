package streamhost

import (
	"sync/atomic"
	"time"

	"github.com/ringstream/ringstream/engine/stagetrace"
	"github.com/ringstream/ringstream/engine/stream"
	"github.com/ringstream/ringstream/segment"
	"github.com/ringstream/ringstream/shard"
	"github.com/ringstream/ringstream/shard/heartbeat"
	"github.com/ringstream/ringstream/wire"
)

// shardHost is one shard's part of the host: the shard's segment Jobs, the copies on the shard, the
// buffers they share, and the turn hook that carries out their effects. It is a shard.Group of its
// own (offline: never scheduled, never addressed by a frame) so that the shard calls its OnTurn once
// per loop turn.
type shardHost struct {
	h       *Host
	index   int
	id      uint64
	send    shard.Sender
	jobs    *segment.Jobs
	copies  map[uint64]*copyGroup
	dirty   []*copyGroup // copies with inputs since their last Ready, in the order they got them
	nowMs   int64        // wall clock of this turn, for batch timestamps and retention ages
	tick    uint64
	pool    bufferPool
	sends   sends
	scratch []byte         // frames copied into the outbox (SendFrame)
	msg     stream.Message // the message of the frame being stepped
	// The last prepare header built, kept for the same frame to the next follower. lastMsg's
	// batches are compared by address only and dropped at the end of each turn.
	lastMsg    wire.StreamPrepare
	lastHeader []byte
	stats      Stats
	stopping   bool
	tr         *stagetrace.Shard // stage tracing (nil: none)
	// The copies' tails for the node heartbeats (tails.go): tails is read under Host.mu, one entry
	// per copy (tailCopies); tailsMarked are rebuilt at the next publish, through tailsNew; parked
	// counts the entries published parked.
	tails       []wire.CopyTail
	tailCopies  []*copyGroup
	tailsMarked []*copyGroup
	tailsNew    []slotTail
	parked      int
	// Parked copies and parks so far, as of the last publish (Host.ParkedCopies, any goroutine).
	parkedNow atomic.Int64
	parksNow  atomic.Uint64
}

// Stats counts what a shard's copies could not do, for tests and status.
type Stats struct {
	AppendBytes    uint64 // bytes of prepares sent from the owner's appends as encoded (SourceAppends)
	SendsRefused   uint64 // frames the shard refused (link down, outbox full): the copy resends
	SendsFailed    uint64 // data frames whose link failed before the kernel took them
	UnsyncedCopies uint64 // SourceUnsynced sends that joined several held buffers
	FramesDropped  uint64 // frames for a copy not serving, or of another command
	FramesBad      uint64 // frames that did not decode
	PrimarySilent  uint64 // a follower's owner fell silent (published in the node heartbeats)
	QuorumLost     uint64
	// EpochsQueued: log epochs storage refused as busy (another rare operation ran), kept and asked
	// for again: busy is not broken.
	EpochsQueued uint64
	// ReadsQueued: reads a log refused as busy (its read slots all in use), kept and started as
	// slots freed.
	ReadsQueued uint64
	// Parks: copies parked (segment.Copy.Park) after their open or after IdleCloseTicks unused;
	// Parked: serving copies parked, as the shard last published it (ParkedCopies).
	Parks  uint64
	Parked int
	// Failover.
	Seals              uint64 // seals answered sealed
	SealsStale         uint64 // seals answered stale (an older fence or transition)
	SealsFailed        uint64 // seals storage failed (not answered: the controller seals again)
	Cuts               uint64 // cuts onto the history starts (by seals and by assignments)
	CutsInsideBatch    uint64 // cuts that fell inside a batch, made at the batch's start instead
	Applied            uint64 // assignments applied (the copy reopened in its new role)
	InPlace            uint64 // of them, moved in place (no cut since the copy read its log)
	AssignmentsStale   uint64 // assignments at or below the copy's epoch or fence
	AssignmentsLeftOut uint64 // assignments that leave this node out (its copy stays as it is)
	BelowPrefix        uint64 // promotions below the confirmed prefix (accepted owner losses), logged
	// AssignmentsRefused: assignments that keep as owner a copy that reopened within its own epoch
	// and was not sealed for them (only a recovery may move it on: engine/stream's Restarted).
	AssignmentsRefused uint64
}

func newShardHost(h *Host, index int, id uint64) *shardHost {
	return &shardHost{h: h, index: index, id: id, jobs: segment.NewJobs(), copies: map[uint64]*copyGroup{},
		tr: h.cfg.Stages.Shard(index)}
}

// markDirty queues cg's Ready for the end of this turn.
func (sh *shardHost) markDirty(cg *copyGroup) {
	cg.wake()
	if !cg.dirty {
		cg.dirty = true
		sh.dirty = append(sh.dirty, cg)
	}
}

// OnTurn carries out the effects of every copy that had inputs this turn, then polls the shard's
// jobs, which resumes the rare operations and flushes every copy's group commit: the appends of
// this turn leave in one group commit per log, and the frames queued here leave in this turn.
func (sh *shardHost) OnTurn() {
	sh.nowMs = time.Now().UnixMilli()
	for i := 0; i < len(sh.dirty); i++ { // carrying out may dirty more copies: they run too
		cg := sh.dirty[i]
		sh.dirty[i] = nil
		cg.dirty = false
		cg.carryOut()
	}
	sh.dirty = sh.dirty[:0]
	sh.lastMsg = wire.StreamPrepare{}
	sh.jobs.Poll()
}

// OnStop closes every copy's storage: the close jobs run in the turns of the shard's drain.
func (sh *shardHost) OnStop() {
	sh.stopping = true
	sh.jobs.Poll()
}

// OnTick counts ticks for retention; copies tick in their own OnTick.
func (sh *shardHost) OnTick(tick uint64) {
	sh.tick = tick
	if tick%publishEveryTicks == 0 {
		sh.publish()
	}
}

func (sh *shardHost) Attach(s shard.Sender) {
	sh.send = s
	sh.nowMs = time.Now().UnixMilli()
}

// The host group is offline: it is polled by the shard and never scheduled or addressed.
func (sh *shardHost) ID() uint64                       { return sh.id }
func (sh *shardHost) Incarnation() uint32              { return 1 }
func (sh *shardHost) View() uint32                     { return 0 }
func (sh *shardHost) Commit() uint64                   { return 0 }
func (sh *shardHost) CommitHolders() heartbeat.Members { return 0 }
func (sh *shardHost) Role() shard.Role                 { return shard.RoleOffline }
func (sh *shardHost) Self() uint8                      { return 0 }
func (sh *shardHost) Primary() uint8                   { return 0 }
func (sh *shardHost) Members() []shard.Member          { return nil }
func (sh *shardHost) Quorum() int                      { return 1 }
func (sh *shardHost) PendingSuperblock() (shard.SuperblockSave, bool) {
	return shard.SuperblockSave{}, false
}
func (sh *shardHost) SuperblockSaved(error)                       {}
func (sh *shardHost) OnCommit(uint16, wire.CommitEntry)           {}
func (sh *shardHost) OnCommitReply(uint16, wire.CommitReplyEntry) {}
func (sh *shardHost) OnPrimarySilent()                            {}
func (sh *shardHost) OnQuorumLost()                               {}
func (sh *shardHost) OnFrame(uint16, *wire.Header, []byte)        {}

var (
	_ shard.TurnHook = (*shardHost)(nil)
	_ shard.Stopper  = (*shardHost)(nil)
)
