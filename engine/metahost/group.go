package metahost

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/engine/vsr"
	"github.com/ringstream/ringstream/shard"
	"github.com/ringstream/ringstream/shard/heartbeat"
	"github.com/ringstream/ringstream/wire"
)

// ErrConfig: a Config is invalid.
var ErrConfig = errors.New("engine: invalid metadata group configuration")

// Config sets up this node's replica of the metadata group.
type Config struct {
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
	// TickPeriod is shard 0's tick (cluster.tick_ms). With it the controller hears the ticks that
	// passed on the clock beyond those shard 0 ran (Controller.Tick's skipped): a shard busier than
	// its tick runs its ticks late, and the eager failover grace is wall time. 0: ticks run only.
	TickPeriod time.Duration
	Logger     *slog.Logger // nil: slog.Default()
}

// ProposeResult is the outcome of a proposal: the committed op's number and result, or why not.
// vsr.ErrNotPrimary after the proposal was accepted means the replica lost its primacy with the op in
// flight: its outcome is unknown, and the proposer retries with the same client and request.
type ProposeResult struct {
	Op     uint64
	Result []byte
	Err    error
}

// Status is what the group last published.
type Status struct {
	View    uint32
	Op      uint64
	Commit  uint64
	Primary bool
	Normal  bool
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
	// CheckpointBytes is the size of the replica's checkpoint in force, what a state transfer to a
	// replica behind the log moves (in chunks of vsr.Config.SnapshotChunkBytes).
	CheckpointBytes int
	// Transfer is the replica's state transfer counters (vsr.Stats: transfers begun and installed,
	// chunks out and in, chunks asked again, transfers restarted, abandoned and refused).
	Transfer TransferStats
}

// TransferStats counts the replica's state transfers (vsr.Stats holds the meaning of each).
type TransferStats struct {
	Sent, Installed, ChunksOut, ChunksIn, ChunksReasked, Restarted, Abandoned, Refused uint64
	// LastRefusal is the cause of the latest refused checkpoint ("" before any).
	LastRefusal string
}

type proposal struct {
	client, request uint64
	op              []byte
	done            chan ProposeResult
}

type waitKey struct{ client, request uint64 }

// Group is the metadata group's replica on this node; it implements shard.Group.
type Group struct {
	lastTick uint64        // shard 0's tick number at the last OnTick
	lastAt   time.Time     // when the last OnTick ran (TickPeriod set)
	lagNs    time.Duration // clock time past whole ticks since lastAt, carried to the next tick
	cfg      Config
	log      *slog.Logger
	replica  *vsr.Replica
	state    *meta.State
	store    *metaStore
	sender   shard.Sender
	self     uint8
	nodeOf   [vsr.MembersMax]uint16

	msg      wire.VSRMessage
	frame    []byte
	waiters  map[waitKey]chan ProposeResult
	advanced uint64
	stats    Stats
	// refusalLogged is the cause of the last refused checkpoint logged (logTransfer).
	refusalLogged string
	// persistErr is the store's failure once the replica heard of it.
	persistErr error
	// commitHeard and heardPrimary are Status's CommitHeard and HeardPrimary (shard 0 only).
	commitHeard  uint64
	heardPrimary bool
	// changed is closed by publish when the view, the primary, the normal status or the applied
	// commit moved; nil until Changed asks for one (shard 0 only).
	changed chan struct{}

	mu           sync.Mutex
	inbox        []proposal
	inboxPending atomic.Bool
	wake         atomic.Pointer[func()]
	status       Status

	links metaLinks
	ctl   Controller // the controller on this replica (nil: none)
	// noYield (benchmarks only): pump does not yield after answering a proposer, the cost before.
	noYield bool
	// stepped: frames reached the replica since the last pump; OnTurn pumps them all at once.
	stepped bool
	// pumpEachFrame (benchmarks only): OnFrame pumps after every frame, the cost before.
	pumpEachFrame bool
}

// Stats counts what the adapter dropped, and the eager failovers it started.
type Stats struct {
	BadFrames, SendFailures uint64
	EagerFailovers          uint64 // view changes started because the primary's link stayed down
}

// New opens the storage under cfg.Dir and resumes the replica from it.
func New(cfg Config) (*Group, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	g := &Group{cfg: cfg, log: cfg.Logger.With("group", "meta"), state: meta.NewState(),
		waiters: make(map[waitKey]chan ProposeResult)}
	found := false
	for _, m := range cfg.Members {
		if int(m.Index) >= vsr.MembersMax || int(m.Index) >= len(cfg.Members) {
			return nil, fmt.Errorf("%w: member index %d of %d members", ErrConfig, m.Index, len(cfg.Members))
		}
		g.nodeOf[m.Index] = m.Node
		if m.Node == cfg.Node {
			g.self, found = m.Index, true
		}
	}
	if !found {
		return nil, fmt.Errorf("%w: node %d is not a member", ErrConfig, cfg.Node)
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
		return nil, fmt.Errorf("%w: %w", ErrStorage, err)
	}
	g.store, g.replica, g.cfg = store, r, cfg
	g.publish()
	return g, nil
}

// Controller is a controller host running inside the replica (engine/controlhost's Host): the group
// feeds it shard 0's ticks and links, lets it step and carry out its effects in each pump, and hands it
// the replies to its proposals. Every call is on shard 0's goroutine.
type Controller interface {
	// Tick is one tick of shard 0; skipped is how many ticks shard 0 skipped before it (a stall: the
	// tick number moved by skipped+1), for the timers that measure wall time.
	Tick(skipped uint64)
	// Step runs the controller once; it reports whether it proposed anything (the pump goes on).
	Step() bool
	// Replied takes rep when it answers one of the controller's proposals (reported true).
	Replied(rep vsr.Reply) bool
	// LinkUp and LinkDown are shard 0's link events.
	LinkUp(node uint16)
	LinkDown(node uint16)
}

// SetController puts c on the replica (before the node starts; nil: none).
func (g *Group) SetController(c Controller) { g.ctl = c }

// Replica is the VSR replica, for the controller host (on shard 0's goroutine only).
func (g *Group) Replica() *vsr.Replica { return g.replica }

// Node and Cluster are the node and cluster the replica belongs to.
func (g *Group) Node() uint16    { return g.cfg.Node }
func (g *Group) Cluster() uint64 { return g.cfg.Cluster }

// Dir is the replica's directory.
func (g *Group) Dir() string { return g.cfg.Dir }

// Pump carries the replica's pending effects out now (shard 0's goroutine only): the controller host
// calls it after it stepped the replica outside the group's own events.
func (g *Group) Pump() { g.pump() }

// SendFrame sends frame to node over shard 0's link; false when the group is not attached yet or the
// link refused it.
func (g *Group) SendFrame(to uint16, frame []byte) bool {
	return g.sender != nil && g.sender.SendFrame(to, frame) == nil
}

// Close closes the files. Call it after the node stopped (its shards drained their rings, so no
// persist of the group is in flight).
func (g *Group) Close() { g.store.close() }

// Propose asks the replica to order op for client's request. The channel receives the result once the
// op commits, or ErrNotPrimary / ErrPipelineFull at once. Safe from any goroutine.
func (g *Group) Propose(client, request uint64, op []byte) <-chan ProposeResult {
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
func (g *Group) Status() Status {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.status
}

// State is the replicated state. Read it only when the node is stopped.
func (g *Group) State() *meta.State { return g.state }

// Digest is the replica's digest of its state machine and client table (equal on replicas at one
// commit). It encodes the whole state: call it, as State, only once the node stopped.
func (g *Group) Digest() uint64 { return g.replica.Digest() }

// shard.Group: identity and state, read by the shard each tick.

func (g *Group) ID() uint64          { return shard.MetadataGroupID }
func (g *Group) Incarnation() uint32 { return 0 }
func (g *Group) View() uint32        { return g.replica.View() }
func (g *Group) Commit() uint64      { return g.replica.Commit() }
func (g *Group) Self() uint8         { return g.self }
func (g *Group) Primary() uint8      { return g.replica.PrimaryIndex() }
func (g *Group) Members() []shard.Member {
	return g.cfg.Members
}
func (g *Group) Quorum() int { return len(g.cfg.Members)/2 + 1 }

func (g *Group) CommitHolders() heartbeat.Members { return heartbeat.Members(g.replica.Holders()) }

func (g *Group) Role() shard.Role {
	switch {
	case g.replica.IsPrimary():
		return shard.RolePrimary
	case g.replica.Normal():
		return shard.RoleBackup
	}
	return shard.RoleOffline
}

func (g *Group) PendingSuperblock() (shard.SuperblockSave, bool) {
	return shard.SuperblockSave{}, false
}
func (g *Group) SuperblockSaved(error) {}
func (g *Group) Attach(s shard.Sender) { g.sender = s }

// shard.Group: events.

func (g *Group) OnCommit(_ uint16, e wire.CommitEntry) {
	if e.View == g.replica.View() {
		g.commitHeard, g.heardPrimary = max(g.commitHeard, e.Commit), true
	}
	g.replica.OnCommitEntry(e.View, e.Commit)
	g.pump()
}

func (g *Group) OnCommitReply(uint16, wire.CommitReplyEntry) {}

func (g *Group) OnPrimarySilent() {
	g.log.Info("primary silent: starting a view change", "view", g.replica.View())
	g.replica.OnPrimarySilent()
	g.pump()
}

func (g *Group) OnQuorumLost() {
	g.log.Info("quorum lost: stepping down", "view", g.replica.View())
	g.replica.OnQuorumLost()
	g.pump()
}

func (g *Group) OnFrame(from uint16, h *wire.Header, body []byte) {
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

func (g *Group) OnTick(tick uint64) {
	if g.store.rg == nil && g.sender != nil {
		g.store.attach(g.sender.Ring())
	}
	g.store.kick() // a persist the ring had no room for on an earlier tick
	g.takeProposals()
	g.takeDurable()
	g.replica.Tick()
	g.checkLinks(tick)
	if g.ctl != nil {
		var skipped uint64
		if g.lastTick != 0 && tick > g.lastTick+1 {
			skipped = tick - g.lastTick - 1
		}
		if g.cfg.TickPeriod > 0 {
			now := time.Now()
			if !g.lastAt.IsZero() {
				var late uint64
				late, g.lagNs = lateTicks(now.Sub(g.lastAt), g.lagNs, g.cfg.TickPeriod)
				skipped = max(skipped, late)
			}
			g.lastAt = now
		}
		g.ctl.Tick(skipped)
	}
	g.lastTick = tick
	g.pump()
}

// lateTicks is how many whole ticks of period beyond one passed in elapsed (plus carry, the time
// past whole ticks left from before), and the time past whole ticks to carry on: ticks that ran 3 ms
// apart at a 2 ms period make one late tick every second tick.
func lateTicks(elapsed, carry, period time.Duration) (uint64, time.Duration) {
	total := max(elapsed, 0) + carry
	whole := total / period
	if whole < 1 {
		return 0, 0 // ran early: counted as a whole tick already, nothing carried
	}
	return uint64(whole - 1), total - whole*period
}

// takeProposals hands the proposals waiting in the inbox to the replica.
func (g *Group) takeProposals() {
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
func (g *Group) takeDurable() {
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
func (g *Group) pump() {
	g.stepped = false
	woke := false
	for {
		fx := g.replica.Ready()
		if fx.PersistID == 0 && len(fx.Messages) == 0 && len(fx.Replies) == 0 {
			// The controller acts on what the replica applied; what it proposes is pumped again.
			if g.ctl == nil || !g.ctl.Step() {
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
			if g.ctl != nil && g.ctl.Replied(rep) {
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
func (g *Group) persist(fx *vsr.Effects) {
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

// publish copies the replica's state for Status. It takes no digest of the state: that encodes the
// whole state (about 1 s at 1,000,000 streams), which a publish after every commit cannot afford
// (Digest, once the node stopped).
func (g *Group) publish() {
	st := Status{View: g.replica.View(), Op: g.replica.Op(), Commit: g.replica.Commit(),
		Primary: g.replica.IsPrimary(), Normal: g.replica.Normal(),
		Recovering: g.replica.Recovering(), PersistErr: g.persistErr, EagerFailovers: g.stats.EagerFailovers,
		CommitHeard: g.commitHeard, HeardPrimary: g.heardPrimary,
		CheckpointBytes: g.replica.CheckpointBytes(), Transfer: transferStats(g.replica.Stats())}
	g.mu.Lock()
	prev := g.status
	g.status = st
	g.mu.Unlock()
	g.logTransfer(&st, &prev)
	if g.changed != nil && (st.View != prev.View || st.Commit != prev.Commit || st.Primary != prev.Primary ||
		st.Normal != prev.Normal) {
		close(g.changed)
		g.changed = nil
	}
}

func transferStats(s *vsr.Stats) TransferStats {
	return TransferStats{Sent: s.SnapshotsSent, Installed: s.SnapshotsIn, ChunksOut: s.SnapshotChunksOut,
		ChunksIn: s.SnapshotChunksIn, ChunksReasked: s.SnapshotChunksReasked, Restarted: s.SnapshotTransfersRestarted,
		Abandoned: s.SnapshotTransfersAbandoned, Refused: s.SnapshotsRefused, LastRefusal: s.LastSnapshotRefusal}
}

// logTransfer writes one line for each state transfer that ended other than installed: refused (an
// ERROR naming the cause: the replica stays behind until a transfer succeeds, and one past
// snapshot_bytes_max never will) or abandoned (a WARN: the sender went silent; the repair asks again).
// A refusal or abandon that repeats (the repair asks again every few hundred ms) is logged at its 1st,
// 2nd, 4th, 8th... occurrence and whenever its cause changes; the counters carry every one.
func (g *Group) logTransfer(now, before *Status) {
	st, prev := &now.Transfer, &before.Transfer
	if st.Refused != prev.Refused && (isPowerOfTwo(st.Refused) || st.LastRefusal != g.refusalLogged) {
		g.refusalLogged = st.LastRefusal
		g.log.Error("metadata state transfer refused: this replica stays behind the log until a checkpoint is "+
			"installed", "cause", st.LastRefusal, "refused", st.Refused)
	}
	if st.Abandoned != prev.Abandoned && isPowerOfTwo(st.Abandoned) {
		g.log.Warn("metadata state transfer abandoned: no chunk for several repair timeouts; asking again",
			"abandoned", st.Abandoned)
	}
	if st.Installed != prev.Installed {
		g.log.Info("metadata checkpoint installed from a peer", "checkpoint_bytes", now.CheckpointBytes,
			"chunks_in", st.ChunksIn, "restarted", st.Restarted)
	}
}

func isPowerOfTwo(n uint64) bool { return n&(n-1) == 0 }

// Changed returns a channel that is closed the next time the replica's view, primary, normal status
// or applied commit moves: a long-poll reader of the metadata state (a lookup waiting for a newer
// assignment) waits on it instead of polling. Shard 0 only; every caller until that change gets the
// same channel.
func (g *Group) Changed() <-chan struct{} {
	if g.changed == nil {
		g.changed = make(chan struct{})
	}
	return g.changed
}
