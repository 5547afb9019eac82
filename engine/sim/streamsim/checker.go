package streamsim

import (
	"slices"

	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/engine/stream"
)

// ghost is what the checker knows was confirmed on one stream: every batch below any owner's
// confirmed tail, in offset order. It never feeds back into the run.
type ghost struct {
	ids  []batchID
	gen  uint64 // bumped when an accepted loss truncates ids
	seen map[[2]uint64]uint64
	// lossAccepted: an operator accepted an owner loss; records confirmed before it may be gone,
	// and checks that depend on the old history are relaxed for this stream.
	lossAccepted   bool
	acceptedEpochs []uint32
	minEpoch       uint32 // owners of older epochs no longer add to the ghost (the last accepted epoch)
	diverged       bool   // a follower disagreed with its owner after the accepted loss
}

type ownerKey struct {
	stream uint64
	epoch  uint32
}

// checker runs the checks after every step.
type checker struct {
	ghosts []ghost
	owners map[ownerKey]uint16
	// verified caches, per (node, stream), how many of the disk's record batches were matched against
	// the ghost, for the disk version and ghost generation it was computed at.
	verified map[[2]int]verifiedPrefix
}

type verifiedPrefix struct {
	version, gen uint64
	n            int
}

func (c *checker) init(s *Sim) {
	c.ghosts = make([]ghost, len(s.strs))
	for i := range c.ghosts {
		c.ghosts[i].seen = make(map[[2]uint64]uint64)
	}
	c.owners = make(map[ownerKey]uint16)
	c.verified = make(map[[2]int]verifiedPrefix)
}

func (g *ghost) index(base uint64) (int, bool) {
	return slices.BinarySearchFunc(g.ids, base, func(b batchID, off uint64) int {
		switch {
		case b.base < off:
			return -1
		case b.base > off:
			return 1
		}
		return 0
	})
}

// onReady runs after every Ready of a copy: one owner per epoch, an owner's confirmed tail never
// moves back and never passes its own durable tail, nor the start of the next epoch a seal decided;
// what it confirmed joins the ghost, which must agree.
func (c *checker) onReady(s *Sim, n *node, si int, hc *hostCopy) {
	if hc.c.Role() != stream.RoleOwner {
		return
	}
	st := s.strs[si].st
	k := ownerKey{stream: st.ID, epoch: hc.asg.Epoch}
	if o, ok := c.owners[k]; ok && o != n.id {
		s.fail("stream %d epoch %d has two owners: nodes %d and %d", st.ID, k.epoch, o, n.id)
		return
	}
	c.owners[k] = n.id
	conf := hc.c.Confirmed()
	if conf < hc.confirmed {
		s.fail("stream %d: node %d's confirmed tail went back from %d to %d", st.ID, n.id, hc.confirmed, conf)
		return
	}
	hc.confirmed = conf
	d := n.disks[si]
	early := !s.opt.RecordChecksOnly
	if f := d.fault; early && f.struck && conf > f.confirmedCap {
		s.fail("stream %d: node %d confirmed %d after its log failed at durable tail %d", st.ID, n.id, conf,
			f.confirmedCap)
		return
	}
	if early && conf > d.rec().durableTail() {
		s.fail("stream %d: node %d confirmed %d past its own durable tail %d", st.ID, n.id, conf, d.rec().durableTail())
		return
	}
	g := &c.ghosts[si]
	if next, ok := c.nextStart(s, st.ID, hc.asg.Epoch); ok && early && conf > next.RecordStart && !g.lossAccepted {
		s.fail("stream %d: node %d, owner at epoch %d, confirmed %d past epoch %d's start %d (it confirmed after the failover)",
			st.ID, n.id, hc.asg.Epoch, conf, next.Epoch, next.RecordStart)
		return
	}
	if conf == 0 || hc.asg.Epoch < g.minEpoch {
		return // an owner from before an accepted loss: what it confirmed is no longer promised
	}
	c.matchGhost(s, n, si, conf, true)
}

// startOf is the history start recorded for epoch, if any.
func (c *checker) startOf(s *Sim, id uint64, epoch uint32) (meta.HistoryStart, bool) {
	starts, _ := s.meta.state.Starts(id)
	for _, h := range starts.List {
		if h.Epoch == epoch {
			return h, true
		}
	}
	return meta.HistoryStart{}, false
}

// nextStart is the history start of the epoch after epoch, when a seal decided it.
func (c *checker) nextStart(s *Sim, id uint64, epoch uint32) (meta.HistoryStart, bool) {
	starts, _ := s.meta.state.Starts(id)
	for _, h := range starts.List {
		if h.Epoch == epoch+1 {
			return h, true
		}
	}
	return meta.HistoryStart{}, false
}

// matchGhost checks node n's record log of stream si against the ghost below upTo (the whole ghost
// when upTo is 0 and extend is false); with extend, batches below upTo past the ghost join it.
func (c *checker) matchGhost(s *Sim, n *node, si int, upTo uint64, extend bool) bool {
	d, g := n.disks[si], &c.ghosts[si]
	st := s.strs[si].st
	key := [2]int{int(n.id), si}
	v := c.verified[key]
	if v.version != d.version || v.gen != g.gen {
		v = verifiedPrefix{version: d.version, gen: g.gen}
	}
	ids := d.rec().ids
	for i := v.n; i < len(ids); i++ {
		id := ids[i]
		if extend && id.end() > upTo {
			break
		}
		if i >= len(g.ids) {
			if !extend {
				break
			}
			pk := [2]uint64{id.pid, id.seq}
			if off, dup := g.seen[pk]; dup && id.pid != 0 {
				s.fail("stream %d: producer batch %d/%d confirmed at offsets %d and %d", st.ID, id.pid, id.seq, off, id.base)
				return false
			}
			g.seen[pk] = id.base
			g.ids = append(g.ids, id)
		} else if g.ids[i] != id {
			s.fail("stream %d: node %d holds %s where %s was confirmed", st.ID, n.id, id, g.ids[i])
			return false
		}
		v.n = i + 1
	}
	c.verified[key] = v
	if !extend && v.n < len(g.ids) {
		s.fail("stream %d: owner %d lacks confirmed %s (its tail is %d)", st.ID, n.id, g.ids[v.n], d.rec().tail())
		return false
	}
	return true
}

// onAck checks an acknowledged batch is confirmed at the offset it was given.
func (c *checker) onAck(s *Sim, si int, k ackKey, base uint64, count uint32) {
	g := &c.ghosts[si]
	i, ok := g.index(base)
	if !ok {
		if !g.lossAccepted {
			s.fail("stream %d: batch %d/%d acknowledged at %d, not confirmed there", k.stream, k.pid, k.seq, base)
		}
		return
	}
	if id := g.ids[i]; id.pid != k.pid || id.seq != k.seq || id.count != count {
		s.fail("stream %d: batch %d/%d acknowledged at %d, where %s was confirmed", k.stream, k.pid, k.seq, base, id)
	}
}

// onRead checks a fetched batch is the confirmed one at its offset.
func (c *checker) onRead(s *Sim, si int, from uint16, id batchID) {
	g := &c.ghosts[si]
	i, ok := g.index(id.base)
	if !ok {
		if !g.lossAccepted {
			s.fail("stream %d: consumer read %s from node %d, not confirmed", s.strs[si].st.ID, id, from)
		}
		return
	}
	if g.ids[i] != id {
		s.fail("stream %d: consumer read %s from node %d where %s was confirmed", s.strs[si].st.ID, id, from, g.ids[i])
	}
}

// onCut checks that no batch a cut dropped was confirmed, but for the cut at an accepted owner
// loss's start (belowAcceptedStart).
func (c *checker) onCut(s *Sim, n *node, si int, dropped []batchID) {
	g := &c.ghosts[si]
	for _, id := range dropped {
		if i, ok := g.index(id.base); ok && g.ids[i] == id && !c.belowAcceptedStart(s, si, id) {
			s.fail("stream %d: node %d cut confirmed %s", s.strs[si].st.ID, n.id, id)
			return
		}
	}
}

// belowAcceptedStart says whether id is a batch of an epoch before an accepted owner loss, at or
// past the start that loss recorded. That start is the tails the new owner last published, which can
// lag its log: the new owner keeps what it holds past the start (meta.CutPoint never cuts an owner
// at its own start) and confirms it again in its epoch, while a copy whose own epoch is older is cut
// at the start when it joins. Its copy of such a batch is not one the confirm counted: whatever an
// epoch at or after the loss confirmed is held by W copies whose own epoch is at or past it, and
// those are never cut at that start. Seed 46426 of TestSimDiskErrors: node 3, owner at epoch 1,
// joined epoch 5 and was cut at the start 8 of the loss accepted at epoch 2, dropping epoch 1's
// batches that epoch 2's owner (node 4, tail 21) had confirmed again.
func (c *checker) belowAcceptedStart(s *Sim, si int, id batchID) bool {
	for _, e := range c.ghosts[si].acceptedEpochs {
		if start, ok := c.startOf(s, s.strs[si].st.ID, e); ok && id.epoch < e && id.base >= start.RecordStart {
			return true
		}
	}
	return false
}

// onAcceptedLoss relaxes the checks of a stream whose owner loss an operator accepted: the ghost
// keeps only the prefix the new owner holds below the start the acceptance recorded, which is all
// the guard protects from then on (nothing, when no start was recorded).
func (c *checker) onAcceptedLoss(s *Sim, id uint64) {
	si, _ := s.streamIndex(id)
	g := &c.ghosts[si]
	a, _ := s.meta.state.Assignment(id)
	g.lossAccepted = true
	g.acceptedEpochs = append(g.acceptedEpochs, a.Epoch)
	g.minEpoch = a.Epoch
	start, recorded := c.startOf(s, id, a.Epoch)
	if d := s.nodes[a.Owner].disks[si]; d != nil && recorded {
		k := 0
		for k < len(g.ids) && k < len(d.rec().ids) && g.ids[k] == d.rec().ids[k] && g.ids[k].end() <= start.RecordStart {
			k++
		}
		for _, id := range g.ids[k:] {
			delete(g.seen, [2]uint64{id.pid, id.seq})
		}
		g.ids = g.ids[:k]
	} else {
		g.ids, g.seen = nil, make(map[[2]uint64]uint64)
	}
	g.gen++
	for i := range s.work.consumers {
		if cs := &s.work.consumers[i]; cs.si == si {
			cs.next = 0
		}
	}
}

// check runs after every step: the current owner, once it applied its assignment, holds every
// confirmed record and is not below its own history start; every follower that applied its
// owner's epoch agrees with the owner's log below the shorter tail.
func (c *checker) check(s *Sim) {
	for si := range s.strs {
		if s.err != nil {
			return
		}
		st := s.strs[si].st
		a, _ := s.meta.state.Assignment(st.ID)
		n := s.nodes[a.Owner]
		hc := n.copies[si]
		if n.up && hc != nil && hc.asg.Epoch == a.Epoch && hc.c.Role() == stream.RoleOwner && n.disks[si].ownEpoch() == a.Epoch {
			c.checkOwner(s, n, si, a)
		}
		if !s.opt.RecordChecksOnly {
			c.checkFollowers(s, si)
		}
	}
	if !s.opt.Scripted && s.now == uint64(s.opt.Ticks+s.opt.Ticks/4) {
		c.checkLiveness(s)
	}
}

// checkLiveness runs at the end of a run: after the heal phase (every node up and awake, every disk
// healed, no partition for a quarter of the run) no stream may still be wedged: a producer waiting
// since before the heal phase began fails the run. A fault, a failed log among them, must end in a
// failover or a heal, never in a stream that waits while every copy could serve.
func (c *checker) checkLiveness(s *Sim) {
	for _, p := range s.work.producers {
		if !p.waiting || p.since >= uint64(s.opt.Ticks) {
			continue
		}
		st := s.strs[p.si].st
		a, _ := s.meta.state.Assignment(st.ID)
		rec, pending := s.meta.state.RecoveryOf(st.ID)
		s.fail("stream %d wedged: producer %d has waited since tick %d, through the whole heal phase (epoch %d, "+
			"owner %d, followers %v, recovery pending %v (%d))", st.ID, p.id, p.since, a.Epoch, a.Owner, a.Followers,
			pending && rec.Status == meta.RecoveryPending, rec.ID)
		return
	}
}

func (c *checker) checkOwner(s *Sim, n *node, si int, a meta.Assignment) {
	st, g := s.strs[si].st, &c.ghosts[si]
	if !c.matchGhost(s, n, si, 0, false) {
		return
	}
	if slices.Contains(g.acceptedEpochs, a.Epoch) || s.opt.RecordChecksOnly {
		return
	}
	starts, _ := s.meta.state.Starts(st.ID)
	for _, h := range starts.List {
		if h.Epoch == a.Epoch && h.Node == n.id && n.disks[si].rec().tail() < h.RecordStart {
			s.fail("stream %d: owner %d at epoch %d has record tail %d, below its own history start %d",
				st.ID, n.id, a.Epoch, n.disks[si].rec().tail(), h.RecordStart)
		}
	}
}

// checkFollowers compares every applied follower with the applied owner of its epoch. After an
// accepted owner loss the recorded history may not match the copies (published tails that lag or
// lead its log): a follower that disagrees then is counted, not
// failed.
func (c *checker) checkFollowers(s *Sim, si int) {
	st := s.strs[si].st
	for _, on := range s.nodes[1:] {
		oc := on.copies[si]
		if !on.up || oc == nil || oc.c.Role() != stream.RoleOwner || on.disks[si].ownEpoch() != oc.asg.Epoch {
			continue
		}
		for _, fn := range s.nodes[1:] {
			fc := fn.copies[si]
			if fn == on || !fn.up || fc == nil || fc.c.Role() != stream.RoleFollower || fc.asg.Epoch != oc.asg.Epoch ||
				fn.disks[si].ownEpoch() != oc.asg.Epoch {
				continue
			}
			o, f := on.disks[si].rec().ids, fn.disks[si].rec().ids
			for i := range min(len(o), len(f)) {
				if o[i] != f[i] && c.ghosts[si].lossAccepted {
					c.ghosts[si].diverged = true
					return
				}
				if o[i] != f[i] {
					s.fail("stream %d epoch %d: follower %d holds %s where owner %d holds %s", st.ID, oc.asg.Epoch,
						fn.id, f[i], on.id, o[i])
					return
				}
			}
		}
	}
}
