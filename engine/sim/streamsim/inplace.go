package streamsim

import (
	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/engine/stream"
	"github.com/ringstream/ringstream/wire"
)

// reassignInPlace applies assignment a to node n's open copy of stream si the way the broker does
// when the copy's logs were not cut since it read them (engine/streamhost's reopen): the copy is
// sealed at a's epoch (what waits is refused), its queued appends complete and are reported
// durable, its reads end unreported, and stream.Copy.Reassign moves it to a keeping what it knows;
// then the cursors on disk are fed and OpenDone takes the disk's state. It reports false, changing
// nothing, when the copy must be made again from its disk instead (none open, a cut since it
// opened, a failed log, or an assignment Reassign refuses).
func (s *Sim) reassignInPlace(n *node, si int, a meta.Assignment, starts []meta.HistoryStart) bool {
	hc, d := n.copies[si], n.disks[si]
	if hc == nil || hc.cutSinceOpen || hc.c.Failed() || hc.c.Role() == stream.RoleOpening {
		return false
	}
	hc.c.Sealed(a.Epoch)
	s.drive(n, si)
	if s.err != nil {
		return true
	}
	d.syncAll()
	hc.reads = nil // ended; their ends are not reported to the copy that follows
	if _, durable := hc.c.Tails(); d.rec().tail() > durable {
		hc.c.AppendDone(wire.LogRecords, d.rec().tail())
	}
	hc.c.AppendDone(wire.LogCursors, d.cur().tail())
	s.drive(n, si)
	if s.err != nil {
		return true
	}
	pa := a
	pa.Policy = s.copyPolicy(a)
	if err := hc.c.Reassign(pa, starts); err != nil {
		return false
	}
	for _, raw := range d.cur().raw {
		if name, off, ok := cursorEvent(raw); ok {
			hc.c.ObserveCursor(name, off)
		}
	}
	hc.c.OpenDone(stream.OpenState{RecordTail: d.rec().tail(), CursorTail: d.cur().tail(), Fence: d.fence,
		LogEpochs: d.epochs})
	hc.asg, hc.confirmed, hc.opened, hc.syncCur = d.asg, 0, s.now, false
	s.counts.inPlace++
	s.drive(n, si)
	return true
}

// cutChanged reports whether a cut moved either log's tail (the copy open on it then no longer
// knows its logs: it is made again on its next assignment).
func cutChanged(recBefore, curBefore uint64, d *disk) bool {
	return d.rec().tail() != recBefore || d.cur().tail() != curBefore
}
