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
	LivenessTicks uint64 // bound for progress and convergence once faults stop

	// Per-tick or per-packet probabilities, in parts per million.
	DropPPM, DuplicatePPM, CorruptPPM uint32
	DelayTicksMax                     uint64
	PartitionPPM                      uint32 // per tick: change the partition
	CrashPPM, RestartPPM              uint32 // per node per tick
	ReadErrorPPM                      uint32 // per restart
	TornWritePPM                      uint32 // per crash with a persist in flight: a prefix reaches disk
	DiskLatencyTicksMax               uint64
	// LinksUpTick: until this tick nothing passes between replicas, as when a node boots before its
	// peer links connect (the first prepares are lost and nothing may follow them).
	LinksUpTick uint64

	VSR       func(n int, self uint8) vsr.Config
	Heartbeat heartbeat.Ticks

	// OnReplica, if set, is called on every replica the simulator creates (the broken-variant test
	// hook uses it).
	OnReplica func(r *vsr.Replica)
	// Trace, if set, receives one line per fault and per role change (for replaying a seed).
	Trace func(line string)
}

// SimVSRConfig is the replica configuration the simulator runs: small checkpoints and timeouts so a
// run of a few thousand ticks sees many of each.
func SimVSRConfig(n int, self uint8) vsr.Config {
	c := vsr.DefaultConfig(n, self)
	c.PipelineOpsMax = 8
	c.CheckpointOps = 24
	c.ClientsMax = 64
	c.RepairOpsMax = 8
	c.PrepareTimeoutTicks = 8
	c.RepairTimeoutTicks = 8
	c.ViewChangeTimeoutTicks = 40
	return c
}

// SimHeartbeatTicks is the heartbeat schedule in the simulator's ticks (it passes Ticks.Validate).
func SimHeartbeatTicks() heartbeat.Ticks {
	return heartbeat.Ticks{BroadcastIntervalTicks: 4, HeartbeatTimeoutTicks: 32, IdleHeartbeatIntervalTicks: 8,
		IdleHeartbeatTimeoutTicks: 48}
}

// Draw returns the run for seed: the cluster shape and fault rates come from the seed too.
func Draw(seed uint64) Options {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	o := Options{
		Seed:                seed,
		Replicas:            3 + 2*rng.IntN(2),
		Machine:             Machine(1 + rng.IntN(2)),
		Clients:             1 + rng.IntN(4),
		FaultTicks:          1500 + uint64(rng.IntN(1500)),
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
	if rng.IntN(4) == 0 {
		// Message faults only: no crash or partition forces a view change that would rescue a replica
		// the protocol itself left stuck.
		o.CrashPPM, o.PartitionPPM = 0, 0
	}
	return o
}
