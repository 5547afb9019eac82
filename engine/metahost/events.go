package metahost

import (
	"fmt"
	"time"

	"github.com/ringstream/ringstream/engine/vsr"
	"github.com/ringstream/ringstream/shard"
)

// The metadata group's events between ticks, on shard 0's host interface: proposals and persist
// completions are taken in the loop turn they arrive in (OnTurn), and a backup that loses its links to
// the primary's node for EagerFailoverGraceTicks starts a view change at once (OnLinkDown, DESIGN
// section 7) instead of waiting out the heartbeat timeout.

// Group hears the shard's loop turns and link events.
var (
	_ shard.TurnHook    = (*Group)(nil)
	_ shard.LinkWatcher = (*Group)(nil)
)

// DefaultEagerFailoverGraceTicks is EagerFailoverGraceTicks when the config leaves it 0.
const DefaultEagerFailoverGraceTicks = 20

// SetPersistObserver makes f hear the time each persist of the replica took, from queueing its
// chain on shard 0's ring to its last completion (the writes and the fdatasync that makes them
// durable), once it succeeded. f runs on shard 0's goroutine and must not block. Call it before the
// node starts.
func (g *Group) SetPersistObserver(f func(time.Duration)) { g.store.observe = f }

// SetWake gives the group a function that wakes shard 0's loop (shard.Node.Wake(0)): Propose calls it,
// so that a proposal is ordered in the next loop turn instead of at the next tick. Safe from any
// goroutine; nil turns it off.
func (g *Group) SetWake(wake func()) {
	if wake == nil {
		g.wake.Store(nil)
		return
	}
	g.wake.Store(&wake)
}

// OnTurn runs once per loop turn of shard 0, outside Dispatch (shard.TurnHook): persists made durable
// by this turn's completions reach the replica, proposals waiting in the inbox are ordered, and their
// effects leave in this turn.
func (g *Group) OnTurn() {
	if g.store.rg == nil {
		return // before the first tick: the store has no ring yet
	}
	done, err := g.store.durable()
	if !g.stepped && done == g.advanced && (err == nil || g.persistErr != nil) && !g.inboxPending.Load() {
		return
	}
	g.takeProposals()
	g.takeDurable()
	g.pump()
}

// metaLinks tracks shard 0's links to the other members' nodes, by member index: down since which tick
// (0 while up or never seen).
type metaLinks struct {
	downSince [vsr.MembersMax]uint64
	tick      uint64 // the last tick seen
	firedView uint32 // the view whose primary the eager failover already gave up on, plus one
}

// OnLinkUp hears that shard 0's link to node is up (shard.LinkWatcher).
func (g *Group) OnLinkUp(node uint16) {
	if g.ctl != nil {
		g.ctl.LinkUp(node)
	}
	if i, ok := g.memberOf(node); ok {
		g.links.downSince[i] = 0
	}
}

// OnLinkDown hears that shard 0's link to node went down (shard.LinkWatcher): the grace starts.
func (g *Group) OnLinkDown(node uint16) {
	if g.ctl != nil {
		g.ctl.LinkDown(node)
	}
	if i, ok := g.memberOf(node); ok && g.links.downSince[i] == 0 {
		g.links.downSince[i] = g.links.tick + 1 // ticks counted from the next one
	}
}

func (g *Group) memberOf(node uint16) (uint8, bool) {
	for i := range g.cfg.Members {
		if g.nodeOf[i] == node && uint8(i) != g.self {
			return uint8(i), true
		}
	}
	return 0, false
}

// checkLinks runs at each tick: a backup in normal status whose link to the primary's node has been
// down for the grace starts a view change, once per view.
func (g *Group) checkLinks(tick uint64) {
	g.links.tick = tick
	p := g.replica.PrimaryIndex()
	since := g.links.downSince[p]
	if since == 0 || p == g.self || !g.replica.Normal() || g.links.firedView == g.replica.View()+1 {
		return
	}
	if tick+1 < since+g.cfg.EagerFailoverGraceTicks {
		return
	}
	g.links.firedView = g.replica.View() + 1
	g.stats.EagerFailovers++
	g.log.Info("links to the primary's node closed past the grace: starting a view change", "view",
		g.replica.View(), "primary_node", g.nodeOf[p], "grace_ticks", g.cfg.EagerFailoverGraceTicks)
	g.replica.OnPrimarySilent()
}

// validateGrace fills in and checks EagerFailoverGraceTicks.
func (cfg *Config) validateGrace() error {
	if cfg.EagerFailoverGraceTicks == 0 {
		cfg.EagerFailoverGraceTicks = DefaultEagerFailoverGraceTicks
	}
	if cfg.EagerFailoverGraceTicks > cfg.VSR.ViewChangeTimeoutTicks {
		// A grace longer than a stalled view change is no eager failover: the heartbeat timeout, well
		// below it, would always come first.
		return fmt.Errorf("%w: eager_failover_grace (%d ticks) past view_change_timeout (%d ticks)", ErrConfig,
			cfg.EagerFailoverGraceTicks, cfg.VSR.ViewChangeTimeoutTicks)
	}
	return nil
}
