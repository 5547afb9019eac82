package sim

import (
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

// job is one persist in flight: its writes in the order the driver issues them (snapshot, log,
// fsync, superblock, fsync).
type job struct {
	id     uint64
	doneAt uint64
	writes []write
}

// disk is one replica's storage. Its byte slices are what survives a crash; jobs are what has not
// been synced yet.
type disk struct {
	superblocks [vsr.SuperblockCopies][]byte
	snapshots   [2][]byte
	log         []byte
	jobs        []job
}

// format writes the format step's superblock to every copy: replica i of a cluster being created.
func (d *disk) format(i int) {
	sb := vsr.AppendSuperblock(nil, vsr.FormatSuperblock(vsr.Identity{Cluster: 1, Node: uint16(i + 1), Replica: uint8(i)}, false))
	for c := range d.superblocks {
		d.superblocks[c] = sb
	}
}

// persist turns an Effects persist into a job due at doneAt (after every earlier job).
func (d *disk) persist(fx *vsr.Effects, doneAt uint64) {
	j := job{id: fx.PersistID, doneAt: doneAt}
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

// complete syncs every job due at now and returns the last id synced (0 for none).
func (d *disk) complete(now uint64) uint64 {
	id := uint64(0)
	done := 0
	for ; done < len(d.jobs) && d.jobs[done].doneAt <= now; done++ {
		for _, w := range d.jobs[done].writes {
			d.apply(w, len(w.data))
		}
		id = d.jobs[done].id
	}
	d.jobs = d.jobs[done:]
	return id
}

// crash drops every job not synced. With torn set, the first one's writes reach the disk up to a
// point: some whole, the last cut at cut bytes (the order of writes holds: the superblock only after
// the log).
func (d *disk) crash(torn bool, writes int, cut func(n int) int) {
	if torn && len(d.jobs) > 0 {
		j := d.jobs[0]
		k := min(writes, len(j.writes)-1)
		for i := 0; i < k; i++ {
			d.apply(j.writes[i], len(j.writes[i].data))
		}
		d.apply(j.writes[k], cut(len(j.writes[k].data)))
	}
	d.jobs = nil
}
