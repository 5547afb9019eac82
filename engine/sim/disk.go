package sim

import (
	"slices"

	"github.com/ringstream/ringstream/engine/vsr"
)

// write is one write of a persist: to the log (appended), a superblock slot or a snapshot slot. stage
// is the fsync it waits for: 0 for the first, 1 for the second (a persist with a checkpoint, or with
// records too large to go inline, syncs twice; see vsr's storage notes).
type write struct {
	target writeTarget
	slot   int
	stage  int
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

// job is one persist in flight: its writes in the order the driver issues them, as engine's metadata
// store does: snapshot, fsync (a checkpoint only); log records and the copies of the superblock's
// area, each carrying the records inline, one fsync. Records too large to go inline (more than
// vsr.InlineMax) are written and synced before the copies, which then carry none.
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
	superblocks [vsr.SuperblockSlots][]byte
	snapshots   [2][]byte
	log         []byte
	jobs        []job
	// durable is the highest state a synced superblock has held since the replica started.
	durable durableMark
	// broken is the wrong layout this disk writes, if any (Options.BrokenStorage).
	broken BrokenStorage
}

// format writes the format step's superblock to every copy of both areas: replica i of a cluster being created,
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
	stage := 0
	if fx.Snapshot != nil {
		j.writes = append(j.writes, write{target: targetSnapshot, slot: fx.SnapshotSlot,
			data: vsr.AppendSnapshotRecord(nil, fx.Snapshot)})
		stage = 1
	}
	var log []byte
	for i := range fx.Entries {
		log = vsr.AppendLogRecord(log, &fx.Entries[i])
	}
	if log != nil {
		j.writes = append(j.writes, write{target: targetLog, stage: stage, data: log})
	}
	inline := log
	if len(log) > vsr.InlineMax {
		inline, stage = nil, 1
	}
	if d.broken == StorageNoInline {
		inline = nil
	}
	if fault == persistENOSPC && log == nil && fx.Snapshot == nil {
		j.fault = persistOK // superblock copies are rewritten in place: they need no new space
	}
	sb := vsr.AppendSuperblockCopy(nil, fx.Superblock, inline)
	area := vsr.AreaOf(fx.Superblock.Sequence)
	if d.broken == StorageOneArea {
		area = 0
	}
	for c := 0; c < vsr.SuperblockCopies; c++ {
		j.writes = append(j.writes, write{target: targetSuperblock, slot: area*vsr.SuperblockCopies + c,
			stage: stage, data: sb})
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
				// One copy per persist lands over another copy, of either area: the newest
				// superblock is then held by one copy fewer, and one slot keeps what it held.
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
	}
	d.jobs = d.jobs[done:]
	return c
}

// crash drops every job not synced. With torn set, the first one's writes reach the disk as a power
// loss may leave them: the writes of the fsyncs before a drawn one whole (their fsync returned), and
// of the drawn fsync any subset, each write whole, torn (a prefix of its bytes) or lost, since nothing
// orders writes that one fsync covers. A failed persist (fault) reaches the disk the same way, except
// that an ENOSPC persist reaches it not at all: its first write needs new space (a snapshot slot or the
// log), and the writes after it in its chain are cancelled.
func (d *disk) crash(torn bool, pick func(n int) int, fault persistFault) {
	if torn && len(d.jobs) > 0 && fault != persistENOSPC {
		j := d.jobs[0]
		last := j.writes[len(j.writes)-1].stage
		stage := pick(last + 1)
		for _, w := range j.writes {
			switch {
			case w.stage < stage:
				d.apply(w, len(w.data))
			case w.stage == stage:
				switch pick(3) {
				case 1:
					d.apply(w, len(w.data))
				case 2:
					d.apply(w, pick(len(w.data)+1))
				}
			}
		}
	}
	d.jobs = nil
}

// repairSuperblocks does what the driver does at open, before the replica's first persist: the
// copy in force, byte for byte, to every copy of its area, and the records only that copy carries
// appended to the log (after the torn tail was cut). Without the first, a power loss that left the
// superblock in force on one copy leaves one bad sector from a rollback; without the second, the next
// persist but one overwrites the only copy of those records. A storage with no proven state is left
// as it is: the replica recovers.
func (d *disk) repairSuperblocks(dur vsr.Durable) {
	if dur.Cause != nil || dur.InForce == nil {
		return
	}
	area := vsr.AreaOf(dur.Superblock.Sequence)
	if d.broken == StorageOneArea {
		area = 0
	}
	for c := 0; c < vsr.SuperblockCopies; c++ {
		d.superblocks[area*vsr.SuperblockCopies+c] = slices.Clone(dur.InForce)
	}
	if d.broken != StorageNoLogRepair {
		d.log = append(d.log, dur.Unlogged...)
	}
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
