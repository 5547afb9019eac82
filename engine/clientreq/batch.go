package clientreq

import (
	"cmp"
	"errors"
	"slices"

	"github.com/ringstream/ringstream/engine/stream"
	"github.com/ringstream/ringstream/engine/streamhost"
	"github.com/ringstream/ringstream/shard"
	"github.com/ringstream/ringstream/shard/heartbeat"
	"github.com/ringstream/ringstream/wire"
)

// produceBatchBytesMax bounds the produce bytes a shard holds for the end of its turn; a produce that
// would pass it flushes what is held first.
const produceBatchBytesMax = 4 << 20

// heldProduce is a produce held for the end of the turn: its message (Batch nil) and where its
// payload lies in the shard's arena.
type heldProduce struct {
	stream   uint64
	msg      stream.Message
	off, len int
}

// holdProduce keeps a decoded produce until the shard's turn ends (clientGroup.OnTurn), copying its
// payload into the shard's arena: body is valid only during the request's call. So a turn's produces
// to one stream reach the copy together (streamhost.Host.StepAll) and leave for each follower as one
// prepare, not one per produce.
func (c *Handler) holdProduce(s *shard.Shard, cs *clientShard, req shard.ClientRequest, m *stream.Message) {
	if len(cs.arena)+len(m.Produce.Batch) > produceBatchBytesMax && len(cs.held) > 0 {
		c.flush(s, cs)
	}
	p := heldProduce{stream: req.Stream, msg: *m, off: len(cs.arena), len: len(m.Produce.Batch)}
	cs.arena = append(cs.arena, m.Produce.Batch...)
	p.msg.Produce.Batch = nil
	cs.held = append(cs.held, p)
}

// flush hands the held produces to their copies, one StepAll per stream in arrival order.
func (c *Handler) flush(s *shard.Shard, cs *clientShard) {
	if len(cs.held) == 0 {
		return
	}
	slices.SortStableFunc(cs.held, func(a, b heldProduce) int { return cmp.Compare(a.stream, b.stream) })
	for i := 0; i < len(cs.held); {
		j := i + 1
		for j < len(cs.held) && cs.held[j].stream == cs.held[i].stream {
			j++
		}
		cs.msgs = cs.msgs[:0]
		for k := i; k < j; k++ {
			p := &cs.held[k]
			m := p.msg
			m.Produce.Batch = cs.arena[p.off : p.off+p.len]
			cs.msgs = append(cs.msgs, m)
		}
		if err := c.n.streams.StepAll(s, cs.held[i].stream, cs.msgs); err != nil {
			c.refuseHeld(s, cs, cs.held[i:j], err)
		}
		i = j
	}
	clear(cs.msgs)
	cs.msgs = cs.msgs[:0]
	cs.held = cs.held[:0]
	cs.arena = cs.arena[:0]
}

// refuseHeld answers the held produces of a stream its copy did not take.
func (c *Handler) refuseHeld(s *shard.Shard, cs *clientShard, held []heldProduce, err error) {
	for k := range held {
		sl, ok := cs.take(held[k].msg.Client)
		if !ok {
			continue
		}
		c.produces.Add(-1)
		if errors.Is(err, streamhost.ErrUnknownStream) {
			c.noCopy(s, sl.req, held[k].msg.Produce.Incarnation)
			continue
		}
		c.refuse(s, sl.req, wire.CodeInternal, 0, err.Error())
	}
}

// clientGroup is the client handler's group on one shard: offline (never scheduled, never
// addressed), it exists for its turn hook, which hands the turn's held produces to their copies. Its
// hook must run before the stream host's, which flushes the copies' group commits, so that a turn's
// produces go out in that turn's group commit: a shard runs turn hooks in ascending group id order,
// and clientGroupID is below the stream host's group id on every shard (TestClientGroupTurnsFirst).
type clientGroup struct {
	c       *Handler
	index   int
	id      uint64
	members []shard.Member
	sender  shard.Sender
}

// clientGroupID is shard i's client group id: the highest id on shard i at or below
// MetadataGroupID - 2^17.
func clientGroupID(i, shards int) uint64 {
	for id := shard.MetadataGroupID - 1<<17; ; id-- {
		if shard.ShardOf(id, shards) == i {
			return id
		}
	}
}

// OnTurn flushes the held produces.
func (g *clientGroup) OnTurn() {
	if s, ok := g.sender.(*shard.Shard); ok {
		g.c.flush(s, &g.c.shards[g.index])
	}
}

func (g *clientGroup) ID() uint64                       { return g.id }
func (g *clientGroup) Incarnation() uint32              { return 0 }
func (g *clientGroup) View() uint32                     { return 0 }
func (g *clientGroup) Commit() uint64                   { return 0 }
func (g *clientGroup) CommitHolders() heartbeat.Members { return 0 }
func (g *clientGroup) Role() shard.Role                 { return shard.RoleOffline }
func (g *clientGroup) Self() uint8                      { return 0 }
func (g *clientGroup) Primary() uint8                   { return 0 }
func (g *clientGroup) Members() []shard.Member          { return g.members }
func (g *clientGroup) Quorum() int                      { return 1 }
func (g *clientGroup) PendingSuperblock() (shard.SuperblockSave, bool) {
	return shard.SuperblockSave{}, false
}
func (g *clientGroup) SuperblockSaved(error)                       {}
func (g *clientGroup) OnCommit(uint16, wire.CommitEntry)           {}
func (g *clientGroup) OnCommitReply(uint16, wire.CommitReplyEntry) {}
func (g *clientGroup) OnPrimarySilent()                            {}
func (g *clientGroup) OnQuorumLost()                               {}
func (g *clientGroup) OnFrame(uint16, *wire.Header, []byte)        {}
func (g *clientGroup) Attach(s shard.Sender)                       { g.sender = s }
func (g *clientGroup) OnTick(uint64)                               {}
