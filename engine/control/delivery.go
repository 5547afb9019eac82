package control

import (
	"cmp"
	"slices"

	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/wire"
)

// Assignment is one stream assignment for node To, to send as a wire.StreamAssignment frame carrying
// Starts: the copy cuts itself onto them before its role change.
type Assignment struct {
	To         uint16
	Assignment wire.StreamAssignment
	Starts     []wire.HistoryStart
}

// delivery is what the controller sends for one stream's current assignment.
type delivery struct {
	msg     wire.StreamAssignment
	starts  []wire.HistoryStart
	members []uint16 // owner and followers
	sent    bool     // sent to every member once
}

// updateDeliveries rebuilds the deliveries from the state: a stream whose assignment epoch or starts
// version moved gets a new delivery, sent to every member with the next Ready.
func (c *Controller) updateDeliveries(streams []meta.Stream) {
	next := make([]delivery, 0, len(streams))
	for _, st := range streams {
		a, _ := c.state.Assignment(st.ID)
		starts, _ := c.state.Starts(st.ID)
		i, ok := slices.BinarySearchFunc(c.deliveries, st.ID, func(d delivery, s uint64) int {
			return cmp.Compare(d.msg.Stream, s)
		})
		if ok {
			d := c.deliveries[i]
			if d.msg.Incarnation == st.Incarnation && d.msg.Epoch == a.Epoch && d.msg.StartsVersion == starts.Version {
				next = append(next, d)
				continue
			}
		}
		next = append(next, newDelivery(st, a, starts))
	}
	c.deliveries = next
}

func newDelivery(st meta.Stream, a meta.Assignment, starts meta.Starts) delivery {
	d := delivery{
		msg: wire.StreamAssignment{Stream: st.ID, Incarnation: st.Incarnation, Epoch: a.Epoch, Owner: a.Owner,
			PolicyKind: uint8(a.Policy.Kind), PolicyCount: a.Policy.Count, StartsVersion: starts.Version,
			FollowerCount: uint8(len(a.Followers))},
		members: append([]uint16{a.Owner}, a.Followers...),
	}
	copy(d.msg.Followers[:], a.Followers)
	for _, s := range starts.List {
		d.starts = append(d.starts, wire.HistoryStart{Epoch: s.Epoch, Node: s.Node, RecordStart: s.RecordStart,
			CursorStart: s.CursorStart})
	}
	return d
}

// sendNewDeliveries sends each assignment not sent yet to every member.
func (c *Controller) sendNewDeliveries() {
	for i := range c.deliveries {
		d := &c.deliveries[i]
		if d.sent {
			continue
		}
		d.sent = true
		for _, m := range d.members {
			c.fx.Assignments = append(c.fx.Assignments, Assignment{To: m, Assignment: d.msg, Starts: d.starts})
		}
	}
}

// resendLagging sends the current assignment again to every live member whose heartbeat does not show
// the copy at the assignment's epoch: brokers learn their assignment even when a frame was lost or the
// primary changed.
func (c *Controller) resendLagging() {
	for i := range c.deliveries {
		d := &c.deliveries[i]
		for _, m := range d.members {
			n := c.node(m)
			if n == nil || !n.alive() {
				continue
			}
			if t, ok := n.tail(d.msg.Stream, d.msg.Incarnation); ok && t.Epoch >= d.msg.Epoch {
				continue
			}
			c.fx.Assignments = append(c.fx.Assignments, Assignment{To: m, Assignment: d.msg, Starts: d.starts})
		}
	}
}
