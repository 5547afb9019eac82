package sim

import "fmt"

// digestEvery spaces the digest comparisons: every commit that is a multiple of it.
const digestEvery = 4

// check runs every check on node n after a step.
func (s *Sim) check(n *node) error {
	r := n.replica
	r.CheckInvariants()
	// No two replicas commit different ops at one op number.
	for op := n.checked + 1; op <= r.Commit(); op++ {
		head, ok := r.Head(op)
		if !ok {
			continue // below the checkpoint this replica installed; its head is checked at the commit
		}
		if want, seen := s.committed[op]; seen && want != head {
			return s.violation("replica %d committed op %d with checksum %x, another replica %x", n.index, op,
				head, want)
		}
		s.committed[op] = head
	}
	if r.Commit() > n.checked {
		n.checked = r.Commit()
		if r.Commit() >= s.maxCommitted {
			s.maxCommitted = r.Commit()
			s.maxCommittedView = max(s.maxCommittedView, r.View())
		}
		s.stats.Committed = s.maxCommitted
	}
	// State machines at the same commit are equal. The state only changes with the commit, and a
	// divergence never heals, so the digest (which walks the whole state) is compared at every
	// digestEvery-th commit a replica reaches.
	if n.digestAt == r.Commit()+1 || r.Commit()%digestEvery != 0 {
		return s.checkPrimary(n)
	}
	n.digestAt = r.Commit() + 1
	digest := r.Digest()
	if want, seen := s.digests[r.Commit()]; seen && want != digest {
		return s.violation("replica %d at commit %d has digest %x, another replica %x", n.index, r.Commit(),
			digest, want)
	}
	s.digests[r.Commit()] = digest
	return s.checkPrimary(n)
}

// checkPrimary: a primary of a view at or past the one in which the highest commit was seen holds
// every committed op: committed ops survive view changes and crashes. (A primary of an older view, say
// a replica that restarted with nothing durable, can commit nothing: a quorum has left its view.)
func (s *Sim) checkPrimary(n *node) error {
	r := n.replica
	if r.IsPrimary() && r.View() >= s.maxCommittedView {
		if r.Op() < s.maxCommitted {
			return s.violation("primary %d of view %d has op %d, below committed op %d", n.index, r.View(),
				r.Op(), s.maxCommitted)
		}
		if head, ok := r.Head(s.maxCommitted); ok {
			if want, seen := s.committed[s.maxCommitted]; seen && want != head {
				return s.violation("primary %d of view %d holds op %d with checksum %x, committed %x", n.index,
					r.View(), s.maxCommitted, head, want)
			}
		}
	}
	return nil
}

// heal ends the fault phase: every node up, every link healed, no more loss or corruption.
func (s *Sim) heal() error {
	s.faults = false
	s.net.heal()
	s.opts.DropPPM, s.opts.DuplicatePPM, s.opts.CorruptPPM = 0, 0, 0
	for _, n := range s.nodes {
		if !n.up {
			if err := s.startRetrying(n); err != nil {
				return err
			}
			s.stats.Restarts++
		}
	}
	return nil
}

// requireLiveness runs the healed cluster until every client completed two more requests; then the
// clients stop asking, and every replica must reach one view, in normal status, at one commit that
// covers its whole log. All of it within LivenessTicks.
func (s *Sim) requireLiveness() error {
	start := s.now
	base := make([]uint64, len(s.clients))
	for i, c := range s.clients {
		base[i] = c.completed
	}
	for s.now-start < s.opts.LivenessTicks {
		if err := s.tick(); err != nil {
			return err
		}
		if !s.quiet && s.progressed(base) {
			s.quiet = true
		}
		if s.quiet && s.converged() {
			s.stats.LivenessTicks = s.now - start
			s.collectStats()
			return nil
		}
	}
	s.collectStats()
	return s.violation("no progress within %d ticks after faults stopped: %s", s.opts.LivenessTicks, s.describe())
}

func (s *Sim) progressed(base []uint64) bool {
	for i, c := range s.clients {
		if c.completed < base[i]+2 {
			return false
		}
	}
	return true
}

func (s *Sim) converged() bool {
	for _, c := range s.clients {
		if c.waiting {
			return false
		}
	}
	first := s.nodes[0].replica
	for _, n := range s.nodes {
		r := n.replica
		if !r.Normal() || r.View() != first.View() || r.Commit() != first.Commit() || r.Commit() != r.Op() {
			return false
		}
	}
	return true
}

func (s *Sim) collectStats() {
	for _, n := range s.nodes {
		if n.up {
			st := n.replica.Stats()
			s.stats.ViewChanges += st.ViewChanges
			s.stats.SnapshotsInstalled += st.SnapshotsIn
		}
	}
}

// describe summarizes the replicas for a failure message.
func (s *Sim) describe() string {
	out := ""
	for _, n := range s.nodes {
		r := n.replica
		out += fmt.Sprintf("[r%d view=%d log_view=%d normal=%v op=%d commit=%d] ", n.index, r.View(), r.LogView(),
			r.Normal(), r.Op(), r.Commit())
	}
	for _, c := range s.clients {
		out += fmt.Sprintf("[c%d req=%d waiting=%v done=%d] ", c.id, c.request, c.waiting, c.completed)
	}
	return out
}
