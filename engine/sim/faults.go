package sim

import (
	"errors"

	"github.com/ringstream/ringstream/engine/vsr"
)

// The fault phase: every fault below is drawn per tick, per packet, per persist or per restart from
// the run's rates (Options). Faults that lose acknowledged state are held to the fault budget.

// injectFaults changes the partition, crashes, pauses and restarts nodes.
func (s *Sim) injectFaults() error {
	s.injectPartition()
	for _, n := range s.nodes {
		switch {
		case n.up && s.crashNow(n):
			s.stats.Crashes++
			s.trace("crash r%d (view=%d op=%d commit=%d, %d persists in flight)", n.index, n.replica.View(),
				n.replica.Op(), n.replica.Commit(), len(n.disk.jobs))
			s.crash(n)
		case n.up && n.replica.Failed() && s.chance(s.opts.RestartPPM):
			// The node reports the failed persist; its supervisor restarts it.
			s.trace("restart r%d after its failed persist", n.index)
			s.crash(n)
		case n.up && !n.paused(s.now) && s.chance(s.opts.PausePPM):
			n.pausedUntil = s.now + 1 + uint64(s.rng.Int64N(int64(s.opts.PauseTicksMax)))
			s.stats.Pauses++
			s.trace("pause r%d until tick %d", n.index, n.pausedUntil)
		case !n.up && (s.chance(s.opts.RestartPPM) || s.now-n.downAt <= 2 && s.chance(s.opts.QuickRestartPPM)):
			if err := s.restart(n); err != nil {
				return err
			}
		}
	}
	return nil
}

// crashNow draws whether n crashes this tick: now and then; more often while a persist is in flight;
// more often still while the persist of a view it just moved to may be in flight, where a message
// that vouches for the new view and left too early shows.
func (s *Sim) crashNow(n *node) bool {
	if s.chance(s.opts.CrashPPM) {
		return true
	}
	if len(n.disk.jobs) == 0 {
		return false
	}
	if s.now-n.viewAt <= s.opts.DiskLatencyTicksMax+s.opts.SlowDiskTicksMax && s.chance(s.opts.CrashAfterViewPPM) {
		return true
	}
	return s.chance(s.opts.CrashInFlightPPM)
}

// injectPartition draws a new partition, or a long one, unless a long one holds.
func (s *Sim) injectPartition() {
	nw := s.net
	switch {
	case s.now < nw.longUntil:
	case nw.longUntil != 0:
		nw.longUntil = 0
		nw.heal()
		s.trace("long partition over")
	case s.chance(s.opts.LongPartitionPPM):
		nw.longUntil = s.now + 1 + uint64(s.rng.Int64N(int64(s.opts.LongPartitionTicksMax)))
		nw.isolate(s.longPartitionVictim())
		s.stats.LongPartitions++
		s.trace("long partition until tick %d: links now %v", nw.longUntil, nw.blocked)
	case s.chance(s.opts.PartitionPPM):
		nw.repartition()
		s.trace("links now %v", nw.blocked)
	}
}

// longPartitionVictim picks the node a long partition cuts off: the primary of the highest view
// half of the time (the partition a view change must route around), any node otherwise.
func (s *Sim) longPartitionVictim() int {
	if s.rng.IntN(2) == 0 {
		best := -1
		for _, n := range s.nodes {
			if n.up && n.replica.IsPrimary() && (best < 0 || n.replica.View() > s.nodes[best].replica.View()) {
				best = n.index
			}
		}
		if best >= 0 {
			return best
		}
	}
	return s.rng.IntN(len(s.nodes))
}

// restart starts a down node, first applying the restart's storage faults within the budget.
func (s *Sim) restart(n *node) error {
	if err := s.injectStorageFaults(n); err != nil {
		return err
	}
	err := s.start(n)
	if errors.Is(err, errReadFault) {
		s.stats.ReadErrors++
		return nil
	}
	if err != nil {
		return s.violation("%v", err)
	}
	s.stats.Restarts++
	s.trace("restart r%d: view=%d log_view=%d normal=%v op=%d commit=%d", n.index, n.replica.View(),
		n.replica.LogView(), n.replica.Normal(), n.replica.Op(), n.replica.Commit())
	return nil
}

// injectStorageFaults damages a down node's synced storage (LostState runs only): its disk wiped,
// restored from an old copy, or a sector corrupted. Each counts against the budget.
func (s *Sim) injectStorageFaults(n *node) error {
	if !s.opts.LostState || !s.budgetAllows(n) {
		return nil
	}
	switch {
	case s.chance(s.opts.WipePPM):
		n.disk = disk{}
		if err := s.refusesUnformatted(n); err != nil {
			return err
		}
		n.disk.format(n.index, true)
		n.damaged = true
		s.stats.Wipes++
		s.trace("wipe r%d's disk; formatted as its replacement", n.index)
	case n.oldCopy != nil && s.chance(s.opts.OldCopyPPM):
		n.disk = n.oldCopy.clone()
		n.disk.format(n.index, true)
		n.damaged = true
		s.stats.OldCopies++
		s.trace("restore r%d's disk from an old copy; formatted as its replacement", n.index)
	case s.chance(s.opts.SectorPPM):
		what := n.disk.corruptSector(s.rng.IntN)
		n.damaged = true
		s.stats.SectorFaults++
		s.trace("corrupt a sector of r%d's %s", n.index, what)
	}
	return nil
}

// refusesUnformatted: storage that lost every superblock copy must not start as if new.
func (s *Sim) refusesUnformatted(n *node) error {
	_, _, err := vsr.Recover(n.disk.superblocks, n.disk.snapshots, n.disk.log)
	if !errors.Is(err, vsr.ErrUnformatted) {
		return s.violation("r%d's wiped disk: Recover returned %v, want vsr.ErrUnformatted", n.index, err)
	}
	return nil
}

// budgetAllows reports whether n may lose acknowledged state now: at most f replicas (a minority)
// may be in that state at once, counting n's own. More would lose committed ops whatever the
// protocol does, so such runs are not drawn.
func (s *Sim) budgetAllows(n *node) bool {
	if n.lostState() {
		return true
	}
	lost := 0
	for _, m := range s.nodes {
		if m.lostState() {
			lost++
		}
	}
	return lost < (s.opts.Replicas-1)/2
}

// lostStateFault draws a fault that loses n's acknowledged state, within the budget.
func (s *Sim) lostStateFault(n *node, ppm uint32) bool {
	return s.faults && s.opts.LostState && s.chance(ppm) && s.budgetAllows(n)
}

// persistDoneAt draws the tick a persist issued now is durable at (before the ones queued ahead of it).
func (s *Sim) persistDoneAt() uint64 {
	at := s.now + 1 + uint64(s.rng.Int64N(int64(s.opts.DiskLatencyTicksMax)))
	if s.opts.SlowDiskTicksMax > 0 {
		at += uint64(s.rng.Int64N(int64(s.opts.SlowDiskTicksMax) + 1))
	}
	return at
}

// persistFault draws whether a persist n issues now fails: with ENOSPC while its disk is full
// (sometimes filling it), with EIO now and then.
func (s *Sim) persistFault(n *node) persistFault {
	if !s.faults {
		return persistOK
	}
	if s.now < n.fullUntil {
		return persistENOSPC
	}
	if !s.chance(s.opts.PersistFailPPM) {
		return persistOK
	}
	if s.rng.IntN(2) == 0 {
		n.fullUntil = s.now + 1 + uint64(s.rng.Int64N(int64(s.opts.FullTicksMax)))
		return persistENOSPC
	}
	return persistEIO
}

// completeDisk syncs n's persists due now and reports them to the replica. A failed persist is
// reported with PersistFailed: the replica stops taking part until its node is restarted.
func (s *Sim) completeDisk(n *node) error {
	c := n.disk.complete(s.now, misdirection{
		superblock: func() bool { return s.faults && s.chance(s.opts.MisdirectPPM) },
		log:        func() bool { return s.lostStateFault(n, s.opts.MisdirectLogPPM) },
		pick:       s.rng.IntN,
	})
	s.stats.MisdirectedWrites += c.misdirected
	if c.damaged && !n.damaged {
		n.damaged = true
		s.trace("misdirect a log append of r%d over older records", n.index)
	}
	if c.snapshot && s.chance(s.opts.CompactPPM) {
		n.disk.compact()
		s.stats.Compactions++
	}
	if c.id != 0 {
		s.step++
		n.replica.Advance(c.id)
		if err := s.flush(n); err != nil {
			return err
		}
	}
	if c.fault != persistOK {
		// What reached the disk of a failed persist is unknown: some prefix of its writes. Nothing
		// after it is issued.
		s.stats.PersistFailures++
		s.trace("persist of r%d failed with %v: the replica stops taking part", n.index, c.fault)
		n.disk.crash(true, s.rng.IntN, c.fault)
		n.replica.PersistFailed()
		return s.flush(n)
	}
	return nil
}
