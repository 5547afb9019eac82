package streamsim

import (
	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/engine/stream"
)

// faults draws the run's faults, each tick, during the fault phase; the heal phase ends them all.
type faults struct {
	rate       int // one in rate ticks draws a fault
	healAt     uint64
	pendingFor []uint64 // per stream: tick its recovery was first seen pending (0: none)
}

func (f *faults) step(s *Sim) {
	if f.rate == 0 {
		f.rate = 12 + s.rng.IntN(40)
		f.pendingFor = make([]uint64, len(s.strs))
	}
	if s.opt.DiskErrors {
		f.healDisks(s)
	}
	if s.healing() {
		f.heal(s)
		return
	}
	if f.healAt != 0 && s.now >= f.healAt {
		f.healAt = 0
		clear(s.net.side)
		s.logf("partition healed")
	}
	f.operator(s)
	if s.opt.DiskErrors && s.rng.IntN(2*f.rate) == 0 {
		f.diskError(s)
	}
	if s.opt.DiskErrors && s.rng.IntN(4*f.rate) == 0 {
		f.killOwnerAndFollower(s)
	}
	if s.rng.IntN(f.rate) != 0 {
		return
	}
	switch k := s.rng.IntN(100); {
	case k < 25:
		f.killOwner(s)
	case k < 35:
		f.killMetaWithOwners(s)
	case k < 50:
		f.killDuringRecovery(s)
	case k < 62:
		f.killAny(s)
	case k < 77:
		f.pause(s)
	case k < 90:
		f.partition(s)
	default:
		f.restartOne(s)
	}
}

func (f *faults) heal(s *Sim) {
	clear(s.net.side)
	for _, n := range s.nodes[1:] {
		if !n.up {
			s.restart(n)
		}
		n.pausedUntil = min(n.pausedUntil, s.now)
	}
}

func (f *faults) downCount(s *Sim) int {
	k := 0
	for _, n := range s.nodes[1:] {
		if !n.up {
			k++
		}
	}
	return k
}

// killNode power-cuts n unless that would leave no node up; it restarts after a while.
func (f *faults) killNode(s *Sim, n *node) {
	f.killNodeAt(s, n, s.now+10+uint64(s.rng.IntN(120)))
}

// killNodeAt power-cuts n unless that would leave no node up, to restart at restartAt, and checks
// that every copy n owned still holds, after the power loss, every record it had confirmed: the
// owner confirms only what it made durable itself.
func (f *faults) killNodeAt(s *Sim, n *node, restartAt uint64) {
	if !n.up || f.downCount(s) >= len(s.nodes)-2 {
		return
	}
	confirmed := make([]uint64, len(n.copies))
	for si, hc := range n.copies {
		if hc != nil && hc.c.Role() == stream.RoleOwner {
			confirmed[si] = hc.c.Confirmed()
		}
	}
	s.kill(n, restartAt)
	for si, c := range confirmed {
		if d := n.disks[si]; c > 0 && d.rec().tail() < c && !s.chk.ghosts[si].lossAccepted && !s.opt.RecordChecksOnly {
			s.fail("node %d, owner of stream %d, came back from a power loss at record tail %d, below the %d it "+
				"had confirmed", n.id, s.strs[si].st.ID, d.rec().tail(), c)
			return
		}
	}
}

// killOwnerAndFollower power-cuts a stream's owner and one of its followers in the same tick (issue
// 22, finding 5), restarting both after a short or a long while.
func (f *faults) killOwnerAndFollower(s *Sim) {
	si := s.rng.IntN(len(s.strs))
	a, _ := s.meta.state.Assignment(s.strs[si].st.ID)
	if len(a.Followers) == 0 {
		return
	}
	follower := a.Followers[s.rng.IntN(len(a.Followers))]
	down := uint64(2)
	if s.rng.IntN(2) == 0 {
		down = 20 + uint64(s.rng.IntN(60))
	}
	s.logf("stream %d: owner %d and follower %d lose power together", s.strs[si].st.ID, a.Owner, follower)
	f.killNodeAt(s, s.nodes[a.Owner], s.now+down)
	f.killNodeAt(s, s.nodes[follower], s.now+down)
}

func (f *faults) killOwner(s *Sim) {
	si := s.rng.IntN(len(s.strs))
	a, _ := s.meta.state.Assignment(s.strs[si].st.ID)
	f.killNode(s, s.nodes[a.Owner])
}

// killMetaWithOwners loses the metadata primary's node, choosing first a primary that owns streams.
func (f *faults) killMetaWithOwners(s *Sim) {
	if s.meta.node == 0 {
		return
	}
	f.killNode(s, s.nodes[s.meta.node])
}

// killDuringRecovery loses a copy of a stream whose recovery is pending: a second owner loss.
func (f *faults) killDuringRecovery(s *Sim) {
	for _, r := range s.meta.state.Recoveries() {
		if r.Status != meta.RecoveryPending {
			continue
		}
		a, _ := s.meta.state.Assignment(r.Stream)
		members := append([]uint16{a.Owner}, a.Followers...)
		f.killNode(s, s.nodes[members[s.rng.IntN(len(members))]])
		return
	}
	f.killOwner(s)
}

func (f *faults) killAny(s *Sim) {
	f.killNode(s, s.nodes[1+s.rng.IntN(len(s.nodes)-1)])
}

func (f *faults) restartOne(s *Sim) {
	for _, n := range s.nodes[1:] {
		if !n.up {
			s.restart(n)
			return
		}
	}
}

// pause stops a node (a stalled process): it keeps its links, but ticks nothing, sends nothing and
// reads nothing until it wakes, possibly after its streams failed over.
func (f *faults) pause(s *Sim) {
	n := s.nodes[1+s.rng.IntN(len(s.nodes)-1)]
	if !n.running(s.now) {
		return
	}
	n.pausedUntil = s.now + 10 + uint64(s.rng.IntN(100))
	s.logf("node %d paused until %d", n.id, n.pausedUntil)
}

// partition splits the nodes in two at random until healAt.
func (f *faults) partition(s *Sim) {
	for id := 1; id < len(s.nodes); id++ {
		s.net.side[id] = uint8(s.rng.IntN(2))
	}
	f.healAt = s.now + 10 + uint64(s.rng.IntN(80))
	s.logf("partition %v until %d", s.net.side[1:], f.healAt)
}

// operator withdraws pending recoveries now and then, and accepts an owner loss that has waited
// long.
func (f *faults) operator(s *Sim) {
	c := s.meta.ctrl
	for si := range s.strs {
		id := s.strs[si].st.ID
		r, ok := s.meta.state.RecoveryOf(id)
		if !ok || r.Status != meta.RecoveryPending {
			f.pendingFor[si] = 0
			continue
		}
		if f.pendingFor[si] == 0 {
			f.pendingFor[si] = s.now
		}
		if c == nil || !s.meta.running(s) {
			continue
		}
		switch {
		case s.rng.IntN(400) == 0:
			if op, err := c.Withdraw(id); err == nil {
				s.logf("operator withdraws recovery %d of stream %d", r.ID, id)
				s.meta.propose(s, id, op)
			}
		case s.now-f.pendingFor[si] > 150 && s.rng.IntN(100) == 0:
			if op, err := c.AcceptOwnerLoss(id, 0); err == nil {
				s.logf("operator accepts the owner loss of stream %d (owner %d)", id, op.Owner)
				s.meta.propose(s, id, op)
			}
		}
	}
}
