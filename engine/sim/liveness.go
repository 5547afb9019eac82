package sim

// Liveness, in two phases after the fault phase (as TigerBeetle's VOPR checks it).
//
// Core: a random quorum of replicas that have not lost state (the core) is healed: its nodes up,
// resumed, their disks working, the links among them clean. Every other replica is kept down or cut
// off from all. The clients must each complete two more requests within CoreTicks: a quorum must be
// enough to make progress, whatever the minority does.
//
// Heal: every node up and every link clean; the clients complete two more requests, then stop, and
// every replica must reach one view, in normal status, at one commit that covers its whole log,
// with equal state digests, within LivenessTicks.

// requireCoreProgress runs the core phase.
func (s *Sim) requireCoreProgress() error {
	s.stopFaults()
	core := s.pickCore()
	s.net.heal()
	for _, n := range s.nodes {
		switch {
		case core[n.index] && !n.up:
			if err := s.startRetrying(n); err != nil {
				return err
			}
			s.stats.Restarts++
		case core[n.index] && n.replica.Failed():
			s.crash(n) // its supervisor restarts the node that reported a failed persist
			if err := s.startRetrying(n); err != nil {
				return err
			}
			s.stats.Restarts++
		case core[n.index]:
		case n.up && s.rng.IntN(2) == 0:
			s.crash(n)
			s.stats.Crashes++
		default:
			s.net.isolate(n.index)
		}
	}
	s.trace("core %v: links now %v", core, s.net.blocked)
	start := s.now
	base := s.completedNow()
	for s.now-start < s.opts.CoreTicks {
		if err := s.tick(); err != nil {
			return err
		}
		if s.progressed(base) {
			s.stats.CoreTicks = s.now - start
			return nil
		}
	}
	return s.violation("core %v made no progress within %d ticks: %s", core, s.opts.CoreTicks, s.describe())
}

// pickCore draws a quorum among the replicas that have not lost state (the fault budget leaves at
// least a quorum of them).
func (s *Sim) pickCore() []bool {
	core := make([]bool, len(s.nodes))
	order := s.rng.Perm(len(s.nodes))
	picked := 0
	for _, i := range order {
		if picked < s.quorum() && !s.nodes[i].lostState() {
			core[i] = true
			picked++
		}
	}
	return core
}

// stopFaults ends the fault phase: no more faults drawn, no loss or corruption, no long partition.
func (s *Sim) stopFaults() {
	s.faults = false
	s.opts.DropPPM, s.opts.DuplicatePPM, s.opts.CorruptPPM = 0, 0, 0
	s.net.longUntil = 0
	for _, n := range s.nodes {
		n.pausedUntil, n.fullUntil = 0, 0
	}
}

// heal ends the core phase (or the fault phase): every node up, every link healed.
func (s *Sim) heal() error {
	s.stopFaults()
	s.net.heal()
	for _, n := range s.nodes {
		if n.up && n.replica.Failed() {
			s.crash(n)
		}
		if !n.up {
			if err := s.startRetrying(n); err != nil {
				return err
			}
			s.stats.Restarts++
		}
	}
	return nil
}

// restartFailed is the node supervisor once the faults stopped: a node whose persist failed is
// restarted at once. Its fault was drawn when the persist was issued, before the faults stopped, and
// the persist completed after: the phases' own restarts at their start do not see it (seed 53250: a
// core replica failed one tick into the core phase and the other two could never finish a view change).
func (s *Sim) restartFailed() error {
	for _, n := range s.nodes {
		if n.up && n.replica.Failed() {
			s.trace("restart r%d after its failed persist", n.index)
			s.crash(n)
			if err := s.startRetrying(n); err != nil {
				return err
			}
			s.stats.Restarts++
		}
	}
	return nil
}

// requireLiveness runs the healed cluster until every client completed two more requests; then the
// clients stop asking, and the replicas must converge. All of it within LivenessTicks.
func (s *Sim) requireLiveness() error {
	start := s.now
	base := s.completedNow()
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
			return s.checkConverged()
		}
	}
	s.collectStats()
	return s.violation("no progress within %d ticks after faults stopped: %s", s.opts.LivenessTicks, s.describe())
}

func (s *Sim) completedNow() []uint64 {
	base := make([]uint64, len(s.clients))
	for i, c := range s.clients {
		base[i] = c.completed
	}
	return base
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

// checkConverged: the converged replicas hold equal state and client tables, at a commit that covers
// every op committed anywhere (each op's checksum was checked as the replicas committed it).
func (s *Sim) checkConverged() error {
	first := s.nodes[0].replica
	for _, n := range s.nodes[1:] {
		if d, want := n.replica.Digest(), first.Digest(); d != want {
			return s.violation("converged at commit %d: replica %d has digest %x, replica 0 %x", first.Commit(),
				n.index, d, want)
		}
	}
	if first.Commit() < s.maxCommitted {
		return s.violation("converged at commit %d, below committed op %d", first.Commit(), s.maxCommitted)
	}
	return nil
}

func (s *Sim) collectStats() {
	for _, n := range s.nodes {
		if n.up {
			st := n.replica.Stats()
			s.stats.ViewChanges += st.ViewChanges
			s.stats.SnapshotsInstalled += st.SnapshotsIn
			s.stats.SnapshotChunks += st.SnapshotChunksIn
			s.stats.TransferRestarts += st.SnapshotTransfersRestarted
			s.stats.Recoveries += st.Recoveries
		}
	}
}
