package shard

import (
	"cmp"
	"fmt"
	"slices"
	"sync"

	"github.com/ringstream/ringstream/internal/assert"
	"github.com/ringstream/ringstream/wire"
)

// Optional interfaces a Group may implement. The shard checks for them once, when the group is
// added, and calls them on its goroutine.

// TurnHook is run once per loop turn, outside Dispatch: after the turn's completions, control
// functions and cross-shard messages were handled and before the turn's sends start. It is where a
// log flushes its group commit and a group queues its data frames (SendFrame, SendData): what it
// queues leaves in the same turn, not at the next tick. It may drive nothing on the ring but
// queueing and Submit. A shard runs its groups' hooks in ascending group id order, whatever order
// they were added in: a host whose hooks depend on each other picks its group ids for it.
type TurnHook interface {
	OnTurn()
}

// LinkWatcher hears this shard's link to a peer node come up (handshake checked) and go down (a
// failure, a handshake timeout; not the shutdown of Stop). A group on another shard hears its own
// shard's link, which is the one its frames leave on.
type LinkWatcher interface {
	OnLinkUp(node uint16)
	OnLinkDown(node uint16)
}

// OutboxWatcher hears that the link to node has sent everything it held, after SendFrame or
// SendData refused a frame with ErrOutboxFull: the group may queue again.
type OutboxWatcher interface {
	OnOutboxDrained(node uint16)
}

// NodeHandler receives node-level frames: frames whose header names no group (Group 0) and that are
// not Commit or CommitReply batches (node heartbeats, seals, client traffic). It runs on the goroutine
// of the shard that received the frame, so several shards call it at once; it must not block and must
// copy what it keeps of body. s is the receiving shard, through which it may reply (SendFrame).
type NodeHandler interface {
	OnNodeFrame(s *Shard, from uint16, h *wire.Header, body []byte)
}

// UnroutedHandler, when the node's NodeHandler implements it, receives the group-addressed frames
// for a group the owning shard does not hold (a stream's seal or assignment reaching a node with no
// copy yet), on the shard ShardOf puts the group on. It reports whether it took the frame; frames it
// does not take are counted unroutable. The rules of NodeHandler apply.
type UnroutedHandler interface {
	OnUnroutedFrame(s *Shard, from uint16, h *wire.Header, body []byte) bool
}

// controls is a shard's queue of functions from other goroutines (Node.Run, AddGroup and RemoveGroup
// while running). It is a rare path, guarded by a mutex; the shard swaps the slice out once per turn.
type controls struct {
	mu    sync.Mutex
	fns   []func(*Shard)
	spare []func(*Shard)
}

func (c *controls) push(f func(*Shard)) {
	c.mu.Lock()
	c.fns = append(c.fns, f)
	c.mu.Unlock()
}

// take returns the queued functions and leaves an empty queue. The caller hands the slice back with
// done once it ran them.
func (c *controls) take() []func(*Shard) {
	c.mu.Lock()
	defer c.mu.Unlock()
	fns := c.fns
	c.fns = c.spare[:0]
	c.spare = nil
	return fns
}

func (c *controls) done(fns []func(*Shard)) {
	clear(fns)
	c.mu.Lock()
	c.spare = fns[:0]
	c.mu.Unlock()
}

// Run queues f to run on shard i's goroutine at the start of its next loop turn, and wakes that shard:
// f runs at once, not at the next tick. f may use the shard as a Sender (its ring, SendFrame) and call
// any Group method of a group on that shard. Safe from any goroutine. It returns ErrNotStarted before
// Start, ErrStopped once Stop was called (a function queued while the node stops may not run).
func (n *Node) Run(i int, f func(s *Shard)) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.runLocked(i, f)
}

func (n *Node) runLocked(i int, f func(s *Shard)) error {
	switch {
	case !n.started:
		return ErrNotStarted
	case n.stopped:
		return ErrStopped
	case i < 0 || i >= len(n.shards):
		return fmt.Errorf("%w: shard %d of %d", ErrConfig, i, len(n.shards))
	}
	s := n.shards[i]
	s.controls.push(f)
	s.waker.wake()
	return nil
}

// Wake ends shard i's current wait on its ring, so its loop runs one more turn (its turn hooks
// included). Safe from any goroutine, also before Start and after Stop (it then does nothing).
func (n *Node) Wake(i int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.started && i >= 0 && i < len(n.shards) {
		n.shards[i].waker.wake()
	}
}

// SetNodeHandler sets the handler of node-level frames. Only before Start; without one, node-level
// frames are counted as unroutable.
func (n *Node) SetNodeHandler(h NodeHandler) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.started {
		return ErrStarted
	}
	n.nodeHandler = h
	return nil
}

// AddGroup puts g on the shard that owns it (ShardOf). Before Start it is added when the shards are
// built; after Start it is handed to the owning shard, which attaches it at the start of its next loop
// turn (Attach, then its first OnTick at the shard's next tick). Safe from any goroutine.
func (n *Node) AddGroup(g Group) error {
	id := g.ID()
	if id == 0 {
		return fmt.Errorf("%w: group id 0", ErrConfig)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.stopped {
		return ErrStopped
	}
	if n.groupIDs[id] {
		return fmt.Errorf("%w: %d", ErrDuplicateGroup, id)
	}
	target := ShardOf(id, n.cfg.Shards)
	if n.perShard[target] >= n.cfg.GroupsPerShardMax {
		return fmt.Errorf("%w: shard %d holds %d", ErrTooManyGroups, target, n.perShard[target])
	}
	if n.started {
		if err := n.runLocked(target, func(s *Shard) { s.addGroup(g) }); err != nil {
			return err
		}
	} else {
		n.pending = append(n.pending, g)
	}
	n.groupIDs[id] = true
	n.perShard[target]++
	return nil
}

// RemoveGroup takes the group id off its shard at the start of that shard's next loop turn: it is
// polled, scheduled and routed to no more, and it hears OnStop when it implements Stopper (finish or
// abandon your operations). Entries and frames for it that arrive later are counted as ignored or
// unroutable. A superblock save of it still in flight completes on the shard and is counted
// (Stats.SavesOfRemovedGroups); its own operations complete on its own handlers as before. Safe from
// any goroutine; ErrUnknownGroup when no group of that id was added.
func (n *Node) RemoveGroup(id uint64) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.stopped {
		return ErrStopped
	}
	if !n.groupIDs[id] {
		return fmt.Errorf("%w: %d", ErrUnknownGroup, id)
	}
	target := ShardOf(id, n.cfg.Shards)
	if n.started {
		if err := n.runLocked(target, func(s *Shard) { s.removeGroup(id) }); err != nil {
			return err
		}
	} else {
		n.pending = slices.DeleteFunc(n.pending, func(g Group) bool { return g.ID() == id })
	}
	delete(n.groupIDs, id)
	n.perShard[target]--
	return nil
}

// addGroup attaches g to this shard and puts it on the schedule for its role (shard goroutine).
func (s *Shard) addGroup(g Group) {
	assert.True(s.byID[g.ID()] == nil, "shard: group added twice to a shard")
	gs := &groupSlot{s: s, g: g, id: g.ID()}
	gs.sleeper, _ = g.(Sleeper)
	i, _ := slices.BinarySearchFunc(s.groups, gs.id, func(a *groupSlot, id uint64) int { return cmp.Compare(a.id, id) })
	s.groups = slices.Insert(s.groups, i, gs)
	s.byID[gs.id] = gs
	s.keepAwake(gs) // polled from the next tick on, until it may sleep
	if _, ok := g.(TurnHook); ok {
		j, _ := slices.BinarySearchFunc(s.turners, gs.id, func(a *groupSlot, id uint64) int { return cmp.Compare(a.id, id) })
		s.turners = slices.Insert(s.turners, j, gs)
	}
	g.Attach(s)
	if s.ring != nil { // running: the schedule starts from the current tick
		s.restartGroup(gs, g.Role(), g.View(), g.Primary())
	}
	if st, ok := g.(Stopper); ok && s.draining {
		st.OnStop() // added while the shard drains: it hears Stop like the others
	}
}

// removeGroup takes group id off this shard (shard goroutine). Its slot stays alive as the handler of
// any save still in flight.
func (s *Shard) removeGroup(id uint64) {
	gs := s.byID[id]
	if gs == nil {
		return
	}
	delete(s.byID, id)
	s.groups = slices.DeleteFunc(s.groups, func(x *groupSlot) bool { return x == gs })
	s.turners = slices.DeleteFunc(s.turners, func(x *groupSlot) bool { return x == gs })
	if gs.role == RolePrimary {
		s.primaries--
	}
	if gs.asleep {
		gs.asleep = false
		s.sleeping--
	}
	if gs.onAwake {
		gs.onAwake = false
		s.awake = slices.DeleteFunc(s.awake, func(x *groupSlot) bool { return x == gs })
	}
	gs.removed = true
	gs.primary.Stop()
	gs.backup.Stop()
	if st, ok := gs.g.(Stopper); ok {
		st.OnStop()
	}
}

// runControls runs what other goroutines queued for this shard.
func (s *Shard) runControls() {
	fns := s.controls.take()
	if len(fns) == 0 {
		s.controls.done(fns)
		return
	}
	for _, f := range fns {
		f(s)
	}
	s.controls.done(fns)
}

// runTurnHooks calls OnTurn on every group that has one, in group id order.
func (s *Shard) runTurnHooks() {
	for _, gs := range s.turners {
		gs.g.(TurnHook).OnTurn()
	}
}

// onLinkUp and onLinkDown tell the shard's groups about a link's state (not during the drain).
func (s *Shard) onLinkUp(node uint16) {
	if s.draining {
		return
	}
	for _, gs := range s.groups {
		if w, ok := gs.g.(LinkWatcher); ok {
			s.wake(gs)
			w.OnLinkUp(node)
		}
	}
}

func (s *Shard) onLinkDown(node uint16) {
	if s.draining {
		return
	}
	for _, gs := range s.groups {
		if w, ok := gs.g.(LinkWatcher); ok {
			s.wake(gs)
			w.OnLinkDown(node)
		}
	}
}

// onOutboxDrained tells the shard's groups that the link to node sent everything after a refusal.
func (s *Shard) onOutboxDrained(node uint16) {
	if s.draining {
		return
	}
	for _, gs := range s.groups {
		if w, ok := gs.g.(OutboxWatcher); ok {
			s.wake(gs)
			w.OnOutboxDrained(node)
		}
	}
}
