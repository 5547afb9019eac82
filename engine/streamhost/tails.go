package streamhost

import (
	"cmp"
	"slices"

	"github.com/ringstream/ringstream/engine/stream"
	"github.com/ringstream/ringstream/wire"
)

// publishEveryTicks is how often each shard publishes the tails of its copies that changed for the
// node heartbeats.
const publishEveryTicks = 5

// The tails a shard publishes are a table with one entry per copy (cg.tailSlot), read by
// AppendCopyTails under Host.mu. A publish rebuilds only the entries of the copies marked since the
// last one (markTail: every input of a copy marks it through wake, and every tick it is polled), so a
// node of tens of thousands of quiet copies publishes nothing and walks nothing; an entry whose Role
// is 0 belongs to a copy that is not serving and is left out.

// AppendCopyTails appends one entry per copy that has opened (engine.CopyTailSource): its role,
// assignment epoch and durable tails as its shard last published them (every few ticks), sorted
// by stream id, wire.CopyOwnerSilent on a follower whose owner went silent, and
// wire.CopyOwnerRestarted on an owner that reopened within its own epoch. Safe from any goroutine.
func (h *Host) AppendCopyTails(dst []wire.CopyTail) []wire.CopyTail {
	h.mu.Lock()
	defer h.mu.Unlock()
	from := len(dst)
	for _, sh := range h.shards {
		for i := range sh.tails {
			if sh.tails[i].Role != 0 {
				dst = append(dst, sh.tails[i])
			}
		}
	}
	slices.SortFunc(dst[from:], func(a, b wire.CopyTail) int { return cmp.Compare(a.Stream, b.Stream) })
	return dst
}

// addTail gives a copy new to the shard its entry (empty until its first publish).
func (sh *shardHost) addTail(cg *copyGroup) {
	if cg.tailSlot != 0 {
		return
	}
	sh.h.mu.Lock()
	sh.tails = append(sh.tails, wire.CopyTail{})
	sh.h.mu.Unlock()
	sh.tailCopies = append(sh.tailCopies, cg)
	cg.tailSlot = len(sh.tails)
	sh.markTail(cg)
}

// removeTail drops a copy's entry: the last entry takes its place.
func (sh *shardHost) removeTail(cg *copyGroup) {
	if cg.tailSlot == 0 {
		return
	}
	i, last := cg.tailSlot-1, len(sh.tails)-1
	moved := sh.tailCopies[last]
	sh.h.mu.Lock()
	sh.tails[i] = sh.tails[last]
	sh.tails = sh.tails[:last]
	sh.h.mu.Unlock()
	sh.tailCopies[i] = moved
	sh.tailCopies[last] = nil
	sh.tailCopies = sh.tailCopies[:last]
	moved.tailSlot = i + 1
	cg.tailSlot = 0
	if cg.pubParked {
		cg.pubParked = false
		sh.parked--
	}
}

// markTail has the copy's entry rebuilt at the next publish.
func (sh *shardHost) markTail(cg *copyGroup) {
	if !cg.tailMarked {
		cg.tailMarked = true
		sh.tailsMarked = append(sh.tailsMarked, cg)
	}
}

// publish rebuilds the entries of the copies marked since the last publish (on the shard goroutine).
func (sh *shardHost) publish() {
	if len(sh.tailsMarked) == 0 {
		return
	}
	sh.tailsNew = sh.tailsNew[:0]
	for _, cg := range sh.tailsMarked {
		cg.tailMarked = false
		if cg.tailSlot == 0 {
			continue // removed since it was marked
		}
		t, parked := cg.tail()
		if parked != cg.pubParked {
			cg.pubParked = parked
			if parked {
				sh.parked++
			} else {
				sh.parked--
			}
		}
		sh.tailsNew = append(sh.tailsNew, slotTail{slot: cg.tailSlot - 1, tail: t})
	}
	clear(sh.tailsMarked)
	sh.tailsMarked = sh.tailsMarked[:0]
	sh.h.mu.Lock()
	for _, n := range sh.tailsNew {
		sh.tails[n.slot] = n.tail
	}
	sh.h.mu.Unlock()
	sh.parkedNow.Store(int64(sh.parked))
	sh.parksNow.Store(sh.stats.Parks)
}

// slotTail is a rebuilt entry waiting to be written into the table.
type slotTail struct {
	slot int
	tail wire.CopyTail
}

// tail is the copy's entry as published now (Role 0: not serving, left out), and whether it counts
// as parked (as of its last idle check).
func (cg *copyGroup) tail() (wire.CopyTail, bool) {
	if cg.c == nil || cg.state != stateServing {
		return wire.CopyTail{}, false
	}
	t := wire.CopyTail{Stream: cg.spec.Stream, Incarnation: cg.spec.Incarnation, Epoch: cg.spec.Assignment.Epoch}
	t.RecordTail, t.CursorTail = cg.seg.Tails()
	switch cg.c.Role() {
	case stream.RoleOwner:
		t.Role = wire.RoleOwner
		if cg.c.Restarted() {
			t.Flags = wire.CopyOwnerRestarted
		}
	case stream.RoleFollower:
		t.Role = wire.RoleFollower
		if cg.silent {
			t.Flags = wire.CopyOwnerSilent
		}
	case stream.RoleSealed:
		t.Role = wire.RoleSealed
	default:
		return wire.CopyTail{}, false
	}
	return t, cg.parked
}

// ParkedCopies is how many serving copies hold no descriptor (segment.Copy.Park) and how many
// parks the node made, as its shards last published them (every few ticks; a copy's parked state
// as of its last idle check, at most 16 ticks old). Safe from any goroutine.
func (h *Host) ParkedCopies() (parked int, parks uint64) {
	for _, sh := range h.shards {
		parked += int(sh.parkedNow.Load())
		parks += sh.parksNow.Load()
	}
	return parked, parks
}
