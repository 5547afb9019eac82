package streamsim

import (
	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/wire"
)

// An older incarnation's copy. Stream s1 of a run (unless Options.NoStaleIncarnation or scripted)
// was deleted and created again before the run (incarnation 2, the same id), and its last
// follower still holds a copy of incarnation 1 until staleUntil: the broker keeps one copy per
// stream id and has not deleted that one yet. As engine/streamhost does with such a copy, the node
// publishes its tails under incarnation 1 in its heartbeats, answers a seal of incarnation 2 "no
// copy", drops assignments of incarnation 2 (the controller resends them), and serves neither
// requests nor replication of incarnation 2. The controller must take none of it as incarnation 2's.

// staleCopy is a copy of an older incarnation of stream si that node holds until until.
type staleCopy struct {
	si          int
	incarnation uint32
	tail        wire.CopyTail
	until       uint64
}

// recreate deletes the stream op created and creates it again (incarnation 2), as an operator
// would, and returns the new incarnation's stream.
func (m *metaGroup) recreate(op meta.CreateStream) (meta.Stream, bool) {
	st, _ := m.state.StreamByName(op.Name)
	if r := m.apply(meta.DeleteStream{Stream: st.ID, Incarnation: st.Incarnation}); !r.OK() {
		return st, false
	}
	if r := m.apply(op); !r.OK() {
		return st, false
	}
	again, _ := m.state.StreamByName(op.Name)
	return again, true
}

// leaveStaleCopy puts a copy of old's incarnation on node id: an owner of epoch 3 that restarted
// in it, with tails past anything the new incarnation holds early in the run.
func (s *Sim) leaveStaleCopy(id uint16, si int, old meta.Stream) {
	n := s.nodes[id]
	until := uint64(s.opt.Ticks / 4)
	n.stale = append(n.stale, staleCopy{si: si, incarnation: old.Incarnation, until: until,
		tail: wire.CopyTail{Stream: old.ID, Incarnation: old.Incarnation, Epoch: 3, RecordTail: 500, CursorTail: 9,
			Role: wire.RoleOwner, Flags: wire.CopyOwnerRestarted}})
	s.logf("node %d holds a copy of stream %d incarnation %d until tick %d", id, old.ID, old.Incarnation, until)
}

// staleOf is node n's copy of an older incarnation of stream si while the broker keeps it.
func (s *Sim) staleOf(n *node, si int) (*staleCopy, bool) {
	for i := range n.stale {
		if c := &n.stale[i]; c.si == si && s.now < c.until {
			return c, true
		}
	}
	return nil, false
}

// staleTails appends the tails of node n's older-incarnation copies to tails.
func (s *Sim) staleTails(n *node, tails []wire.CopyTail) []wire.CopyTail {
	for i := range n.stale {
		if c := &n.stale[i]; s.now < c.until && n.copies[c.si] == nil {
			tails = append(tails, c.tail)
		}
	}
	return tails
}
