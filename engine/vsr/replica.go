package vsr

import (
	"errors"
	"fmt"
	"math"

	"github.com/ringstream/ringstream/internal/assert"
	"github.com/ringstream/ringstream/wire"
)

// Expected refusals of Propose. Each has one meaning.
var (
	// ErrNotPrimary: this replica is not the primary of a view in normal status.
	ErrNotPrimary = errors.New("vsr: not the primary")
	// ErrPipelineFull: PipelineOpsMax ops are prepared and not committed yet.
	ErrPipelineFull = errors.New("vsr: pipeline full")
	// ErrStaleRequest: the client's request is older than its last, or already in the pipeline.
	ErrStaleRequest = errors.New("vsr: stale or duplicate request")
	// ErrPersistFailed: a persist of this replica failed; it takes part in nothing until restarted.
	ErrPersistFailed = errors.New("vsr: a persist failed")
)

type status uint8

const (
	statusNormal status = iota + 1
	statusViewChange
	// statusRecovering: the replica lost its state (or cannot prove it holds its latest) and learns
	// the group's from a quorum before it takes part in anything (recovering.go).
	statusRecovering
	// statusFailed: a persist failed (PersistFailed); the replica takes part in nothing more.
	statusFailed
)

func (s status) String() string {
	switch s {
	case statusNormal:
		return "normal"
	case statusViewChange:
		return "view_change"
	case statusRecovering:
		return "recovering"
	}
	return "failed"
}

// dvcRecord is one do-view-change the prospective primary holds (its entries copied).
type dvcRecord struct {
	received bool
	logView  uint32
	op       uint64
	commit   uint64
	logBase  uint64
	entries  []wire.VSREntry
}

// Replica is one member of the metadata group. All methods run on one goroutine; none blocks.
type Replica struct {
	cfg    Config
	sm     StateMachine
	quorum int

	status  status
	view    uint32
	logView uint32

	// The log holds ops logBase+1 .. op; logBaseHead is the checksum of the entry at logBase.
	log         []wire.VSREntry
	logBase     uint64
	logBaseHead uint64
	op          uint64
	commit      uint64 // commit_min: every op up to here is applied
	commitMax   uint64 // the highest commit this replica has heard of

	// The checkpoint in force.
	snapOp       uint64
	snapPayload  []byte
	snapChecksum uint64
	snapSlot     int
	snapAsked    bool             // a chunk of it was sent since it was taken (transfer.go)
	served       servedCheckpoint // an older checkpoint a peer is still pulling (transfer.go)

	clients clientTable
	result  []byte
	bodies  bodyArena

	// Primary, normal status: the highest op each member acknowledged in this view, and this
	// replica's own durable op in it.
	acked         [MembersMax]uint64
	durableOp     uint64
	startViewSent members // backups re-sent the start-view in this view

	// View change.
	svcFrom          members
	dvcSent          bool
	dvcs             [MembersMax]dvcRecord
	snapshotFrom     uint8 // member asked for a snapshot, while awaitingSnapshot
	awaitingSnapshot bool
	xfer             transfer // the checkpoint being assembled from a peer's chunks (transfer.go)
	repairAsked      uint64   // op last asked for outside the repair timeout
	startViewAsked   uint32   // view whose start-view was last asked for outside the repair timeout

	// Recovery (recovering.go): this start's nonce and the answers heard to it, by member.
	nonce     uint64
	responses [MembersMax]recoveryResponse

	prepareTimeout    Timeout
	repairTimeout     Timeout
	viewChangeTimeout Timeout

	// Persistence.
	identity        Identity
	fresh           bool // started with no durable state: every message waits for the first persist
	dirty           bool
	sequence        uint64
	persistNext     uint64
	persistDurable  uint64
	persists        []persistRecord
	pendingEntries  []wire.VSREntry
	pendingSnapshot []byte
	held            []held

	fx, ready Effects
	stats     Stats

	// broken holds deliberately wrong rules (broken.go), set only by test hooks in export_test.go to
	// prove the simulator's checks can fail.
	broken brokenRules
}

// Stats counts what the replica did and why it dropped messages. Reasons are counted, never errors.
type Stats struct {
	Dropped     map[string]uint64
	Applied     uint64
	ViewChanges uint64
	Checkpoints uint64
	// State transfer (transfer.go). SnapshotsSent: transfers begun (first chunks sent); SnapshotsIn:
	// checkpoints installed; SnapshotChunksOut and SnapshotChunksIn: chunks sent and taken;
	// SnapshotChunksReasked: chunks asked again after a repair timeout without one;
	// SnapshotTransfersRestarted: transfers begun again because the sender's checkpoint moved on;
	// SnapshotTransfersAbandoned: transfers given up after repair timeouts without a chunk;
	// SnapshotsRefused: checkpoints refused (past SnapshotBytesMax, or assembled and failing the
	// checksum, decode or op check).
	SnapshotsSent              uint64
	SnapshotsIn                uint64
	SnapshotChunksOut          uint64
	SnapshotChunksIn           uint64
	SnapshotChunksReasked      uint64
	SnapshotTransfersRestarted uint64
	SnapshotTransfersAbandoned uint64
	SnapshotsRefused           uint64
	LastSnapshotRefusal        string // the cause of the latest refused checkpoint
	Recoveries                 uint64 // recoveries completed (recovering.go)
}

// New returns a replica that resumes from d (Recover's result). sm must hold the initial state: New
// restores d's checkpoint into it and replays the log's committed ops. A replica that was primary of its
// view when it stopped does not resume as primary: it starts a view change, since it may have lost ops
// it had prepared but not persisted. With d.Recovering it starts in recovery (recovering.go): it acts on
// nothing (no vote, no prepare-ok, no view change) until a quorum has told it the group's state, and
// d.RecoveryNonce must be a number drawn at random for this start. The zero Durable with Fresh set is a
// new replica whose identity nobody checks (tests and the simulator).
func New(cfg Config, sm StateMachine, d Durable) (*Replica, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if d.Superblock.Sequence != 0 && d.Superblock.Replica != cfg.Self {
		return nil, fmt.Errorf("%w: formatted for replica %d, opened as replica %d", ErrIdentity,
			d.Superblock.Replica, cfg.Self)
	}
	if d.Recovering && d.RecoveryNonce == 0 {
		return nil, fmt.Errorf("%w: recovering with a zero nonce", ErrConfig)
	}
	r := &Replica{cfg: cfg, sm: sm, quorum: quorumOf(cfg.ReplicaCount), status: statusNormal,
		clients:           clientTable{max: cfg.ClientsMax},
		prepareTimeout:    newTimeout("prepare", cfg.PrepareTimeoutTicks),
		repairTimeout:     newTimeout("repair", cfg.RepairTimeoutTicks),
		viewChangeTimeout: newTimeout("view_change", cfg.ViewChangeTimeoutTicks+uint64(cfg.Self)*cfg.RepairTimeoutTicks),
		stats:             Stats{Dropped: make(map[string]uint64)},
		identity:          d.Superblock.Identity,
		sequence:          max(d.Superblock.Sequence, FormatSequence), // a replica's own persists follow the format's
	}
	r.log = make([]wire.VSREntry, 0, 2*cfg.CheckpointOps+uint64(cfg.PipelineOpsMax)+1)
	r.repairTimeout.Start()
	switch {
	case d.Recovering:
		r.startRecovery(d.Superblock.View, d.RecoveryNonce)
		return r, nil
	case d.Fresh:
		// Nothing leaves a fresh replica before its first superblock is durable. So a replica that
		// restarts with only the format's superblock sent nothing before, and may resume as primary of
		// view 0: no backup holds a prepare of its that it has forgotten.
		r.fresh, r.dirty = true, true
		if r.isPrimary() {
			r.prepareTimeout.Start()
		}
		return r, nil
	}
	if err := r.restore(d); err != nil {
		return nil, err
	}
	return r, nil
}

// restore loads d into a new replica.
func (r *Replica) restore(d Durable) error {
	sb := d.Superblock
	if sb.SnapshotOp > 0 {
		cp, err := decodeCheckpoint(d.Snapshot)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrStorageCorrupt, err)
		}
		if err := r.sm.Restore(cp.state); err != nil {
			return fmt.Errorf("%w: checkpoint state: %w", ErrStorageCorrupt, err)
		}
		r.clients.sessions = cp.sessions
		r.logBaseHead = cp.head
		r.snapPayload = append([]byte(nil), d.Snapshot...)
		r.snapChecksum = sb.SnapshotChecksum
	}
	r.snapOp, r.logBase, r.snapSlot = sb.SnapshotOp, sb.SnapshotOp, d.SnapSlot
	r.view, r.logView = sb.View, sb.LogView
	if !validChain(r.logBase, r.logBaseHead, true, d.Entries) || uint64(len(d.Entries)) != sb.Op-sb.SnapshotOp {
		return fmt.Errorf("%w: log chain", ErrStorageCorrupt)
	}
	for i := range d.Entries {
		r.log = append(r.log, r.ownEntry(&d.Entries[i]))
	}
	r.op = sb.Op
	r.commit, r.commitMax = r.snapOp, sb.Commit
	switch {
	case r.view > r.logView:
		r.status = statusViewChange
		r.viewChangeTimeout.Start()
	case r.isPrimaryOf(r.view):
		r.startViewChange(r.view + 1)
	}
	r.applyCommitted(sb.Commit)
	return nil
}

func copyEntry(e *wire.VSREntry) wire.VSREntry {
	c := *e
	c.Body = append([]byte(nil), e.Body...)
	return c
}

// ownEntry copies e with its body in the replica's body arena.
func (r *Replica) ownEntry(e *wire.VSREntry) wire.VSREntry {
	c := *e
	c.Body = r.bodies.copy(e.Body)
	return c
}

// bodyChunkSize is the size of one chunk of the body arena.
const bodyChunkSize = 64 << 10

// bodyArena copies op bodies into large chunks, so the log costs no allocation per entry. Bodies are
// never changed once copied; a chunk is freed by the garbage collector once no entry refers to it.
type bodyArena struct {
	chunk []byte
}

func (a *bodyArena) copy(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	if cap(a.chunk)-len(a.chunk) < len(b) {
		a.chunk = make([]byte, 0, max(bodyChunkSize, len(b)))
	}
	start := len(a.chunk)
	a.chunk = append(a.chunk, b...)
	return a.chunk[start:len(a.chunk):len(a.chunk)]
}

// Accessors, for the driver and the simulator's checks.

func (r *Replica) View() uint32        { return r.view }
func (r *Replica) LogView() uint32     { return r.logView }
func (r *Replica) Op() uint64          { return r.op }
func (r *Replica) Commit() uint64      { return r.commit }
func (r *Replica) Self() uint8         { return r.cfg.Self }
func (r *Replica) Normal() bool        { return r.status == statusNormal }
func (r *Replica) Recovering() bool    { return r.status == statusRecovering }
func (r *Replica) IsPrimary() bool     { return r.isPrimary() }
func (r *Replica) PrimaryIndex() uint8 { return primaryIndex(r.view, r.cfg.ReplicaCount) }
func (r *Replica) Stats() *Stats       { return &r.stats }

// SnapshotOp is the op of the checkpoint in force.
func (r *Replica) SnapshotOp() uint64 { return r.snapOp }

// CheckpointBytes is the size of the checkpoint in force (what a state transfer moves, in chunks).
func (r *Replica) CheckpointBytes() int { return len(r.snapPayload) }

// Entry returns the log entry at op while the log still holds it.
func (r *Replica) Entry(op uint64) (wire.VSREntry, bool) {
	if op <= r.logBase || op > r.op {
		return wire.VSREntry{}, false
	}
	return r.log[op-r.logBase-1], true
}

// Head returns the checksum of the entry at op, where the replica knows it.
func (r *Replica) Head(op uint64) (uint64, bool) {
	if op < r.logBase || op > r.op {
		return 0, false
	}
	return r.headAt(op), true
}

// Holders is the set of members (as a bit set by member index) known to hold the op at commit; the
// heartbeat schedule owes them an eager Commit (R6). Only meaningful on the primary.
func (r *Replica) Holders() uint32 {
	var h uint32
	for i := 0; i < r.cfg.ReplicaCount; i++ {
		if uint8(i) != r.cfg.Self && r.acked[i] >= r.commit {
			h |= 1 << i
		}
	}
	return h
}

func (r *Replica) isPrimaryOf(view uint32) bool {
	return primaryIndex(view, r.cfg.ReplicaCount) == r.cfg.Self
}

func (r *Replica) isPrimary() bool { return r.status == statusNormal && r.isPrimaryOf(r.view) }

func (r *Replica) drop(reason string) { r.stats.Dropped[reason]++ }

// headAt is the checksum of the entry at op, which the log must cover (logBase <= op <= op).
func (r *Replica) headAt(op uint64) uint64 {
	assert.True(op >= r.logBase, "vsr: head below the log base")
	assert.True(op <= r.op, "vsr: head past the log")
	if op == r.logBase {
		return r.logBaseHead
	}
	return r.log[op-r.logBase-1].Checksum
}

// Step handles one message from a peer. Stale or invalid messages are counted and dropped, never
// returned as errors. m is not retained: entries the replica keeps are copied.
func (r *Replica) Step(m *wire.VSRMessage) {
	if int(m.Replica) >= r.cfg.ReplicaCount || m.Replica == r.cfg.Self {
		r.drop("sender not a peer")
		return
	}
	if m.View == math.MaxUint32 {
		r.drop("view at its limit") // a view change from it would wrap
		return
	}
	switch r.status {
	case statusFailed:
		r.drop("persist failed")
		return
	case statusRecovering:
		r.stepRecovering(m)
		return
	}
	switch m.Command {
	case wire.CommandVSRRequest:
		_ = r.propose(m.Client, m.Request, m.Payload)
	case wire.CommandVSRPrepare:
		r.onPrepare(m)
	case wire.CommandVSRPrepareOK:
		r.onPrepareOK(m)
	case wire.CommandVSRStartViewChange:
		r.onStartViewChange(m)
	case wire.CommandVSRDoViewChange:
		r.onDoViewChange(m)
	case wire.CommandVSRStartView:
		r.onStartView(m)
	case wire.CommandVSRRequestPrepare:
		r.onRequestPrepare(m)
	case wire.CommandVSRSnapshot:
		r.onSnapshot(m)
	case wire.CommandVSRRequestSnapshot:
		r.onRequestSnapshot(m)
	case wire.CommandVSRRequestStartView:
		r.onRequestStartView(m)
	case wire.CommandVSRRecovery:
		r.onRecovery(m)
	case wire.CommandVSRRecoveryResponse:
		r.drop("recovery_response: not recovering")
	default:
		r.drop("command not for a replica")
	}
}

// Tick advances every running timeout by one tick, then runs the handlers of those due.
func (r *Replica) Tick() {
	if r.status == statusFailed {
		return
	}
	r.prepareTimeout.tick()
	r.repairTimeout.tick()
	r.viewChangeTimeout.tick()
	if r.prepareTimeout.Fired() {
		r.onPrepareTimeout()
	}
	if r.viewChangeTimeout.Fired() {
		r.onViewChangeTimeout()
	}
	if r.repairTimeout.Fired() {
		r.onRepairTimeout()
	}
}

// Propose orders op for client's request (the local controller's path; peers use CommandVSRRequest).
// Its result comes back as a Reply once committed.
func (r *Replica) Propose(client, request uint64, op []byte) error {
	if r.status == statusFailed {
		return ErrPersistFailed
	}
	return r.propose(client, request, op)
}

// OnCommitEntry takes a Commit entry from the primary of view that shard/heartbeat accepted (or reported
// as from a newer view): the primary's commit point.
func (r *Replica) OnCommitEntry(view uint32, commit uint64) {
	switch {
	case r.status == statusRecovering || r.status == statusFailed:
		r.drop("commit entry: recovering or failed")
	case view < r.view:
		r.drop("commit entry: older view")
	case view > r.view || r.status != statusNormal:
		r.askStartView(view)
	case r.isPrimaryOf(view):
		r.drop("commit entry: to the primary")
	default:
		r.commitMax = max(r.commitMax, commit)
		r.applyCommitted(min(r.commitMax, r.op))
		if r.commitMax > r.op {
			r.askRepair()
		}
	}
}

// OnPrimarySilent reports that shard/heartbeat's backup timeout expired (R8, R22), or that the links to
// the primary closed and stayed closed for the eager-failover grace: a backup in normal status starts
// a view change.
func (r *Replica) OnPrimarySilent() {
	if r.status != statusNormal || r.isPrimaryOf(r.view) {
		r.drop("primary silent: not a backup in normal status")
		return
	}
	r.startViewChange(r.view + 1)
}

// OnQuorumLost reports that the primary did not hear a quorum within its window (R24): it steps down
// by starting a view change.
func (r *Replica) OnQuorumLost() {
	if !r.isPrimary() {
		r.drop("quorum lost: not the primary")
		return
	}
	r.startViewChange(r.view + 1)
}

// PersistFailed reports that a persist failed (EIO, ENOSPC, a short write): what it held may not be on
// disk, and no later persist can be trusted to follow it. The replica takes no further part in the
// group until its node restarts it from its storage: it acknowledges nothing (messages held for a
// persist never leave), votes in no view change, answers nothing, and stops being primary, so the
// shard stops its Commit heartbeats and the backups' timeout moves the group to a new view. Ready
// hands out nothing more. A driver (or a simulator) brings it back by restarting it from its storage
// (Recover, then New), as after a crash.
func (r *Replica) PersistFailed() {
	if r.status == statusFailed {
		return
	}
	r.status = statusFailed
	r.prepareTimeout.Stop()
	r.viewChangeTimeout.Stop()
	r.repairTimeout.Stop()
	r.held, r.persists, r.pendingEntries, r.pendingSnapshot, r.dirty = nil, nil, nil, nil, false
	r.fx.Messages, r.fx.Replies = r.fx.Messages[:0], r.fx.Replies[:0]
}

// Failed reports whether a persist failed (PersistFailed).
func (r *Replica) Failed() bool { return r.status == statusFailed }

// Digest is a digest of the replicated state at Commit: the state machine's digest and the client
// table (equal on every replica at one commit, since checkpoints carry it).
func (r *Replica) Digest() uint64 { return r.clients.digest(r.sm.Digest()) }
