package sim

import (
	"math/rand/v2"

	"github.com/ringstream/ringstream/engine/vsr"
	"github.com/ringstream/ringstream/shard/heartbeat"
)

// Machine picks the state machine the replicas run.
type Machine uint8

const (
	// MachineCounter is the simulator's counter machine (double applies show in replies).
	MachineCounter Machine = iota + 1
	// MachineMeta is engine/meta's State under a workload of node and stream ops.
	MachineMeta
)

// Options is one run. Draw gives the usual run for a seed; tests change fields after.
type Options struct {
	Seed     uint64
	Replicas int // 3 or 5
	Machine  Machine
	Clients  int

	FaultTicks    uint64 // ticks with faults on
	CoreTicks     uint64 // bound for a healthy core's progress, the others down or cut off (0: no core phase)
	LivenessTicks uint64 // bound for progress and convergence once every fault is healed

	// Per-tick or per-packet probabilities, in parts per million.
	DropPPM, DuplicatePPM, CorruptPPM uint32
	DelayTicksMax                     uint64
	PartitionPPM                      uint32 // per tick: change the partition
	// LongPartitionPPM, per tick: a partition that holds for LongPartitionTicksMax ticks at most,
	// isolating the primary, a minority or a majority.
	LongPartitionPPM      uint32
	LongPartitionTicksMax uint64
	CrashPPM, RestartPPM  uint32 // per node per tick
	// QuickRestartPPM, per node per tick in the two ticks after a crash: a supervisor restarts the
	// process at once, before the others noticed it was gone.
	QuickRestartPPM uint32
	// CrashInFlightPPM, per node per tick while the node has a persist in flight: crashes that land
	// between a write and its fsync, where a message sent too early shows.
	CrashInFlightPPM uint32
	// CrashAfterViewPPM, per node per tick while a persist is in flight in the first ticks after its
	// view changed (as many as a persist may take): crashes that catch a view change half durable.
	CrashAfterViewPPM uint32
	// PausePPM, per node per tick: the process stops for up to PauseTicksMax ticks (no tick, no
	// packet handled, no completion seen), then resumes where it was, its packets queued.
	PausePPM      uint32
	PauseTicksMax uint64
	// SkewPPM, per node per tick: a fast node ticks twice, a slow node skips the tick (each node's
	// direction drawn at boot).
	SkewPPM      uint32
	ReadErrorPPM uint32 // per restart: the restart fails and is retried later
	TornWritePPM uint32 // per crash with a persist in flight: a prefix reaches disk
	// PersistFailPPM, per persist: it fails with EIO or ENOSPC. An ENOSPC disk stays full for up
	// to FullTicksMax ticks.
	PersistFailPPM      uint32
	FullTicksMax        uint64
	DiskLatencyTicksMax uint64
	// SlowDiskTicksMax: up to this many ticks more per persist (0: none).
	SlowDiskTicksMax uint64
	// MisdirectPPM, per persist: one superblock copy lands over another copy.
	MisdirectPPM uint32
	// CompactPPM, per durable checkpoint: the log is rewritten without the records at or below it.
	CompactPPM uint32
	// LinksUpTick: until this tick nothing passes between replicas, as when a node boots before its
	// peer links connect (the first prepares are lost and nothing may follow them).
	LinksUpTick uint64

	// Faults that lose state a replica acknowledged, when LostState is set (Draw sets it). Each
	// applies to at most f replicas that have not recovered yet (the fault budget): more would lose
	// committed ops whatever the protocol does.
	LostState  bool
	WipePPM    uint32 // per restart: the disk comes back empty (a replaced disk)
	SectorPPM  uint32 // per restart: a synced sector of the superblock, a snapshot or the log reads back corrupt
	OldCopyPPM uint32 // per restart: the disk is an old copy of itself (restored from a backup)
	// MisdirectLogPPM, per log append: the records land over older records instead of at the end.
	MisdirectLogPPM uint32

	// SwarmOff leaves fault classes out of the run: a class whose bit is set is not drawn at all
	// (swarm testing: runs that leave out some faults reach states that the full mix hides). Draw sets
	// each bit with probability 1/2; zero keeps every class.
	SwarmOff Swarm

	// NoDurabilityCheck turns off the check that a message vouching for durable state leaves only once
	// the sender's disk holds it (checker.go), to measure how often the other checks alone catch a
	// message sent too early.
	NoDurabilityCheck bool

	// BrokenStorage, when not zero, makes every disk write its persists in a deliberately wrong
	// layout (the broken-variant tests of the storage layout).
	BrokenStorage BrokenStorage

	VSR       func(n int, self uint8) vsr.Config
	Heartbeat heartbeat.Ticks

	// OnReplica, if set, is called on every replica the simulator creates (the broken-variant test
	// hook uses it).
	OnReplica func(r *vsr.Replica)
	// Trace, if set, receives one line per fault and per role change (for replaying a seed).
	Trace func(line string)
}

// Swarm is a set of fault classes, one bit each.
type Swarm uint32

// The fault classes SwarmOff can leave out.
const (
	SwarmDrop Swarm = 1 << iota
	SwarmDuplicate
	SwarmCorrupt
	SwarmPartition
	SwarmLongPartition
	SwarmCrash
	SwarmCrashInFlight
	SwarmPause
	SwarmSkew
	SwarmReadError
	SwarmTornWrite
	SwarmPersistFail
	SwarmMisdirect
	SwarmCompact
	SwarmLostState
	SwarmSlowDisk
	swarmClasses = iota

	// SwarmAll is every fault class.
	SwarmAll Swarm = 1<<swarmClasses - 1
)

// leaveOut zeroes the rates of the classes in sw.
func (sw Swarm) leaveOut(o *Options) {
	off := func(c Swarm) bool { return sw&c != 0 }
	if off(SwarmDrop) {
		o.DropPPM = 0
	}
	if off(SwarmDuplicate) {
		o.DuplicatePPM = 0
	}
	if off(SwarmCorrupt) {
		o.CorruptPPM = 0
	}
	if off(SwarmPartition) {
		o.PartitionPPM = 0
	}
	if off(SwarmLongPartition) {
		o.LongPartitionPPM = 0
	}
	if off(SwarmCrash) {
		o.CrashPPM = 0
	}
	if off(SwarmCrashInFlight) {
		o.CrashInFlightPPM, o.CrashAfterViewPPM = 0, 0
	}
	if off(SwarmPause) {
		o.PausePPM = 0
	}
	if off(SwarmSkew) {
		o.SkewPPM = 0
	}
	if off(SwarmReadError) {
		o.ReadErrorPPM = 0
	}
	if off(SwarmTornWrite) {
		o.TornWritePPM = 0
	}
	if off(SwarmPersistFail) {
		o.PersistFailPPM = 0
	}
	if off(SwarmMisdirect) {
		o.MisdirectPPM, o.MisdirectLogPPM = 0, 0
	}
	if off(SwarmCompact) {
		o.CompactPPM = 0
	}
	if off(SwarmLostState) {
		o.LostState = false
	}
	if off(SwarmSlowDisk) {
		o.SlowDiskTicksMax = 0
	}
}

// SimVSRConfig is the replica configuration the simulator runs: small checkpoints and timeouts so a
// run of a few thousand ticks sees many of each, and small state transfer chunks (256 bytes), so a
// checkpoint (0.5 to 45 KiB here) moves in many and its sender can take a newer one mid-transfer. At the
// smallest chunk (64 bytes) a 45 KiB checkpoint takes some 700 round trips, past the liveness bounds.
func SimVSRConfig(n int, self uint8) vsr.Config {
	c := vsr.DefaultConfig(n, self)
	c.PipelineOpsMax = 8
	c.CheckpointOps = 24
	c.ClientsMax = 64
	c.RepairOpsMax = 8
	c.PrepareTimeoutTicks = 8
	c.RepairTimeoutTicks = 8
	c.ViewChangeTimeoutTicks = 40
	c.SnapshotChunkBytes = 256
	return c
}

// SimHeartbeatTicks is the heartbeat schedule in the simulator's ticks (it passes Ticks.Validate).
func SimHeartbeatTicks() heartbeat.Ticks {
	return heartbeat.Ticks{BroadcastIntervalTicks: 4, HeartbeatTimeoutTicks: 32, IdleHeartbeatIntervalTicks: 8,
		IdleHeartbeatTimeoutTicks: 48}
}

// Draw returns the run for seed: the cluster shape and fault rates come from the seed too. The
// faults added after the first simulator are drawn after the first ones, so that a seed with them
// turned off (WithoutLaterFaults) draws what it drew before they existed.
func Draw(seed uint64) Options {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	o := Options{
		Seed:                seed,
		Replicas:            3 + 2*rng.IntN(2),
		Machine:             Machine(1 + rng.IntN(2)),
		Clients:             1 + rng.IntN(4),
		FaultTicks:          1500 + uint64(rng.IntN(1500)),
		CoreTicks:           3000,
		LivenessTicks:       4000,
		DropPPM:             uint32(rng.IntN(100_000)),
		DuplicatePPM:        uint32(rng.IntN(30_000)),
		CorruptPPM:          uint32(rng.IntN(5_000)),
		DelayTicksMax:       1 + uint64(rng.IntN(6)),
		PartitionPPM:        uint32(rng.IntN(8_000)),
		CrashPPM:            uint32(rng.IntN(2_000)),
		RestartPPM:          20_000 + uint32(rng.IntN(50_000)),
		ReadErrorPPM:        uint32(rng.IntN(200_000)),
		TornWritePPM:        uint32(rng.IntN(1_000_000)),
		DiskLatencyTicksMax: 1 + uint64(rng.IntN(5)),
		VSR:                 SimVSRConfig,
		Heartbeat:           SimHeartbeatTicks(),
	}
	if rng.IntN(3) == 0 {
		o.LinksUpTick = uint64(rng.IntN(40))
	}
	o.LostState = true
	o.LostState = true // vsr recovers a replica that lost its state (engine/vsr/recovering.go)
	messageFaultsOnly := rng.IntN(4) == 0
	drawLaterFaults(rng, &o)
	o.SwarmOff = Swarm(rng.Uint32()) & SwarmAll
	if messageFaultsOnly {
		// Message faults only: no crash, pause or partition forces a view change that would rescue a
		// replica the protocol itself left stuck.
		o.CrashPPM, o.PartitionPPM, o.LongPartitionPPM, o.CrashInFlightPPM, o.CrashAfterViewPPM = 0, 0, 0, 0, 0
		o.PausePPM, o.PersistFailPPM = 0, 0
	}
	return o
}

// drawLaterFaults draws the rates of the faults added after the first simulator.
func drawLaterFaults(rng *rand.Rand, o *Options) {
	o.LongPartitionPPM = uint32(rng.IntN(1_000))
	o.LongPartitionTicksMax = 200 + uint64(rng.IntN(800))
	o.CrashInFlightPPM = uint32(rng.IntN(20_000))
	o.CrashAfterViewPPM = uint32(rng.IntN(600_000))
	o.QuickRestartPPM = uint32(rng.IntN(700_000))
	o.PausePPM = uint32(rng.IntN(1_000))
	o.PauseTicksMax = 1 + uint64(rng.IntN(100))
	o.SkewPPM = uint32(rng.IntN(100_000))
	o.PersistFailPPM = uint32(rng.IntN(2_000))
	o.FullTicksMax = 1 + uint64(rng.IntN(200))
	o.MisdirectPPM = uint32(rng.IntN(20_000))
	o.CompactPPM = uint32(rng.IntN(1_000_000))
	o.WipePPM = uint32(rng.IntN(300_000))
	o.SectorPPM = uint32(rng.IntN(300_000))
	o.OldCopyPPM = uint32(rng.IntN(200_000))
	o.MisdirectLogPPM = uint32(rng.IntN(5_000))
	if rng.IntN(3) == 0 {
		o.PartitionPPM = 10_000 + uint32(rng.IntN(40_000)) // flapping links: a new partition every 20-100 ticks
	}
	if rng.IntN(4) == 0 {
		o.SlowDiskTicksMax = uint64(rng.IntN(30)) // slow disks: long windows between write and fsync
	}
}

// WithoutLaterFaults turns off the faults drawLaterFaults adds (and the core liveness phase), for the
// regression seeds found before they existed.
func WithoutLaterFaults(o Options) Options {
	o.LongPartitionPPM, o.CrashInFlightPPM, o.PausePPM, o.SkewPPM, o.PersistFailPPM = 0, 0, 0, 0, 0
	o.CrashAfterViewPPM, o.QuickRestartPPM = 0, 0
	o.MisdirectPPM, o.CompactPPM, o.MisdirectLogPPM, o.SlowDiskTicksMax = 0, 0, 0, 0
	o.LostState = false
	o.CoreTicks = 0
	o.SwarmOff = 0
	return o
}

// BrokenStorage is a deliberately wrong storage layout, to prove the simulator catches it.
type BrokenStorage uint8

const (
	// StorageOK is the layout engine writes (vsr's storage notes).
	StorageOK BrokenStorage = iota
	// StorageNoInline: the copies do not carry the persist's records, yet share its one fsync with the
	// log append: a power loss may keep a copy and lose the records it names.
	StorageNoInline
	// StorageOneArea: every persist writes its copies over the previous superblock's, in one area.
	StorageOneArea
	// StorageNoLogRepair: the open does not append the records only the copy in force carries.
	StorageNoLogRepair
)
