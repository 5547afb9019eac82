package sim

import (
	"slices"

	"github.com/ringstream/ringstream/engine/vsr"
)

// write is one write of a persist: to the log (appended), a superblock slot or a snapshot slot.
type write struct {
	target writeTarget
	slot   int
	data   []byte
}

type writeTarget uint8

const (
	targetLog writeTarget = iota + 1
	targetSuperblock
	targetSnapshot
)

// persistFault is how a persist fails, if it does.
type persistFault uint8

const (
	persistOK persistFault = iota
	persistEIO
	persistENOSPC
)

func (f persistFault) String() string {
	switch f {
	case persistEIO:
		return "EIO"
	case persistENOSPC:
		return "ENOSPC"
	}
	return "ok"
}

// job is one persist in flight: its writes in the order the driver issues them (snapshot, log,
// fsync, superblock, fsync).
type job struct {
	id       uint64
	doneAt   uint64
	writes   []write
	snapshot bool // the persist carries a checkpoint (compaction may follow it)
	sb       vsr.Superblock
	fault    persistFault
}

// disk is one replica's storage. Its byte slices are what survives a crash; jobs are what has not
// been synced yet.
type disk struct {
	superblocks [vsr.SuperblockCopies][]byte
	snapshots   [2][]byte
	log         []byte
	jobs        []job
	// durable is the highest state a synced superblock has held since the replica started.
	durable durableMark
	// staleCopy: a superblock copy does not hold the newest superblock since the last persist (its
	// write to it was misdirected) or the last crash (which tore one). No copy is torn before a persist
	// or the repair at open rewrites them all (see crash).
	staleCopy bool
}

// format writes the format step's superblock to every copy: replica i of a cluster being created,
// or with recovering set, a replacement for replica i that was lost.
func (d *disk) format(i int, recovering bool) {
	sb := vsr.AppendSuperblock(nil, vsr.FormatSuperblock(vsr.Identity{Cluster: 1, Node: uint16(i + 1),
		Replica: uint8(i)}, recovering))
	for c := range d.superblocks {
		d.superblocks[c] = slices.Clone(sb) // each copy in its own sector
	}
}

// clone is a copy of the synced state (the old copy a disk may later be restored from).
func (d *disk) clone() disk {
	c := disk{log: slices.Clone(d.log)}
	for i := range d.superblocks {
		c.superblocks[i] = slices.Clone(d.superblocks[i])
	}
	for i := range d.snapshots {
		c.snapshots[i] = slices.Clone(d.snapshots[i])
	}
	return c
}

// durableMark is the highest state a replica's synced superblocks held: view, and (log view, op)
// in that order. A message that vouches for durable state must not claim more.
type durableMark struct {
	view, logView uint32
	op            uint64
}

func (m *durableMark) raise(sb vsr.Superblock) {
	m.view = max(m.view, sb.View)
	if sb.LogView > m.logView || sb.LogView == m.logView && sb.Op > m.op {
		m.logView, m.op = sb.LogView, sb.Op
	}
}

// covers reports whether the mark holds view and the log (logView, op).
func (m *durableMark) covers(view, logView uint32, op uint64) bool {
	return m.view >= view && (m.logView > logView || m.logView == logView && m.op >= op)
}

// persist turns an Effects persist into a job due at doneAt (after every earlier job).
func (d *disk) persist(fx *vsr.Effects, doneAt uint64, fault persistFault) {
	j := job{id: fx.PersistID, doneAt: doneAt, snapshot: fx.Snapshot != nil, fault: fault, sb: fx.Superblock}
	if n := len(d.jobs); n > 0 {
		j.doneAt = max(j.doneAt, d.jobs[n-1].doneAt)
	}
	if fx.Snapshot != nil {
		j.writes = append(j.writes, write{target: targetSnapshot, slot: fx.SnapshotSlot,
			data: vsr.AppendSnapshotRecord(nil, fx.Snapshot)})
	}
	var log []byte
	for i := range fx.Entries {
		log = vsr.AppendLogRecord(log, &fx.Entries[i])
	}
	if log != nil {
		j.writes = append(j.writes, write{target: targetLog, data: log})
	}
	if fault == persistENOSPC && log == nil && fx.Snapshot == nil {
		j.fault = persistOK // superblock copies are rewritten in place: they need no new space
	}
	sb := vsr.AppendSuperblock(nil, fx.Superblock)
	for i := range d.superblocks {
		j.writes = append(j.writes, write{target: targetSuperblock, slot: i, data: sb})
	}
	d.jobs = append(d.jobs, j)
}

// apply makes w reach the disk, only its first n bytes when torn.
func (d *disk) apply(w write, n int) {
	data := w.data[:n]
	switch w.target {
	case targetLog:
		d.log = append(d.log, data...)
	case targetSuperblock:
		d.superblocks[w.slot] = overwrite(d.superblocks[w.slot], data, len(w.data))
	case targetSnapshot:
		d.snapshots[w.slot] = overwrite(d.snapshots[w.slot], data, len(w.data))
	}
}

// overwrite writes data over the start of old; a torn write leaves old bytes after it.
func overwrite(old, data []byte, size int) []byte {
	b := make([]byte, max(len(old), size))
	copy(b, old)
	copy(b, data)
	return b[:size]
}

// completed is what one call to complete synced.
type completed struct {
	id       uint64       // last persist synced; 0 for none
	snapshot bool         // one of them carried a checkpoint
	fault    persistFault // the persist that failed, which ends the call
	damaged  bool         // a log append was misdirected: acknowledged records are gone
	// misdirected counts the writes that landed in the wrong place.
	misdirected uint64
}

// misdirection asks, per write, whether it lands in the wrong place.
type misdirection struct {
	superblock func() bool // over another copy
	log        func() bool // over older records
	pick       func(n int) int
}

// complete syncs every job due at now, up to the first that fails (which reaches the disk not at
// all). m is asked per write whether it lands in the wrong place.
func (d *disk) complete(now uint64, m misdirection) completed {
	var c completed
	done := 0
	for ; done < len(d.jobs) && d.jobs[done].doneAt <= now; done++ {
		j := &d.jobs[done]
		misdirected := false
		if j.fault != persistOK {
			c.fault = j.fault
			break
		}
		for _, w := range j.writes {
			if w.target == targetSuperblock && !misdirected && m.superblock() {
				// One copy per persist lands over another: the newest superblock is then held by
				// one copy fewer, and one copy keeps an older one.
				w.slot = (w.slot + 1 + m.pick(len(d.superblocks)-1)) % len(d.superblocks)
				misdirected = true
				c.misdirected++
			}
			d.apply(w, len(w.data))
			if w.target == targetLog && m.log() && d.misdirectLog(len(w.data), m.pick) {
				c.damaged = true
				c.misdirected++
			}
		}
		c.id = j.id
		c.snapshot = c.snapshot || j.snapshot
		d.durable.raise(j.sb)
		d.staleCopy = misdirected
	}
	d.jobs = d.jobs[done:]
	return c
}

// crash drops every job not synced. With torn set, the first one's writes reach the disk up to a
// point: some whole, the last cut at cut bytes (the order of writes holds: the superblock copies only
// after the log). A failed persist (fault) reaches the disk the same way, except that an ENOSPC
// persist stops at its first write that needs new space (a snapshot slot or the log).
//
// While a copy is stale (a misdirected write missed it), the write a crash would tear in a superblock
// copy does not start: with one copy stale and one torn, the newest superblock durable may be held by
// one copy only, a lost state outside the fault budget. (A torn copy alone is repaired at open.)
func (d *disk) crash(torn bool, writes int, cut func(n int) int, fault persistFault) {
	if torn && len(d.jobs) > 0 {
		j := d.jobs[0]
		k := min(writes, len(j.writes)-1)
		if fault == persistENOSPC {
			k = slices.IndexFunc(j.writes, func(w write) bool { return w.target != targetSuperblock })
		}
		for i := 0; i < k; i++ {
			d.apply(j.writes[i], len(j.writes[i].data))
		}
		w := j.writes[k]
		n := cut(len(w.data))
		if w.target == targetSuperblock && n > 0 && n < len(w.data) {
			if d.staleCopy {
				n = 0
			}
			d.staleCopy = true
		}
		d.apply(w, n)
	}
	d.jobs = nil
}

// repairSuperblocks rewrites the superblock in force, byte for byte, to every copy, as the driver
// does at open before the replica's first persist (TigerBeetle does the same). Without it a copy
// torn by a crash stays stale: the superblock in force may then be held by two copies only, and a
// crash while the next persist writes its first copy leaves no two copies alike (the replica would
// recover from the group for a lost state it never had). A storage with no superblock quorum is left
// as it is: the replica recovers.
func (d *disk) repairSuperblocks(dur vsr.Durable) {
	if dur.Cause != nil {
		return
	}
	sb := vsr.AppendSuperblock(nil, dur.Superblock)
	for i := range d.superblocks {
		d.superblocks[i] = slices.Clone(sb)
	}
	d.staleCopy = false
}

// saysRecovering reports whether the synced storage would start its replica in recovery: until the
// persist that ends a recovery is durable, a restart recovers again.
func (d *disk) saysRecovering() bool {
	dur, _, err := vsr.Recover(d.superblocks, d.snapshots, d.log)
	return err != nil || dur.Recovering
}

// compact rewrites the log without the records at or below the checkpoint the synced superblock
// names, as engine's metadata group does after a checkpoint: the new file replaces the old one
// atomically (written, synced, renamed), so a crash leaves one or the other. Records that do not
// decode end the scan and are dropped with everything after them, as Recover would cut them.
func (d *disk) compact() {
	dur, _, err := vsr.Recover(d.superblocks, d.snapshots, d.log)
	if err != nil || dur.Fresh || dur.Superblock.SnapshotOp == 0 {
		return
	}
	kept := make([]byte, 0, len(d.log))
	for off := 0; off < len(d.log); {
		e, n, err := vsr.DecodeLogRecord(d.log[off:])
		if err != nil {
			break
		}
		if e.Op > dur.Superblock.SnapshotOp {
			kept = append(kept, d.log[off:off+n]...)
		}
		off += n
	}
	d.log = kept
}

// corruptSector damages a run of synced bytes, as a latent sector error would: in a superblock slot,
// a snapshot slot or the log. It returns what it hit.
func (d *disk) corruptSector(pick func(n int) int) string {
	var b []byte
	var what string
	switch pick(3) {
	case 0:
		b, what = d.superblocks[pick(len(d.superblocks))], "superblock copy"
	case 1:
		b, what = d.snapshots[pick(len(d.snapshots))], "snapshot slot"
	default:
		b, what = d.log, "log"
	}
	if len(b) == 0 {
		return "nothing (empty " + what + ")"
	}
	start := pick(len(b))
	for i := start; i < min(len(b), start+1+pick(64)); i++ {
		b[i] ^= byte(1 + pick(255))
	}
	return what
}

// misdirectLog moves the last records appended (n bytes) over older bytes of the log: the append
// landed at the wrong offset, and the end of the log keeps what was there (nothing, here: the file
// is shorter by the misdirected write). It reports whether older records were hit.
func (d *disk) misdirectLog(n int, pick func(n int) int) bool {
	if n <= 0 || n >= len(d.log) {
		return false
	}
	data := slices.Clone(d.log[len(d.log)-n:])
	d.log = d.log[:len(d.log)-n]
	at := pick(len(d.log))
	copy(d.log[at:], data)
	return true
}
