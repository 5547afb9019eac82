package control

import (
	"cmp"
	"slices"

	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/wire"
)

// nodeView is what the controller knows of one registered node: liveness counted in ticks, its links,
// and the copy tails of its last heartbeat.
type nodeView struct {
	id uint16
	// heard: a heartbeat arrived since this controller became primary. A node not heard from yet is
	// given a full liveness window, but is not chosen for new copies.
	heard       bool
	lost        bool
	lostReason  meta.RecoveryReason
	silentTicks uint32 // since the last heartbeat (or since becoming primary)
	linkDown    bool
	downTicks   uint32 // since the links closed
	tails       []wire.CopyTail
	// failedSum sums a value per copy its last heartbeat flagged wire.CopyLogFailed, so that a change
	// in the failed set makes the streams be looked at again without a walk of every heartbeat.
	failedSum uint64
}

// logFailed returns the cause when the node's last heartbeat flags its copy of stream at incarnation
// wire.CopyLogFailed.
func (n *nodeView) logFailed(stream uint64, incarnation uint32) (wire.LogFailCause, bool) {
	t, ok := n.tail(stream, incarnation)
	if !ok || t.Flags&wire.CopyLogFailed == 0 {
		return wire.LogFailNone, false
	}
	return t.Cause, true
}

// failedKey is one flagged copy's share of failedSum.
func failedKey(t wire.CopyTail) uint64 {
	return t.Stream*0x9e3779b97f4a7c15 ^ uint64(t.Incarnation)<<32 ^ uint64(t.Cause)
}

// alive reports whether the controller counts the node as up.
func (n *nodeView) alive() bool { return !n.lost }

// tail returns the tails the node last published for stream at incarnation.
func (n *nodeView) tail(stream uint64, incarnation uint32) (wire.CopyTail, bool) {
	i, ok := slices.BinarySearchFunc(n.tails, stream, func(t wire.CopyTail, s uint64) int {
		return cmp.Compare(t.Stream, s)
	})
	if !ok || n.tails[i].Incarnation != incarnation {
		return wire.CopyTail{}, false
	}
	return n.tails[i], true
}

// lose marks the node lost for reason. It reports whether this changed anything.
func (n *nodeView) lose(reason meta.RecoveryReason) bool {
	if n.lost {
		return false
	}
	n.lost, n.lostReason = true, reason
	return true
}

// node returns the view of node id, or nil when the node is not registered.
func (c *Controller) node(id uint16) *nodeView {
	i, ok := slices.BinarySearchFunc(c.nodes, id, func(n nodeView, id uint16) int { return cmp.Compare(n.id, id) })
	if !ok {
		return nil
	}
	return &c.nodes[i]
}

// logFailed returns the cause when node's last heartbeat flags its copy of stream at incarnation
// wire.CopyLogFailed (a lost node's last word counts too: nothing since said otherwise).
func (c *Controller) logFailed(node uint16, stream uint64, incarnation uint32) (wire.LogFailCause, bool) {
	n := c.node(node)
	if n == nil {
		return wire.LogFailNone, false
	}
	return n.logFailed(stream, incarnation)
}

// healthy reports whether node is alive and its last heartbeat does not flag its copy of stream as
// failed.
func (c *Controller) healthy(node uint16, stream uint64, incarnation uint32) bool {
	_, failed := c.logFailed(node, stream, incarnation)
	return c.nodeAlive(node) && !failed
}

// nodeAlive reports whether node id is registered and counted as up.
func (c *Controller) nodeAlive(id uint16) bool {
	n := c.node(id)
	return n != nil && n.alive()
}

// syncNodes makes the views match the registered nodes of the state: a node registered since gets a
// fresh liveness window, a decommissioned one is dropped. It runs when the state changed (rare).
func (c *Controller) syncNodes() {
	nodes := c.state.Nodes()
	next := make([]nodeView, 0, len(nodes))
	for _, n := range nodes {
		if n.Status != meta.NodeRegistered {
			continue
		}
		if v := c.node(n.ID); v != nil {
			next = append(next, *v)
		} else {
			next = append(next, nodeView{id: n.ID})
		}
	}
	c.nodes = next
}

// OnHeartbeat handles a node heartbeat: the node is alive, and its copies' published tails replace the
// ones it published before. A heartbeat flagged as a shutdown notice loses the node at once (eager
// failover). A follower's entry flagged wire.CopyOwnerSilent is a report of a silent owner
// (OnOwnerSilent). Bad copy entries are skipped and counted. It allocates nothing once the node's tail
// memory has grown to its number of copies.
//
// A heartbeat neither clears a link-down nor makes a lost node alive while its links are down: it may
// have been sent before the links closed and handled after OnLinkDown, and it cannot say when it was
// sent. Only OnLinkUp ends a link-down; the node's next heartbeat then makes it alive again.
func (c *Controller) OnHeartbeat(from uint16, m wire.NodeHeartbeat, copies wire.CopyTails) {
	n := c.node(from)
	if n == nil {
		c.stats.HeartbeatsIgnored++
		return
	}
	c.stats.Heartbeats++
	n.silentTicks = 0
	n.tails = n.tails[:0]
	var failedSum uint64
	for i := 0; i < copies.Len(); i++ {
		t, err := copies.At(i)
		if err != nil {
			c.stats.CopyTailsBad++
			continue
		}
		n.tails = append(n.tails, t)
		if t.Flags&wire.CopyOwnerSilent != 0 && t.Role == wire.RoleFollower {
			c.OnOwnerSilent(from, t.Stream, t.Incarnation, t.Epoch)
		}
		if t.Flags&wire.CopyOwnerRestarted != 0 && t.Role == wire.RoleOwner {
			c.dirty = true // reconcile records its recovery (ownerRestarted)
		}
		if t.Flags&wire.CopyLogFailed != 0 {
			failedSum += failedKey(t)
		}
	}
	if failedSum != n.failedSum {
		n.failedSum = failedSum
		c.dirty = true // an owner to fail over, a follower to replace, or a healed copy to place again
	}
	slices.SortFunc(n.tails, func(a, b wire.CopyTail) int { return cmp.Compare(a.Stream, b.Stream) })
	if !n.heard {
		n.heard = true
		c.dirty = true
	}
	if m.Flags&wire.FlagShuttingDown != 0 {
		if n.lose(meta.ReasonEagerFailover) {
			c.stats.NodesLost++
			c.dirty = true
		}
		return
	}
	if n.lost && !n.linkDown {
		n.lost, n.lostReason = false, 0
		c.dirty = true
	}
}

// OnLinkDown reports that every link to node closed. If they are not back within
// EagerFailoverGraceTicks, the node is lost (eager failover).
func (c *Controller) OnLinkDown(node uint16) {
	if n := c.node(node); n != nil && !n.linkDown {
		n.linkDown, n.downTicks = true, 0
	}
}

// OnLinkUp reports that a link to node is up again: this alone ends a link-down. The node stays lost,
// if it was, until it sends a heartbeat.
func (c *Controller) OnLinkUp(node uint16) {
	if n := c.node(node); n != nil {
		n.linkDown, n.downTicks = false, 0
	}
}

// TicksSkipped counts n ticks the host skipped (its shard stalled) for each node whose link is
// down: eager_failover_grace is wall time, and a controller on a busy shard, whose ticks slip, would
// otherwise wait out the grace in ticks it ran, twice the grace at half speed. Liveness expiry keeps
// counting ticks run: heartbeats are read between them, and a stall of this shard says nothing of the
// other nodes.
func (c *Controller) TicksSkipped(n uint64) {
	if n == 0 {
		return
	}
	for i := range c.nodes {
		nd := &c.nodes[i] // downTicks counts only while the link is down: a link going down zeroes it
		nd.downTicks = uint32(min(uint64(nd.downTicks)+n, uint64(c.cfg.EagerFailoverGraceTicks)))
	}
}

// tickLiveness advances every node's counters by one tick and loses nodes past their timeouts.
func (c *Controller) tickLiveness() {
	for i := range c.nodes {
		n := &c.nodes[i]
		n.silentTicks = min(n.silentTicks+1, c.cfg.NodeLivenessTimeoutTicks)
		if n.linkDown {
			n.downTicks = min(n.downTicks+1, c.cfg.EagerFailoverGraceTicks)
		}
		if !c.primary {
			continue // a backup counts, and decides nothing
		}
		switch {
		case n.silentTicks >= c.cfg.NodeLivenessTimeoutTicks && n.lose(meta.ReasonLivenessExpiry):
		case n.linkDown && n.downTicks >= c.cfg.EagerFailoverGraceTicks && n.lose(meta.ReasonEagerFailover):
		default:
			continue
		}
		c.stats.NodesLost++
		c.dirty = true
	}
}
