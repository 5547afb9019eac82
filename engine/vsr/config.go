package vsr

import (
	"errors"
	"fmt"
	"math"

	"github.com/ringstream/ringstream/wire"
)

// ErrConfig: a Config breaks one of the rules Validate checks; the error names the field and the rule.
var ErrConfig = errors.New("vsr: invalid configuration")

// MembersMax bounds the member indexes a replica can hold acks for.
const MembersMax = 8

// Config is one replica's setup. Every duration is counted in ticks; the node turns milliseconds into
// ticks once, at load. The commit heartbeat timers are not here: they live in shard/heartbeat and reach
// the replica as OnCommitEntry, OnPrimarySilent and OnQuorumLost.
type Config struct {
	ReplicaCount int   // members of the metadata group: 3 or 5
	Self         uint8 // this replica's member index, 0 to ReplicaCount-1

	PipelineOpsMax int    // ops the primary may hold prepared but not committed
	CheckpointOps  uint64 // committed ops between two checkpoints (snapshots of the state machine)
	ClientsMax     int    // sessions in the client table; the oldest is evicted past it
	RepairOpsMax   int    // prepares one repair answer carries

	PrepareTimeoutTicks    uint64 // primary: resend unacknowledged prepares (and start-views)
	RepairTimeoutTicks     uint64 // backup: re-ask for missing entries, a snapshot or a start-view
	ViewChangeTimeoutTicks uint64 // a view change stalled this long moves on to the next view

	// SnapshotChunkBytes is the most bytes of a checkpoint one state transfer chunk carries (default
	// 256 KiB; from SnapshotChunkBytesMin to the frame's payload limit). The sender's value decides.
	// Its frame must fit in what a link's outbox keeps for frames (engine checks it against the shard
	// config; 256 KiB leaves most of the default's 2.3 MiB to other frames), and a transfer keeps one
	// chunk in flight, so the chunk over the round trip bounds its rate.
	SnapshotChunkBytes int
	// SnapshotBytesMax bounds the checkpoint a replica assembles from a peer's chunks, and so the memory
	// a transfer holds (default 1 GiB, at most 4 GiB - 1, the checkpoint format's limit). A peer's
	// checkpoint announced longer is refused (ErrSnapshotTooLarge, Stats.SnapshotsRefused): this
	// replica cannot catch up from it until the limit is raised or the state is smaller.
	SnapshotBytesMax int
}

// SnapshotChunkBytesMin is the smallest chunk a Config may set: small enough for the simulator to move
// a checkpoint in many chunks, large enough that a chunk outweighs its frame's headers.
const SnapshotChunkBytesMin = 64

// DefaultConfig returns the defaults for a group of replicaCount replicas, self among them. With the
// default tick of 10 ms a stalled view change moves on after 2 s.
func DefaultConfig(replicaCount int, self uint8) Config {
	return Config{
		ReplicaCount:           replicaCount,
		Self:                   self,
		PipelineOpsMax:         32,
		CheckpointOps:          1024,
		ClientsMax:             4096,
		RepairOpsMax:           64,
		PrepareTimeoutTicks:    20,
		RepairTimeoutTicks:     20,
		ViewChangeTimeoutTicks: 200,
		SnapshotChunkBytes:     256 << 10,
		SnapshotBytesMax:       1 << 30,
	}
}

// Validate checks the relations the protocol relies on.
func (c Config) Validate() error {
	switch {
	case c.ReplicaCount != 3 && c.ReplicaCount != 5:
		return fmt.Errorf("%w: replica count %d, want 3 or 5", ErrConfig, c.ReplicaCount)
	case int(c.Self) >= c.ReplicaCount:
		return fmt.Errorf("%w: self %d is not a member index below %d", ErrConfig, c.Self, c.ReplicaCount)
	case c.PipelineOpsMax < 1:
		return fmt.Errorf("%w: pipeline_ops_max must be at least 1", ErrConfig)
	case c.CheckpointOps < uint64(c.PipelineOpsMax):
		return fmt.Errorf("%w: checkpoint_ops (%d) must be at least pipeline_ops_max (%d)", ErrConfig,
			c.CheckpointOps, c.PipelineOpsMax)
	case c.ClientsMax < 1:
		return fmt.Errorf("%w: clients_max must be at least 1", ErrConfig)
	case c.RepairOpsMax < 1:
		return fmt.Errorf("%w: repair_ops_max must be at least 1", ErrConfig)
	case c.PrepareTimeoutTicks == 0 || c.RepairTimeoutTicks == 0:
		return fmt.Errorf("%w: prepare and repair timeouts must be at least one tick", ErrConfig)
	case c.ViewChangeTimeoutTicks < 2*c.RepairTimeoutTicks:
		// A stalled view change must leave room for at least two rounds of re-sent messages.
		return fmt.Errorf("%w: view_change_timeout (%d ticks) must be at least 2 x repair_timeout (%d ticks)",
			ErrConfig, c.ViewChangeTimeoutTicks, c.RepairTimeoutTicks)
	case c.SnapshotChunkBytes < SnapshotChunkBytesMin || c.SnapshotChunkBytes > wire.VSRPayloadMax:
		return fmt.Errorf("%w: snapshot_chunk_bytes (%d) must be from %d to the frame's payload limit %d", ErrConfig,
			c.SnapshotChunkBytes, SnapshotChunkBytesMin, wire.VSRPayloadMax)
	case c.SnapshotBytesMax < 1 || uint64(c.SnapshotBytesMax) > math.MaxUint32:
		return fmt.Errorf("%w: snapshot_bytes_max (%d) must be from 1 to %d (the checkpoint format's limit)",
			ErrConfig, c.SnapshotBytesMax, uint64(math.MaxUint32))
	}
	return nil
}
