package streamsim

import (
	"errors"

	"github.com/ringstream/ringstream/wire"
)

// Disk errors (Options.DiskErrors): a fault arms an error on one copy's disk (an owner's or a
// follower's, ENOSPC or EIO); the next group commit of that disk fails. What the file keeps of the
// failed commit: nothing on ENOSPC (the write was refused), a random prefix on EIO (some pages may
// have reached the device). The host then reports the log failed (stream.Copy.LogFailed), completes
// the copy's waiting reads with the error, and publishes wire.CopyLogFailed with the cause in the
// node's heartbeat until the disk heals. While failed nothing of that disk completes; a seal cannot
// write its fence on a full disk (no answer), but can on EIO (the fence is another file), and then
// answers with the tails the disk holds; no assignment is applied (its record cannot be written: the
// controller sends it again once the copy heals). A failed disk heals after a drawn time in the fault
// phase, and every one heals in the heal phase: the host reopens the copy from its disk at the
// assignment it last applied, as streamhost does when it retries a failed log, and the copy catches
// up as a returning follower (or, an owner within its own epoch, publishes its restart).
type diskFault struct {
	armed  wire.LogFailCause // the next group commit fails with this
	failed wire.LogFailCause // the log failed: nothing completes until healAt
	healAt uint64
	// struck: an error struck the log and it has not healed, whatever the host made of it (the
	// checker's truth); confirmedCap is the copy's durable record tail then: a copy with a failed
	// log never confirms past it.
	struck       bool
	confirmedCap uint64
	// ignored: the FailedLogHealthy variant dropped the error; the disk keeps nothing it is given
	// from then on, while the host reports every commit durable.
	ignored bool
}

var errDisk = errors.New("streamsim: disk error")

// diskError arms an error on the disk of one copy of a random stream: its owner's half the time,
// else a follower's.
func (f *faults) diskError(s *Sim) {
	si := s.rng.IntN(len(s.strs))
	a, _ := s.meta.state.Assignment(s.strs[si].st.ID)
	id := a.Owner
	if len(a.Followers) > 0 && s.rng.IntN(2) == 0 {
		id = a.Followers[s.rng.IntN(len(a.Followers))]
	}
	d := s.nodes[id].disks[si]
	if d == nil || d.fault.armed != 0 || d.fault.failed != 0 || d.fault.ignored {
		return
	}
	d.fault.armed = wire.LogFailNoSpace
	if s.rng.IntN(2) == 0 {
		d.fault.armed = wire.LogFailIO
	}
	d.fault.healAt = s.now + 20 + uint64(s.rng.IntN(150))
	s.logf("node %d stream %d: disk error %s armed (heals at %d)", id, s.strs[si].st.ID, d.fault.armed, d.fault.healAt)
}

// healDisks heals every failed disk that is due (all of them in the heal phase) on a running node,
// reopening its copy from the disk.
func (f *faults) healDisks(s *Sim) {
	for _, n := range s.nodes[1:] {
		for si, d := range n.disks {
			if d == nil || s.err != nil {
				continue
			}
			if s.healing() {
				d.fault.armed = 0
			}
			if d.fault.failed == 0 || !n.running(s.now) || (!s.healing() && s.now < d.fault.healAt) {
				continue
			}
			s.healDisk(n, si)
		}
	}
}

// healDisk ends node n's disk error on stream si: the host reopens the copy from the disk (when it
// is open), as streamhost's retry of a failed log does.
func (s *Sim) healDisk(n *node, si int) {
	d := n.disks[si]
	s.logf("node %d stream %d: disk healed (%s), copy reopened", n.id, s.strs[si].st.ID, d.fault.failed)
	d.fault.failed, d.fault.armed, d.fault.struck = 0, 0, false
	if n.copies[si] != nil && d.applied {
		s.openCopy(n, si)
	}
}

// diskFaulted runs before a disk's storage work of one step: it reports true when that work is
// taken over by a disk fault (the armed error strikes this group commit, or the log has failed, or
// the variant reports commits the disk does not keep).
func (s *Sim) diskFaulted(n *node, si int, hc *hostCopy) bool {
	d := n.disks[si]
	switch {
	case d.fault.ignored:
		s.ignoredCommit(n, si, hc)
		return true
	case d.fault.failed != 0:
		return true
	case d.fault.armed == 0:
		return false
	}
	r, c := d.rec(), d.cur()
	if r.synced == len(r.ids) && c.synced == len(c.ids) {
		return false // the error strikes the next group commit
	}
	cause := d.fault.armed
	d.fault.armed = 0
	_, durable := hc.c.Tails()
	d.fault.struck, d.fault.confirmedCap = true, durable
	if s.opt.Variant == FailedLogHealthy {
		s.logf("node %d stream %d: disk error %s ignored", n.id, s.strs[si].st.ID, cause)
		d.fault.ignored = true
		s.ignoredCommit(n, si, hc)
		return true
	}
	for i := range d.logs {
		l := &d.logs[i]
		keep := l.synced
		if cause == wire.LogFailIO {
			keep += s.rng.IntN(len(l.ids) - l.synced + 1)
		}
		l.keep(keep)
		l.synced = keep
	}
	d.version++
	d.fault.failed = cause
	s.logf("node %d stream %d: log failed (%s) at durable tail %d", n.id, s.strs[si].st.ID, cause, durable)
	reads := hc.reads
	hc.reads = nil
	for _, r := range reads {
		hc.c.ReadDone(r.Tag, nil, errDisk)
	}
	hc.c.LogFailed(wire.LogRecords)
	s.drive(n, si)
	return true
}

// ignoredCommit is the FailedLogHealthy variant's group commit: the host reports every queued append
// durable while the disk keeps none of it (it is dropped at the next power loss).
func (s *Sim) ignoredCommit(n *node, si int, hc *hostCopy) {
	d := n.disks[si]
	moved := false
	if r := d.rec(); r.synced < len(r.ids) && s.rng.IntN(2) == 0 {
		if _, durable := hc.c.Tails(); r.tail() > durable {
			hc.c.AppendDone(wire.LogRecords, r.tail())
			moved = true
		}
	}
	if c := d.cur(); c.synced < len(c.ids) && (hc.syncCur || s.rng.IntN(4) == 0) {
		hc.c.AppendDone(wire.LogCursors, c.tail())
		hc.syncCur = false
		moved = true
	}
	if moved {
		s.drive(n, si)
	}
}

// sealFenceFails reports whether a seal cannot write its fence on the disk: a full file system.
func (d *disk) sealFenceFails() bool { return d.fault.failed == wire.LogFailNoSpace }

// logFailed is the cause the node's heartbeat publishes for the copy (wire.LogFailNone: healthy).
func (d *disk) logFailed() wire.LogFailCause { return d.fault.failed }

// reopenFailed marks a copy opened on a failed disk (a restart while the disk is still failed) as
// failed at once: it serves nothing until the disk heals.
func (s *Sim) reopenFailed(n *node, si int) {
	d, hc := n.disks[si], n.copies[si]
	if d.fault.failed == 0 || hc == nil {
		return
	}
	_, durable := hc.c.Tails()
	d.fault.struck, d.fault.confirmedCap = true, durable
	hc.c.LogFailed(wire.LogRecords)
}
