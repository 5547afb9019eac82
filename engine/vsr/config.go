package vsr

import (
	"errors"
	"fmt"

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

	// SnapshotBytesMax bounds the checkpoint a replica sends in one snapshot frame (default
	// wire.VSRPayloadMax). A larger one is not sent (Stats.SnapshotsTooLarge): a replica behind the
	// log's checkpoint cannot catch up until the state is smaller again.
	SnapshotBytesMax int
}

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
		SnapshotBytesMax:       wire.VSRPayloadMax,
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
	case c.SnapshotBytesMax < 1 || c.SnapshotBytesMax > wire.VSRPayloadMax:
		return fmt.Errorf("%w: snapshot_bytes_max (%d) must be from 1 to the frame's payload limit %d", ErrConfig,
			c.SnapshotBytesMax, wire.VSRPayloadMax)
	}
	return nil
}
