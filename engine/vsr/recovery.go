package vsr

import (
	"github.com/cespare/xxhash/v2"
	"github.com/ringstream/ringstream/internal/assert"
	"github.com/ringstream/ringstream/wire"
)

// Checkpoints and state transfer. Every CheckpointOps committed ops the replica snapshots its state
// (client table and state machine) at commit; the log keeps the entries since the checkpoint before
// it, so a replica a little behind repairs from prepares and one further behind gets the checkpoint.

// takeCheckpoint snapshots the state at commit and trims the log below the previous checkpoint.
func (r *Replica) takeCheckpoint() {
	prev := r.snapOp
	r.retireCheckpoint()
	r.snapPayload = appendCheckpoint(nil, r.commit, r.headAt(r.commit), &r.clients, r.sm)
	r.snapOp = r.commit
	r.snapChecksum = xxhash.Sum64(r.snapPayload)
	r.pendingSnapshot = r.snapPayload
	r.dirty = true
	r.stats.Checkpoints++
	if prev > r.logBase {
		r.trimLog(prev)
	}
}

// trimLog drops entries up to and including op from memory.
func (r *Replica) trimLog(op uint64) {
	assert.True(op <= r.commit, "vsr: trimming uncommitted entries")
	head := r.headAt(op)
	r.log = r.log[:copy(r.log, r.log[op-r.logBase:])]
	r.logBase, r.logBaseHead = op, head
}

// awaitSnapshot asks member from for its checkpoint, which this replica needs before it can use a log
// that starts above its commit.
func (r *Replica) awaitSnapshot(from uint8) {
	r.awaitingSnapshot, r.snapshotFrom = true, from
	r.send(from, wire.VSRMessage{Command: wire.CommandVSRRequestPrepare, View: r.view, Op: r.commit + 1}, false)
}

// snapshotCommitJustified is how far installing m lets this replica's commit point go. The checkpoint
// itself is committed, so always up to m.Op. The sender's commit point counts too only when it is the
// commit of the log this replica holds: both in the same view, and this replica normal in it (its log is
// then a prefix of that view's log). A backup still normal in an older view keeps entries past the
// checkpoint that the sender's view may have replaced: the sender's commit says nothing about them.
func (r *Replica) snapshotCommitJustified(m *wire.VSRMessage) uint64 {
	if r.status == statusNormal && r.logView == r.view && m.View == r.view {
		return max(m.Op, m.Commit)
	}
	return m.Op
}

// afterSnapshot resumes what waited for the checkpoint.
func (r *Replica) afterSnapshot() {
	if !r.awaitingSnapshot {
		return
	}
	r.awaitingSnapshot = false
	if r.status == statusRecovering {
		r.tryCompleteRecovery()
		return
	}
	if r.isPrimaryOf(r.view) {
		r.tryCompleteViewChange()
		return
	}
	r.send(r.PrimaryIndex(), wire.VSRMessage{Command: wire.CommandVSRRequestStartView, View: r.view}, false)
}
