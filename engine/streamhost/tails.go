package streamhost

import (
	"cmp"
	"slices"

	"github.com/ringstream/ringstream/engine/stream"
	"github.com/ringstream/ringstream/wire"
)

// publishEveryTicks is how often each shard publishes its copies' tails for the node heartbeats.
const publishEveryTicks = 5

// AppendCopyTails appends one entry per copy that has opened (engine.CopyTailSource): its role,
// assignment epoch and durable tails as its shard last published them (every few ticks), sorted
// by stream id, wire.CopyOwnerSilent on a follower whose owner went silent, and
// wire.CopyOwnerRestarted on an owner that reopened within its own epoch. Safe from any goroutine.
func (h *Host) AppendCopyTails(dst []wire.CopyTail) []wire.CopyTail {
	h.mu.Lock()
	defer h.mu.Unlock()
	from := len(dst)
	for _, sh := range h.shards {
		dst = append(dst, sh.published...)
	}
	slices.SortFunc(dst[from:], func(a, b wire.CopyTail) int { return cmp.Compare(a.Stream, b.Stream) })
	return dst
}

// publish rebuilds the shard's published tails (on the shard goroutine).
func (sh *shardHost) publish() {
	sh.pending = sh.pending[:0]
	parked := 0
	for _, cg := range sh.copies {
		if cg.c == nil || cg.state != stateServing {
			continue
		}
		if cg.parked { // as of the copy's last check (parkCheckTicks)
			parked++
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
			continue
		}
		sh.pending = append(sh.pending, t)
	}
	sh.h.mu.Lock()
	sh.published, sh.pending = sh.pending, sh.published
	sh.h.mu.Unlock()
	sh.parkedNow.Store(int64(parked))
	sh.parksNow.Store(sh.stats.Parks)
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
