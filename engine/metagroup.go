// Package engine is the node: it composes the shards with the protocol packages below it.
//
// Node (node*.go) builds one node from its engine/config value: shards, the metadata replica and
// controller host on a metadata member, the node heartbeat, the stream host, the client request
// handler (clientreq*.go: metadata requests served on the primary's node and forwarded there from the
// others, data requests handed to the stream's copy) and the admin HTTP listener (admin*.go, JSON
// documents in engine/adminapi). Its decisions are listed in Node's doc comment.
//
// The metagroup*.go files are the metadata group's adapter (owned by the VSR work): MetaGroup runs one
// vsr.Replica over engine/meta's State as a shard.Group on shard 0, and persists the replica's log,
// superblock and checkpoints to files of engine/vsr's format. It never interprets metadata ops (meta
// does) nor decides anything about the protocol (vsr does): it moves inputs in and effects out.
//
// Decisions where the design is silent:
//   - Persistence runs on shard 0's ring (Sender.Ring), on the shard goroutine, with the store as the
//     Handler: no goroutine or ring of its own. Each persist is one linked chain (snapshot write +
//     fsync for a checkpoint; log write, the superblock copies' writes, one fdatasync; see
//     metagroup_storage.go for the layout); one chain is in flight at a time,
//     in the replica's order, and the rest wait in the store's queue. The chain's last completion
//     makes the persist durable: the store marks it done in the completion, starts the next persist
//     there, and the replica hears of it (Advance) in the same loop turn (OnTurn, the shard's TurnHook). A chain is queued only when the
//     ring has room for all of it; otherwise (ErrQueueFull) the persist stays queued and the next
//     tick tries again. The shard's superblock saves (R12) are not used: they run only for
//     primaries that owe Commit entries, while a VSR backup must persist every prepare before it
//     acknowledges it.
//   - PendingSuperblock is always empty: the replica's own superblock is written before any message
//     that depends on it, and the commit point in a Commit entry needs no save (a replica that forgets
//     it learns it again).
//   - After a checkpoint, a log file past LogCompactBytes is rewritten without the records at or below
//     the checkpoint, before the next persist starts, every step on the ring (metagroup_compact.go):
//     read the log, open log.new, write and fdatasync it, rename it over the log linked to an fsync of
//     the directory (opened once at open). When the ring has no room for a step, that compaction is
//     given up and the next checkpoint tries again.
//   - Opening and recovering the files runs before the shard starts, with plain syscalls on the
//     opening goroutine. Only a directory made by FormatMeta (`ringstream format`) opens: a missing or
//     empty one is ErrMetaUnformatted, so a replica that lost its disk never starts as a new one. The
//     format says whether the replica is a member of a cluster being created (fresh) or replaces a
//     lost one (it recovers through the group, vsr's recovering status, before it acts).
//   - One fdatasync per persist: the superblock copies live in a header area of the log file (two
//     areas of vsr.SuperblockCopies copies, each in its own 8 KiB), a persist writes its log records
//     and, to every copy of the area of its sequence, its superblock with the same records inline,
//     and one fdatasync covers both (vsr's storage notes say why any subset of those writes that a
//     power loss keeps leaves the new state or the previous one). Records over vsr.InlineMax and
//     checkpoints cost a second fsync, before the copies. At open, the copy in force is rewritten to
//     every copy of its area that differs and the records only it holds are appended to the log
//     (plain pwrite, one fdatasync) before the replica acts; storage Recover could not prove is left
//     as it is (the replica recovers).
//   - A failed persist (any step of the chain: EIO, ENOSPC, a short write) stops the store and the
//     replica hears of it in the same loop turn (vsr.Replica.PersistFailed): it acknowledges nothing more and
//     is never primary again until the node restarts it; Status reports the error. The recovery nonce
//     is drawn from crypto/rand at open.
//   - The metadata group's Commit entries carry incarnation 0.
//   - Frames reach the replica as they arrive (OnFrame steps it) and their effects are pumped once per
//     loop turn, in OnTurn: the prepares of one burst become one persist on a backup instead of one
//     persist each, which queued one behind another (TestMetaGroup_BackupPersistsABurstTogether; the
//     failover of 300 streams at once, whose controller fills the pipeline, took 1.4 s before and
//     0.55-0.61 s after: BENCHMARKS.md).
//   - A pump that answered a waiting proposer yields (runtime.Gosched) before the shard goroutine
//     blocks in the ring again: the woken goroutine would otherwise wait for sysmon to retake the P
//     of a thread parked in io_uring_enter (BenchmarkMetaGroupCommitYield measures both).
//   - Propose and Status may be called from any goroutine: a proposal waits in a locked inbox until
//     the next loop turn of shard 0, which Propose wakes (SetWake: the node passes Node.Wake(0)), or
//     the next tick without one; Status is a copy the shard goroutine publishes after each event. What
//     a turn's events make the replica send leaves in that turn (OnTurn runs before the sends).
//   - Eager failover (metagroup_events.go): the grace counts ticks from the tick after shard 0's link
//     to the primary's node went down; only that shard's own link counts (it is where the group's
//     frames leave). It fires once per view, and only on a backup in normal status.
//
// The controller of the metadata primary (controlhost.go, engine/control) runs inside MetaGroup on
// shard 0, and every node sends its node heartbeat from shard 0 (nodebeat.go). Decisions there:
//   - ControlHost acts only while the replica is primary in normal status; it is fed ticks, a
//     StateChanged whenever the commit point moved, node heartbeats, shard 0's link events for every
//     peer and seal replies; its effects are carried out in the same pump: proposals go straight into
//     the replica as client ControlClientBase | view<<16 | node (a fresh client per view it leads,
//     requests from 1, so no earlier controller's request is ever stale), seals and assignments leave
//     as frames on shard 0's links (to this node: LocalFrame).
//   - A proposal refused at once (not primary, pipeline full) and every proposal out when the replica
//     loses primacy go back as ProposalDropped; a reply as ProposalDone with its decoded result.
//   - Node heartbeats arriving on another shard are copied to shard 0 with Node.Run. Seal replies
//     are addressed to the stream's group: the stream host of the primary's node hands them over
//     (ControlHost.OnSealReply), from its copy's group or, when the node holds no copy, from the
//     frames the shard could not route (ControlHost.OnUnroutedFrame, passed on to Next).
//   - ControlHost.Status (attention, counters) is refreshed every StatusEveryTicks and when primacy
//     changes, not at every tick: the attention list walks every stream.
//   - NodeBeat is a group of its own (NodeBeatGroupID: the highest id below the stream hosts' that
//     lands on shard 0; stream ids grow from 1), offline in every role, so it has shard 0's ticks and
//     links without a shard hook. Its heartbeat to its own node goes to Self in place of a link. A
//     clean shutdown sends the shutdown notice first (NodeBeat.Shutdown, before Node.Stop): a notice
//     queued in OnStop would meet links already shut down. A lost notice costs the eager grace.
package engine

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/engine/vsr"
	"github.com/ringstream/ringstream/shard"
	"github.com/ringstream/ringstream/shard/heartbeat"
	"github.com/ringstream/ringstream/wire"
)

// ErrMetaConfig: a MetaGroupConfig is invalid.
var ErrMetaConfig = errors.New("engine: invalid metadata group configuration")

// MetaGroupConfig sets up this node's replica of the metadata group.
type MetaGroupConfig struct {
	Dir     string         // storage directory (data/meta)
	Cluster uint64         // cluster id, stamped on every frame
	Node    uint16         // this node's id
	Members []shard.Member // every replica: member index and node id, this node included
	VSR     vsr.Config     // ReplicaCount and Self are filled in from Members and Node
	// LogCompactBytes: after a checkpoint, a log file past this size is rewritten without the records
	// the checkpoint made dead (default 64 MiB).
	LogCompactBytes int64
	// EagerFailoverGraceTicks (eager_failover_grace): a backup whose link to the primary's node closed
	// and stayed closed this many ticks starts a view change (default DefaultEagerFailoverGraceTicks;
	// at most VSR.ViewChangeTimeoutTicks).
	EagerFailoverGraceTicks uint64
	Logger                  *slog.Logger // nil: slog.Default()
}

// ProposeResult is the outcome of a proposal: the committed op's number and result, or why not.
// vsr.ErrNotPrimary after the proposal was accepted means the replica lost its primacy with the op in
// flight: its outcome is unknown, and the proposer retries with the same client and request.
type ProposeResult struct {
	Op     uint64
	Result []byte
	Err    error
}

// MetaStatus is what the group last published.
type MetaStatus struct {
	View    uint32
	Op      uint64
	Commit  uint64
	Primary bool
	Normal  bool
	Digest  uint64
	// Recovering: the replica lost its state (or could not prove it) and is learning the group's.
	Recovering bool
	// PersistErr is the persist failure that took the replica out of the group (it acknowledges
	// nothing more and is never primary until the node restarts it); nil while its storage works.
	PersistErr error
	// EagerFailovers counts the view changes this replica started because the link to the primary's
	// node stayed down for the grace.
	EagerFailovers uint64
	// CommitHeard is the highest commit number a primary's Commit entry carried since the replica
	// opened, and HeardPrimary whether one came at all: a backup whose Commit has reached it has
	// caught up with the group (engine's /readyz), however far behind it restarted.
	CommitHeard  uint64
	HeardPrimary bool
}

type proposal struct {
	client, request uint64
	op              []byte
	done            chan ProposeResult
}

type waitKey struct{ client, request uint64 }

// MetaGroup is the metadata group's replica on this node; it implements shard.Group.
type MetaGroup struct {
	cfg     MetaGroupConfig
	log     *slog.Logger
	replica *vsr.Replica
	state   *meta.State
	store   *metaStore
	sender  shard.Sender
	self    uint8
	nodeOf  [vsr.MembersMax]uint16

	msg      wire.VSRMessage
	frame    []byte
	waiters  map[waitKey]chan ProposeResult
	advanced uint64
	stats    MetaGroupStats
	digestAt uint64 // commit+1 the digest was taken at
	digest   uint64
	// persistErr is the store's failure once the replica heard of it.
	persistErr error
	// commitHeard and heardPrimary are MetaStatus's CommitHeard and HeardPrimary (shard 0 only).
	commitHeard  uint64
	heardPrimary bool

	mu           sync.Mutex
	inbox        []proposal
	inboxPending atomic.Bool
	wake         atomic.Pointer[func()]
	status       MetaStatus

	links metaLinks
	ctl   *ControlHost // the controller on this replica (nil: none)
	// noYield (benchmarks only): pump does not yield after answering a proposer, the cost before.
	noYield bool
	// stepped: frames reached the replica since the last pump; OnTurn pumps them all at once.
	stepped bool
	// pumpEachFrame (benchmarks only): OnFrame pumps after every frame, the cost before.
	pumpEachFrame bool
}

// MetaGroupStats counts what the adapter dropped, and the eager failovers it started.
type MetaGroupStats struct {
	BadFrames, SendFailures uint64
	EagerFailovers          uint64 // view changes started because the primary's link stayed down
}

// NewMetaGroup opens the storage under cfg.Dir and resumes the replica from it.
func NewMetaGroup(cfg MetaGroupConfig) (*MetaGroup, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	g := &MetaGroup{cfg: cfg, log: cfg.Logger.With("group", "meta"), state: meta.NewState(),
		waiters: make(map[waitKey]chan ProposeResult)}
	found := false
	for _, m := range cfg.Members {
		if int(m.Index) >= vsr.MembersMax || int(m.Index) >= len(cfg.Members) {
			return nil, fmt.Errorf("%w: member index %d of %d members", ErrMetaConfig, m.Index, len(cfg.Members))
		}
		g.nodeOf[m.Index] = m.Node
		if m.Node == cfg.Node {
			g.self, found = m.Index, true
		}
	}
	if !found {
		return nil, fmt.Errorf("%w: node %d is not a member", ErrMetaConfig, cfg.Node)
	}
	cfg.VSR.ReplicaCount, cfg.VSR.Self = len(cfg.Members), g.self
	if err := cfg.VSR.Validate(); err != nil {
		return nil, err
	}
	if err := cfg.validateGrace(); err != nil {
		return nil, err
	}
	if cfg.LogCompactBytes == 0 {
		cfg.LogCompactBytes = 64 << 20
	}
	store, d, err := openMetaStore(cfg.Dir, vsr.Identity{Cluster: cfg.Cluster, Node: cfg.Node, Replica: g.self},
		cfg.LogCompactBytes, g.log)
	if err != nil {
		return nil, err
	}
	if d.Recovering {
		if d.RecoveryNonce, err = recoveryNonce(); err != nil {
			store.close()
			return nil, err
		}
		g.log.Warn("metadata replica starts in recovery: it takes part in nothing until a quorum told it the "+
			"group's state", "cause", d.Cause)
	}
	r, err := vsr.New(cfg.VSR, g.state, d)
	if err != nil {
		store.close()
		return nil, fmt.Errorf("%w: %w", ErrMetaStorage, err)
	}
	g.store, g.replica, g.cfg = store, r, cfg
	g.publish()
	return g, nil
}

// Close closes the files. Call it after the node stopped (its shards drained their rings, so no
// persist of the group is in flight).
func (g *MetaGroup) Close() { g.store.close() }

// Propose asks the replica to order op for client's request. The channel receives the result once the
// op commits, or ErrNotPrimary / ErrPipelineFull at once. Safe from any goroutine.
func (g *MetaGroup) Propose(client, request uint64, op []byte) <-chan ProposeResult {
	done := make(chan ProposeResult, 1)
	g.mu.Lock()
	g.inbox = append(g.inbox, proposal{client: client, request: request, op: append([]byte(nil), op...), done: done})
	g.mu.Unlock()
	g.inboxPending.Store(true)
	if wake := g.wake.Load(); wake != nil {
		(*wake)()
	}
	return done
}

// Status returns what the group last published. Safe from any goroutine.
func (g *MetaGroup) Status() MetaStatus {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.status
}

// State is the replicated state. Read it only when the node is stopped.
func (g *MetaGroup) State() *meta.State { return g.state }

// shard.Group: identity and state, read by the shard each tick.

func (g *MetaGroup) ID() uint64          { return shard.MetadataGroupID }
func (g *MetaGroup) Incarnation() uint32 { return 0 }
func (g *MetaGroup) View() uint32        { return g.replica.View() }
func (g *MetaGroup) Commit() uint64      { return g.replica.Commit() }
func (g *MetaGroup) Self() uint8         { return g.self }
func (g *MetaGroup) Primary() uint8      { return g.replica.PrimaryIndex() }
func (g *MetaGroup) Members() []shard.Member {
	return g.cfg.Members
}
func (g *MetaGroup) Quorum() int { return len(g.cfg.Members)/2 + 1 }

func (g *MetaGroup) CommitHolders() heartbeat.Members { return heartbeat.Members(g.replica.Holders()) }

func (g *MetaGroup) Role() shard.Role {
	switch {
	case g.replica.IsPrimary():
		return shard.RolePrimary
	case g.replica.Normal():
		return shard.RoleBackup
	}
	return shard.RoleOffline
}

func (g *MetaGroup) PendingSuperblock() (shard.SuperblockSave, bool) {
	return shard.SuperblockSave{}, false
}
func (g *MetaGroup) SuperblockSaved(error) {}
func (g *MetaGroup) Attach(s shard.Sender) { g.sender = s }

// shard.Group: events.

func (g *MetaGroup) OnCommit(_ uint16, e wire.CommitEntry) {
	if e.View == g.replica.View() {
		g.commitHeard, g.heardPrimary = max(g.commitHeard, e.Commit), true
	}
	g.replica.OnCommitEntry(e.View, e.Commit)
	g.pump()
}

func (g *MetaGroup) OnCommitReply(uint16, wire.CommitReplyEntry) {}

func (g *MetaGroup) OnPrimarySilent() {
	g.log.Info("primary silent: starting a view change", "view", g.replica.View())
	g.replica.OnPrimarySilent()
	g.pump()
}

func (g *MetaGroup) OnQuorumLost() {
	g.log.Info("quorum lost: stepping down", "view", g.replica.View())
	g.replica.OnQuorumLost()
	g.pump()
}

func (g *MetaGroup) OnFrame(from uint16, h *wire.Header, body []byte) {
	if !h.Command.IsVSR() || h.Cluster != g.cfg.Cluster {
		g.stats.BadFrames++
		return
	}
	if err := wire.DecodeVSR(h, body, &g.msg); err != nil {
		g.stats.BadFrames++
		return
	}
	if int(g.msg.Replica) >= len(g.cfg.Members) || g.nodeOf[g.msg.Replica] != from {
		g.stats.BadFrames++ // the member index does not belong to the sending node
		return
	}
	g.replica.Step(&g.msg)
	if g.pumpEachFrame {
		g.pump()
		return
	}
	g.stepped = true // pumped once for the whole turn, in OnTurn
}

func (g *MetaGroup) OnTick(tick uint64) {
	if g.store.rg == nil && g.sender != nil {
		g.store.attach(g.sender.Ring())
	}
	g.store.kick() // a persist the ring had no room for on an earlier tick
	g.takeProposals()
	g.takeDurable()
	g.replica.Tick()
	g.checkLinks(tick)
	if g.ctl != nil {
		g.ctl.tick()
	}
	g.pump()
}

// takeProposals hands the proposals waiting in the inbox to the replica.
func (g *MetaGroup) takeProposals() {
	if !g.inboxPending.Swap(false) {
		return
	}
	g.mu.Lock()
	inbox := g.inbox
	g.inbox = nil
	g.mu.Unlock()
	for _, p := range inbox {
		err := g.replica.Propose(p.client, p.request, p.op)
		switch {
		case err == nil || errors.Is(err, vsr.ErrStaleRequest):
			g.waiters[waitKey{p.client, p.request}] = p.done
		default:
			p.done <- ProposeResult{Err: err}
		}
	}
}

// takeDurable tells the replica which persists are durable and, after a failed one, that it must stop.
func (g *MetaGroup) takeDurable() {
	done, err := g.store.durable()
	if done > g.advanced {
		g.advanced = done
		g.replica.Advance(done)
	}
	if err != nil && g.persistErr == nil {
		g.persistErr = err
		g.log.Error("metadata replica out of the group: a persist failed", "err", err)
		g.replica.PersistFailed()
	}
}

// pump carries out the replica's effects: persists to the store's queue, messages to the shard's links,
// replies to the waiting proposers; when it woke one, it yields the P to it.
func (g *MetaGroup) pump() {
	g.stepped = false
	woke := false
	for {
		fx := g.replica.Ready()
		if fx.PersistID == 0 && len(fx.Messages) == 0 && len(fx.Replies) == 0 {
			// The controller acts on what the replica applied; what it proposes is pumped again.
			if g.ctl == nil || !g.ctl.step() {
				break
			}
			continue
		}
		if fx.PersistID != 0 {
			g.persist(fx)
		}
		for i := range fx.Messages {
			env := &fx.Messages[i]
			g.frame = wire.AppendVSRFrame(g.frame[:0], wire.From{Cluster: g.cfg.Cluster, Node: g.cfg.Node},
				shard.MetadataGroupID, &env.Msg)
			if g.sender == nil || g.sender.SendFrame(g.nodeOf[env.To], g.frame) != nil {
				g.stats.SendFailures++ // the protocol re-sends on its timeouts
			}
		}
		for _, rep := range fx.Replies {
			if g.ctl != nil && g.ctl.replied(rep) {
				continue
			}
			key := waitKey{rep.Client, rep.Request}
			if ch, ok := g.waiters[key]; ok {
				ch <- ProposeResult{Op: rep.Op, Result: append([]byte(nil), rep.Result...)}
				delete(g.waiters, key)
				woke = true
			}
		}
	}
	if woke && !g.noYield {
		// The proposer just made runnable waits in this P's run queue, and this goroutine (locked to
		// its thread) goes on to block in io_uring_enter, a syscall the scheduler cannot see through:
		// the proposer would run only once sysmon retakes the P, 100-200 us later as measured (one
		// op on three nodes: 0.6-0.7 ms with the yield, 0.76-0.87 without). Yielding hands it the P now.
		runtime.Gosched()
	}
	if len(g.waiters) > 0 && !g.replica.IsPrimary() {
		// The op may still commit in the next view: the proposer retries with the same request
		// number, and the client table answers it without applying it twice.
		for key, ch := range g.waiters {
			ch <- ProposeResult{Err: vsr.ErrNotPrimary}
			delete(g.waiters, key)
		}
	}
	g.publish()
}

// persist hands the effects' storage writes to the store, as bytes in a reused buffer.
func (g *MetaGroup) persist(fx *vsr.Effects) {
	p := buildPersist(g.store.buffer(), fx, g.store.brokenNoInline || g.store.twoSync)
	p.split = p.split || g.store.twoSync
	g.store.submit(p)
}

// buildPersist lays out a persist's bytes in buf: the snapshot record, the log records, and the
// superblock copy carrying those records inline, or none when they are more than vsr.InlineMax (the
// store then syncs the log before it writes the copies) or when noInline (a broken variant for tests).
func buildPersist(buf []byte, fx *vsr.Effects, noInline bool) metaPersist {
	p := metaPersist{id: fx.PersistID, snapSlot: fx.SnapshotSlot, snapOp: fx.Superblock.SnapshotOp,
		area: vsr.AreaOf(fx.Superblock.Sequence)}
	snapEnd := 0
	if fx.Snapshot != nil {
		buf = vsr.AppendSnapshotRecord(buf, fx.Snapshot)
		snapEnd = len(buf)
	}
	for i := range fx.Entries {
		buf = vsr.AppendLogRecord(buf, &fx.Entries[i])
	}
	logEnd := len(buf)
	inline := buf[snapEnd:logEnd]
	if p.split = len(inline) > vsr.InlineMax; p.split || noInline {
		inline = nil
	}
	buf = vsr.AppendSuperblockCopy(buf, fx.Superblock, inline)
	if snapEnd > 0 {
		p.snapshot = buf[:snapEnd]
	}
	if logEnd > snapEnd {
		p.log = buf[snapEnd:logEnd]
	}
	p.copy, p.buf = buf[logEnd:], buf
	return p
}

// publish copies the replica's state for Status. The digest is taken only when the commit moved.
func (g *MetaGroup) publish() {
	if c := g.replica.Commit() + 1; c != g.digestAt {
		g.digestAt, g.digest = c, g.replica.Digest()
	}
	st := MetaStatus{View: g.replica.View(), Op: g.replica.Op(), Commit: g.replica.Commit(),
		Primary: g.replica.IsPrimary(), Normal: g.replica.Normal(), Digest: g.digest,
		Recovering: g.replica.Recovering(), PersistErr: g.persistErr, EagerFailovers: g.stats.EagerFailovers,
		CommitHeard: g.commitHeard, HeardPrimary: g.heardPrimary}
	g.mu.Lock()
	g.status = st
	g.mu.Unlock()
}
