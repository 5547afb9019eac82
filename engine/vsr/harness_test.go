package vsr

import (
	"encoding/binary"
	"errors"
	"slices"
	"testing"

	"github.com/cespare/xxhash/v2"
	"github.com/ringstream/ringstream/wire"
)

// counterMachine is a small deterministic state machine: an op "client c adds d" adds d to the
// counter of c and returns the new value. Applying a request twice shows as a skipped value.
type counterMachine struct {
	counters map[uint64]uint64
}

func newCounterMachine() *counterMachine { return &counterMachine{counters: make(map[uint64]uint64)} }

func counterOp(key, delta uint64) []byte {
	return binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(nil, key), delta)
}

func (m *counterMachine) Apply(op []byte, _ uint64, result []byte) []byte {
	if len(op) != 16 {
		return append(result, "bad op"...)
	}
	key := binary.LittleEndian.Uint64(op)
	m.counters[key] += binary.LittleEndian.Uint64(op[8:])
	return binary.LittleEndian.AppendUint64(result, m.counters[key])
}

func (m *counterMachine) AppendSnapshot(dst []byte) []byte {
	keys := make([]uint64, 0, len(m.counters))
	for k := range m.counters {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		dst = binary.LittleEndian.AppendUint64(dst, k)
		dst = binary.LittleEndian.AppendUint64(dst, m.counters[k])
	}
	return dst
}

func (m *counterMachine) Restore(b []byte) error {
	if len(b)%16 != 0 {
		return errors.New("counter: bad snapshot")
	}
	c := make(map[uint64]uint64)
	for ; len(b) > 0; b = b[16:] {
		c[binary.LittleEndian.Uint64(b)] = binary.LittleEndian.Uint64(b[8:])
	}
	m.counters = c
	return nil
}

func (m *counterMachine) Digest() uint64 { return xxhash.Sum64(m.AppendSnapshot(nil)) }

// memDisk is a replica's storage as bytes, written synchronously (the unit tests' disk; engine/sim has
// the faulty one).
type memDisk struct {
	superblocks [SuperblockSlots][]byte
	snapshots   [2][]byte
	log         []byte
}

func (d *memDisk) persist(fx *Effects) {
	if fx.PersistID == 0 {
		return
	}
	if fx.Snapshot != nil {
		d.snapshots[fx.SnapshotSlot] = AppendSnapshotRecord(nil, fx.Snapshot)
	}
	var records []byte
	for i := range fx.Entries {
		records = AppendLogRecord(records, &fx.Entries[i])
	}
	d.log = append(d.log, records...)
	area := AreaOf(fx.Superblock.Sequence)
	for c := 0; c < SuperblockCopies; c++ {
		d.superblocks[area*SuperblockCopies+c] = AppendSuperblockCopy(nil, fx.Superblock, records)
	}
}

// cluster is three or five replicas wired by a message queue the test controls.
type cluster struct {
	t        *testing.T
	replicas []*Replica
	machines []*counterMachine
	disks    []*memDisk
	down     []bool
	queue    []Envelope // in flight, with From in Msg.Replica
	replies  []Reply
	// autoPersist makes every Ready's persist durable at once.
	autoPersist bool
	cut         func(from, to uint8) bool
	nonce       uint64 // the last recovery nonce handed out
}

func testConfig(n int, self uint8) Config {
	c := DefaultConfig(n, self)
	c.CheckpointOps = 8
	c.PipelineOpsMax = 4
	c.RepairOpsMax = 4
	c.PrepareTimeoutTicks, c.RepairTimeoutTicks, c.ViewChangeTimeoutTicks = 3, 3, 10
	c.SnapshotChunkBytes = SnapshotChunkBytesMin // checkpoints travel in several chunks
	return c
}

func newCluster(t *testing.T, n int) *cluster {
	c := &cluster{t: t, autoPersist: true}
	for i := 0; i < n; i++ {
		m := newCounterMachine()
		disk := formatted(i, false)
		d, _, err := Recover(disk.superblocks, disk.snapshots, disk.log)
		if err != nil || !d.Fresh {
			t.Fatalf("formatted storage: %+v %v", d, err)
		}
		r, err := New(testConfig(n, uint8(i)), m, d)
		if err != nil {
			t.Fatal(err)
		}
		c.replicas = append(c.replicas, r)
		c.machines = append(c.machines, m)
		c.disks = append(c.disks, disk)
		c.down = append(c.down, false)
		c.drain(i) // the first superblock
	}
	return c
}

// drain collects every replica's effects (persisting them) until nothing is left to do.
func (c *cluster) drain(i int) {
	r := c.replicas[i]
	for {
		fx := r.Ready()
		if fx.PersistID == 0 && len(fx.Messages) == 0 && len(fx.Replies) == 0 {
			return
		}
		for _, env := range fx.Messages {
			env.Msg = cloneMessage(&env.Msg)
			c.queue = append(c.queue, env)
		}
		for _, rep := range fx.Replies {
			rep.Result = slices.Clone(rep.Result)
			c.replies = append(c.replies, rep)
		}
		if fx.PersistID != 0 {
			c.disks[i].persist(fx)
			if c.autoPersist {
				r.Advance(fx.PersistID)
			}
		}
	}
}

func cloneMessage(m *wire.VSRMessage) wire.VSRMessage {
	c := *m
	c.Payload = slices.Clone(m.Payload)
	c.Entries = nil
	for i := range m.Entries {
		c.Entries = append(c.Entries, copyEntry(&m.Entries[i]))
	}
	return c
}

// deliverAll delivers messages until the network is quiet.
func (c *cluster) deliverAll() {
	for round := 0; round < 1000; round++ {
		for i := range c.replicas {
			if !c.down[i] {
				c.drain(i)
			}
		}
		if len(c.queue) == 0 {
			return
		}
		q := c.queue
		c.queue = nil
		for _, env := range q {
			from := env.Msg.Replica
			if c.down[env.To] || c.down[from] || (c.cut != nil && c.cut(from, env.To)) {
				continue
			}
			c.replicas[env.To].Step(&env.Msg)
			c.replicas[env.To].CheckInvariants()
		}
	}
	c.t.Fatal("network never went quiet")
}

func (c *cluster) tick(n int) {
	for ; n > 0; n-- {
		for i, r := range c.replicas {
			if !c.down[i] {
				r.Tick()
				r.CheckInvariants()
			}
		}
		c.deliverAll()
	}
}

// heartbeat plays the primary's Commit entry to every backup, as shard/heartbeat would.
func (c *cluster) heartbeat() {
	for i, p := range c.replicas {
		if c.down[i] || !p.IsPrimary() {
			continue
		}
		for j, b := range c.replicas {
			if j != i && !c.down[j] && (c.cut == nil || !c.cut(uint8(i), uint8(j))) {
				b.OnCommitEntry(p.View(), p.Commit())
			}
		}
	}
	c.deliverAll()
}

func (c *cluster) primary() int {
	for i, r := range c.replicas {
		if !c.down[i] && r.IsPrimary() {
			return i
		}
	}
	return -1
}

func (c *cluster) propose(client, request, key, delta uint64) error {
	p := c.primary()
	if p < 0 {
		return ErrNotPrimary
	}
	err := c.replicas[p].Propose(client, request, counterOp(key, delta))
	c.deliverAll()
	return err
}

// restart rebuilds replica i from its disk.
func (c *cluster) restart(i int) {
	d := c.disks[i]
	dur, _, err := Recover(d.superblocks, d.snapshots, d.log)
	if err != nil {
		c.t.Fatalf("recover replica %d: %v", i, err)
	}
	if dur.Recovering {
		c.nonce++
		dur.RecoveryNonce = c.nonce<<8 | uint64(i)
	}
	m := newCounterMachine()
	r, err := New(testConfig(len(c.replicas), uint8(i)), m, dur)
	if err != nil {
		c.t.Fatalf("restart replica %d: %v", i, err)
	}
	c.replicas[i], c.machines[i], c.down[i] = r, m, false
}

// formatted is storage as the format step leaves it for replica i.
func formatted(i int, recovering bool) *memDisk {
	d := &memDisk{}
	sb := AppendSuperblock(nil, FormatSuperblock(Identity{Cluster: 1, Node: uint16(i + 1), Replica: uint8(i)}, recovering))
	for j := range d.superblocks {
		d.superblocks[j] = sb
	}
	return d
}

// wipe takes replica i down, loses its whole disk, formats a new one to replace it (in recovery) and
// brings the replica back from it.
func (c *cluster) wipe(i int) {
	c.down[i] = true
	c.disks[i] = formatted(i, true)
	c.restart(i)
}

// corruptNewestSuperblock flips one byte in all copies but one of replica i's newest superblock.
func (c *cluster) corruptNewestSuperblock(i int) {
	d := c.disks[i]
	sb, err := DecodeSuperblock(d.newest())
	if err != nil {
		c.t.Fatal(err)
	}
	area := AreaOf(sb.Sequence)
	for j := 1; j < SuperblockCopies; j++ {
		d.superblocks[area*SuperblockCopies+j] = append([]byte(nil), d.superblocks[area*SuperblockCopies+j]...)
		d.superblocks[area*SuperblockCopies+j][20] ^= 0x40
	}
}

// newest returns the first copy of the newest superblock's area.
func (d *memDisk) newest() []byte {
	best := 0
	for j, b := range d.superblocks {
		sb, err := DecodeSuperblock(b)
		if err == nil && sb.Sequence > 0 {
			if cur, err := DecodeSuperblock(d.superblocks[best]); err != nil || sb.Sequence > cur.Sequence {
				best = j
			}
		}
	}
	return d.superblocks[best]
}
