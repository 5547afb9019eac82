package shard

import (
	"cmp"
	"slices"
)

// Sleeping groups. A shard with tens of thousands of quiet stream copies cannot afford to poll each
// of them on every tick: the walk alone would take most of a core. A group that implements Sleeper
// and whose heartbeat side owes nothing sleeps between send ticks: every tick polls the awake groups
// and the sleepers whose alarm is due, and every send tick (where the heartbeat schedule sends, and
// an idle primary's heartbeat and quorum window are kept) polls every group, as before sleepers.
//
// Decisions:
//   - The full poll is on the send ticks, not only the idle send ticks: a sleeping group is then
//     never more than one broadcast interval away from a poll, whatever a missed wake.
//   - An idle primary's quorum window is checked at the send ticks and on each reply while it
//     sleeps, so a lost quorum is noticed at most one broadcast interval late; a primary that
//     confirms anything is busy, and busy primaries never sleep.
//   - A backup's silence deadline is an alarm: it is noticed on its tick, as before.
//   - The tick's poll list is sorted by group id, so batches are still built in id order.

// alarm wakes a sleeping group at tick, unless the group woke since (sleeps moved on).
type alarm struct {
	tick   uint64
	gs     *groupSlot
	sleeps uint32
}

// alarms is a min-heap of alarms by tick.
type alarms []alarm

func (a *alarms) push(x alarm) {
	*a = append(*a, x)
	h := *a
	i := len(h) - 1
	for i > 0 {
		parent := (i - 1) / 2
		if h[parent].tick <= h[i].tick {
			break
		}
		h[parent], h[i] = h[i], h[parent]
		i = parent
	}
}

func (a *alarms) pop() alarm {
	h := *a
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h[last] = alarm{}
	h = h[:last]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(h) && h[l].tick < h[m].tick {
			m = l
		}
		if r < len(h) && h[r].tick < h[m].tick {
			m = r
		}
		if m == i {
			break
		}
		h[m], h[i] = h[i], h[m]
		i = m
	}
	*a = h
	return top
}

// pollList returns the groups to poll on tick now: every group on a full poll, else the awake ones
// and the sleepers whose alarm is due, in id order.
func (s *Shard) pollList(now uint64) []*groupSlot {
	if now >= s.fullAt {
		p := s.sched.Ticks().BroadcastIntervalTicks
		s.fullAt = (now/p + 1) * p
		s.stats.FullPolls.Add(1)
		for _, gs := range s.awake {
			gs.onAwake = false
		}
		s.awake = s.awake[:0]
		s.alarms = s.alarms[:0] // every sleeper is polled now and sets a new alarm if it sleeps on
		for _, gs := range s.groups {
			gs.asleep = false
		}
		s.sleeping = 0
		return s.groups
	}
	s.polled = s.polled[:0]
	for _, gs := range s.awake {
		gs.onAwake = false
		s.polled = append(s.polled, gs)
	}
	s.awake = s.awake[:0]
	for len(s.alarms) > 0 && s.alarms[0].tick <= now {
		a := s.alarms.pop()
		if a.gs.asleep && a.gs.sleeps == a.sleeps && !a.gs.removed {
			a.gs.asleep = false
			s.sleeping--
			s.polled = append(s.polled, a.gs)
		}
	}
	slices.SortFunc(s.polled, func(a, b *groupSlot) int { return cmp.Compare(a.id, b.id) })
	return s.polled
}

// rest puts gs to sleep after its poll on tick now when it may sleep, and keeps it on the awake list
// otherwise.
func (s *Shard) rest(gs *groupSlot, now uint64) {
	if until, ok := s.sleepUntil(gs, now); ok {
		gs.asleep = true
		gs.sleeps++
		s.sleeping++
		if until < s.fullAt {
			s.alarms.push(alarm{tick: until, gs: gs, sleeps: gs.sleeps})
		}
		return
	}
	s.keepAwake(gs)
}

// sleepUntil says whether gs may sleep after its poll on tick now, and until which tick.
func (s *Shard) sleepUntil(gs *groupSlot, now uint64) (uint64, bool) {
	if gs.sleeper == nil {
		return 0, false
	}
	if gs.role == RolePrimary && !gs.primary.Resting() {
		return 0, false
	}
	until := gs.sleeper.SleepUntil(now)
	if gs.role == RoleBackup {
		until = min(until, gs.backup.SilentAt())
	}
	return until, until > now+1
}

// keepAwake puts gs on the awake list (once).
func (s *Shard) keepAwake(gs *groupSlot) {
	if !gs.onAwake {
		gs.onAwake = true
		s.awake = append(s.awake, gs)
	}
}

// wake puts a sleeping group back on every tick's poll: something reached it.
func (s *Shard) wake(gs *groupSlot) {
	if gs.asleep && !gs.removed {
		gs.asleep = false
		s.sleeping--
		s.stats.GroupWakes.Add(1)
		s.keepAwake(gs)
	}
}

// Wake implements Sender: group's own inputs the shard does not route woke it.
func (s *Shard) Wake(group uint64) {
	if gs := s.byID[group]; gs != nil {
		s.wake(gs)
	}
}
