package nodebeat

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"syscall"

	"github.com/ringstream/ringstream/engine/streamhost"
	"github.com/ringstream/ringstream/internal/assert"
	"github.com/ringstream/ringstream/segment"
	"github.com/ringstream/ringstream/shard"
	"github.com/ringstream/ringstream/shard/heartbeat"
	"github.com/ringstream/ringstream/wire"
)

// CopyTailSource is what the node's stream host publishes about the copies it holds, for the node
// heartbeats: one entry per copy with its role, epoch, and published record and cursor tails, and the
// wire.CopyOwnerSilent flag on a follower that heard nothing from its owner. A node with no stream
// host (or no copies) publishes an empty list.
type CopyTailSource interface {
	// AppendCopyTails appends one entry per copy to dst and returns it. It is called on shard 0's
	// goroutine once per heartbeat interval and must be safe against the copies' own shards.
	AppendCopyTails(dst []wire.CopyTail) []wire.CopyTail
}

// CopyFailure is one copy the node holds whose log failed or that did not open, and why.
type CopyFailure struct {
	Stream      uint64
	Incarnation uint32
	Cause       wire.LogFailCause // never wire.LogFailNone
}

// CopyFailureSource lists the node's failed copies for the heartbeats: the stream host's failures
// (engine/streamhost, Host.Status's `failures`), so that the controller learns of a failed log without
// asking. The heartbeat flags each one's entry wire.CopyLogFailed with its cause; a failed copy that
// publishes no tails (it did not open, or was closed) gets an entry of its own, role sealed, epoch and
// tails 0: it serves nothing.
type CopyFailureSource interface {
	// AppendCopyFailures appends one entry per failed copy to dst and returns it. It is called on
	// shard 0's goroutine once per heartbeat interval, must be safe against the copies' own shards,
	// and should allocate nothing when no copy failed.
	AppendCopyFailures(dst []CopyFailure) []CopyFailure
}

// LogFailCause names the cause of a failed log from its error: the errno a storage operation
// returned (ENOSPC and EDQUOT, or segment.ErrShortWrite, EIO, EROFS) or a checksum that did not
// verify; anything else is wire.LogFailOther. It never returns wire.LogFailNone.
func LogFailCause(err error) wire.LogFailCause {
	switch {
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT), errors.Is(err, segment.ErrShortWrite):
		return wire.LogFailNoSpace
	case errors.Is(err, syscall.EIO):
		return wire.LogFailIO
	case errors.Is(err, syscall.EROFS):
		return wire.LogFailReadOnly
	case errors.Is(err, segment.ErrCorrupt), errors.Is(err, segment.ErrDigestMismatch):
		return wire.LogFailCorrupt
	}
	return wire.LogFailOther
}

// HostFailures is the CopyFailureSource over the node's stream host: its Status list of copies that
// did not open or whose logs failed.
func HostFailures(h *streamhost.Host) CopyFailureSource { return hostFailures{h} }

type hostFailures struct{ h *streamhost.Host }

func (f hostFailures) AppendCopyFailures(dst []CopyFailure) []CopyFailure {
	for _, x := range f.h.Status() {
		dst = append(dst, CopyFailure{Stream: x.Stream, Incarnation: x.Incarnation, Cause: LogFailCause(x.Err)})
	}
	return dst
}

// ErrConfig: a Config is invalid.
var ErrConfig = errors.New("engine: invalid node heartbeat configuration")

// Config sets up a node's heartbeat sender.
type Config struct {
	Cluster uint64
	Node    uint16   // this node
	Shards  int      // the node's shard count (the sender's group id must land on shard 0)
	To      []uint16 // the metadata group's members' nodes; this node among them is served by Self
	// IntervalTicks: a heartbeat every this many shard ticks (the controller's liveness timeout must
	// hold several).
	IntervalTicks uint32
	Copies        CopyTailSource // nil: the node holds no copies
	// Failures lists the copies whose logs failed (nil: none is ever flagged).
	Failures CopyFailureSource
	// Self receives the heartbeat this node addresses to itself (a metadata member), on shard 0's
	// goroutine; nil drops it.
	Self   func(h *wire.Header, body []byte)
	Logger *slog.Logger
}

// Beat sends this node's wire.NodeHeartbeat to every metadata member from shard 0. It is a
// shard.Group of its own (GroupID), offline in every role, so that it gets shard 0's ticks and
// its link: it commits nothing, sends no Commit entries and receives no group frames.
type Beat struct {
	cfg      Config
	id       uint64
	log      *slog.Logger
	sender   shard.Sender
	seq      uint64
	ticks    uint32
	tails    []wire.CopyTail
	failed   []CopyFailure
	frame    []byte
	members  []shard.Member
	sent     atomic.Uint64 // heartbeats queued on a link or handed to Self
	failures atomic.Uint64 // sends refused (link down, outbox full)
}

// GroupID returns the group id of the heartbeat sender on a node of shards shards: the highest
// id on shard 0 at or below MetadataGroupID - 2^16. The ids right below the metadata group's are the
// stream hosts' (engine/streamhost: the highest one on each shard), which ShardOf spreads over about
// the top shards x ln(shards) ids; stream ids are allocated from 1 up, so they never reach either.
func GroupID(shards int) uint64 {
	for id := shard.MetadataGroupID - 1<<16; ; id-- {
		if shard.ShardOf(id, shards) == 0 {
			return id
		}
	}
}

// New checks cfg and returns the sender; add it to the node with shard.Node.AddGroup.
func New(cfg Config) (*Beat, error) {
	switch {
	case cfg.Node == 0:
		return nil, fmt.Errorf("%w: node id 0", ErrConfig)
	case cfg.Shards < 1:
		return nil, fmt.Errorf("%w: %d shards", ErrConfig, cfg.Shards)
	case cfg.IntervalTicks == 0:
		return nil, fmt.Errorf("%w: heartbeat interval of 0 ticks", ErrConfig)
	case len(cfg.To) == 0:
		return nil, fmt.Errorf("%w: no metadata member to send to", ErrConfig)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	b := &Beat{cfg: cfg, id: GroupID(cfg.Shards), log: cfg.Logger.With("group", "nodebeat")}
	b.members = []shard.Member{{Index: 0, Node: cfg.Node}}
	return b, nil
}

// Sent counts the heartbeats sent (queued on a link, or handed to Self); Failures the sends refused.
// Safe from any goroutine.
func (b *Beat) Sent() uint64     { return b.sent.Load() }
func (b *Beat) Failures() uint64 { return b.failures.Load() }

// send builds one heartbeat with flags and the copies' tails and sends it to every member.
func (b *Beat) send(flags wire.HeartbeatFlags) {
	if b.sender == nil {
		return
	}
	b.tails = b.tails[:0]
	if b.cfg.Copies != nil {
		b.tails = b.cfg.Copies.AppendCopyTails(b.tails)
	}
	b.flagFailures()
	if limit := wire.BodySizeMax / wire.CopyTailSize; len(b.tails) > limit {
		b.log.Warn("node heartbeat holds only the first copies", "copies", len(b.tails), "sent", limit)
		b.tails = b.tails[:limit]
	}
	b.seq++
	b.frame = wire.AppendNodeHeartbeat(b.frame[:0], wire.From{Cluster: b.cfg.Cluster, Node: b.cfg.Node},
		&wire.NodeHeartbeat{Sequence: b.seq, Flags: flags}, b.tails)
	for _, to := range b.cfg.To {
		if to == b.cfg.Node {
			if b.cfg.Self != nil {
				h, body, err := wire.ParseFrame(b.frame)
				assert.True(err == nil, "engine: own node heartbeat does not parse")
				b.cfg.Self(&h, body)
				b.sent.Add(1)
			}
			continue
		}
		if err := b.sender.SendFrame(to, b.frame); err != nil {
			b.failures.Add(1) // the next interval sends the newest state
			continue
		}
		b.sent.Add(1)
	}
}

// flagFailures marks the entry of every failed copy wire.CopyLogFailed with its cause, adding an entry
// (role sealed, nothing published) for a failed copy that has none. The tails stay sorted by stream.
func (b *Beat) flagFailures() {
	if b.cfg.Failures == nil {
		return
	}
	b.failed = b.cfg.Failures.AppendCopyFailures(b.failed[:0])
	added := false
	for _, f := range b.failed {
		assert.True(f.Cause != wire.LogFailNone, "engine: a failed copy without a cause")
		i, ok := slices.BinarySearchFunc(b.tails, f.Stream, func(t wire.CopyTail, s uint64) int {
			return cmp.Compare(t.Stream, s)
		})
		if ok && b.tails[i].Incarnation == f.Incarnation {
			b.tails[i].Flags |= wire.CopyLogFailed
			b.tails[i].Cause = f.Cause
			continue
		}
		b.tails = append(b.tails, wire.CopyTail{Stream: f.Stream, Incarnation: f.Incarnation, Role: wire.RoleSealed,
			Flags: wire.CopyLogFailed, Cause: f.Cause})
		added = true
	}
	if added {
		slices.SortStableFunc(b.tails, func(x, y wire.CopyTail) int { return cmp.Compare(x.Stream, y.Stream) })
	}
}

// Shutdown sends the shutdown notice (a heartbeat flagged wire.FlagShuttingDown) from shard 0 and
// returns once shard 0 has run two more loop turns, so the frame's send was started before the node's
// Stop shuts its links down. Call it before shard.Node.Stop on a clean shutdown.
func (b *Beat) Shutdown(n *shard.Node) error {
	done := make(chan struct{})
	if err := n.Run(0, func(*shard.Shard) { b.send(wire.FlagShuttingDown) }); err != nil {
		return err
	}
	// Two barriers: the turn that queued the notice starts its send at its end; the next turn's
	// wait submits it.
	for range 2 {
		if err := n.Run(0, func(*shard.Shard) { done <- struct{}{} }); err != nil {
			return err
		}
		<-done
	}
	return nil
}

// shard.Group: an offline group with itself as the only member.

func (b *Beat) ID() uint64                       { return b.id }
func (b *Beat) Incarnation() uint32              { return 0 }
func (b *Beat) View() uint32                     { return 0 }
func (b *Beat) Commit() uint64                   { return 0 }
func (b *Beat) CommitHolders() heartbeat.Members { return 0 }
func (b *Beat) Role() shard.Role                 { return shard.RoleOffline }
func (b *Beat) Self() uint8                      { return 0 }
func (b *Beat) Primary() uint8                   { return 0 }
func (b *Beat) Members() []shard.Member          { return b.members }
func (b *Beat) Quorum() int                      { return 1 }
func (b *Beat) PendingSuperblock() (shard.SuperblockSave, bool) {
	return shard.SuperblockSave{}, false
}
func (b *Beat) SuperblockSaved(error)                       {}
func (b *Beat) OnCommit(uint16, wire.CommitEntry)           {}
func (b *Beat) OnCommitReply(uint16, wire.CommitReplyEntry) {}
func (b *Beat) OnPrimarySilent()                            {}
func (b *Beat) OnQuorumLost()                               {}
func (b *Beat) OnFrame(uint16, *wire.Header, []byte)        {}
func (b *Beat) Attach(s shard.Sender)                       { b.sender = s }

// OnTick sends a heartbeat every IntervalTicks, the first on the first tick.
func (b *Beat) OnTick(uint64) {
	if b.ticks == 0 {
		b.send(0)
	}
	if b.ticks++; b.ticks >= b.cfg.IntervalTicks {
		b.ticks = 0
	}
}
