package vsr

import (
	"github.com/ringstream/ringstream/internal/assert"
	"github.com/ringstream/ringstream/wire"
)

// Normal operation: the primary orders requests and replicates prepares; backups append them in order
// and acknowledge once durable; the primary commits what a quorum holds; every replica applies
// committed ops in order. Repair: a backup missing ops asks the primary (request-prepare).

// propose is the primary's side of a request: guards, then append and replicate.
func (r *Replica) propose(client, request uint64, body []byte) error {
	if !r.isPrimary() {
		r.drop("request: not the primary")
		return ErrNotPrimary
	}
	if client != 0 {
		if s, ok := r.clients.lookup(client); ok && request <= s.request {
			if request == s.request {
				r.reply(client, request, s.op, s.result)
				return nil
			}
			r.drop("request: older than the client's last")
			return ErrStaleRequest
		}
		for op := r.commit + 1; op <= r.op; op++ {
			e := &r.log[op-r.logBase-1]
			if e.Client == client && e.Request >= request {
				r.drop("request: already in the pipeline")
				return ErrStaleRequest
			}
		}
	}
	if r.op-r.commit >= uint64(r.cfg.PipelineOpsMax) {
		r.drop("request: pipeline full")
		return ErrPipelineFull
	}
	e := wire.VSREntry{Op: r.op + 1, View: r.view, Client: client, Request: request, Parent: r.headAt(r.op),
		Body: r.bodies.copy(body)}
	e.Checksum = entryChecksum(&e)
	r.appendEntry(e)
	r.broadcast(wire.VSRMessage{Command: wire.CommandVSRPrepare, View: r.view, Op: e.Op, Commit: r.commit,
		Entries: r.fx.oneEntry(e)}, false)
	return nil
}

// appendEntry appends e at op+1 and queues it for the disk.
func (r *Replica) appendEntry(e wire.VSREntry) {
	assert.True(e.Op == r.op+1, "vsr: append out of order")
	assert.True(e.Parent == r.headAt(r.op), "vsr: append breaks the chain")
	r.log = append(r.log, e)
	r.op = e.Op
	r.pendingEntries = append(r.pendingEntries, e)
	r.dirty = true
}

// ignorePrepare says why a backup declines m, if it does.
func (r *Replica) ignorePrepare(m *wire.VSRMessage) (string, bool) {
	switch {
	case m.View < r.view:
		return "prepare: older view", true
	case m.View > r.view:
		r.askStartView(m.View)
		return "prepare: newer view", true
	case r.status != statusNormal:
		return "prepare: view change in progress", true
	case r.isPrimaryOf(r.view):
		return "prepare: to the primary", true
	case len(m.Entries) != 1 || m.Entries[0].Op != m.Op || m.Entries[0].View > m.View:
		return "prepare: malformed", true
	case entryChecksum(&m.Entries[0]) != m.Entries[0].Checksum:
		return "prepare: entry checksum", true
	}
	return "", false
}

// onPrepare is a backup appending the primary's next op.
func (r *Replica) onPrepare(m *wire.VSRMessage) {
	if reason, ignore := r.ignorePrepare(m); ignore {
		r.drop(reason)
		return
	}
	assert.True(r.status == statusNormal, "vsr: prepare outside normal status")
	e := &m.Entries[0]
	switch {
	case m.Op <= r.logBase:
		// A checkpoint installed since this backup's last acknowledgement covers the op. The primary
		// re-sends from that acknowledgement on, so without an answer it would re-send the same ops
		// forever and never learn this backup can take the ones after its checkpoint.
		r.drop("prepare: below the log")
		r.sendPrepareOK(r.logBase)
	case m.Op <= r.op:
		if r.log[m.Op-r.logBase-1].Checksum != e.Checksum {
			r.drop("prepare: differs from the log")
			break
		}
		r.sendPrepareOK(m.Op)
	case m.Op > r.op+1:
		r.drop("prepare: gap")
		r.askRepair()
	case e.Parent != r.headAt(r.op):
		r.drop("prepare: parent differs")
	default:
		r.appendEntry(r.ownEntry(e))
		r.sendPrepareOK(m.Op)
	}
	r.commitMax = max(r.commitMax, m.Commit)
	r.applyCommitted(min(r.commitMax, r.op))
}

// sendPrepareOK tells the primary this backup holds its log up to op; it leaves once durable.
func (r *Replica) sendPrepareOK(op uint64) {
	r.send(r.PrimaryIndex(), wire.VSRMessage{Command: wire.CommandVSRPrepareOK, View: r.view, Op: op,
		Checksum: r.headAt(op)}, true)
}

// onPrepareOK is the primary counting an acknowledgement.
func (r *Replica) onPrepareOK(m *wire.VSRMessage) {
	switch {
	case m.View != r.view:
		r.drop("prepare_ok: other view")
		return
	case !r.isPrimary():
		r.drop("prepare_ok: not the primary")
		return
	case m.Op > r.op || m.Op < r.logBase || m.Op <= r.acked[m.Replica]:
		r.drop("prepare_ok: op outside the window")
		return
	case r.headAt(m.Op) != m.Checksum:
		r.drop("prepare_ok: checksum differs")
		return
	}
	r.acked[m.Replica] = m.Op
	r.primaryCommit()
}

// primaryCommit moves the commit point to the highest op a quorum holds durably in this view,
// the primary itself among them.
func (r *Replica) primaryCommit() {
	assert.True(r.isPrimary(), "vsr: primary commit on a backup")
	var acked [MembersMax]uint64
	n := r.cfg.ReplicaCount
	copy(acked[:n], r.acked[:n])
	acked[r.cfg.Self] = r.durableOp
	target := min(quorumOp(acked[:n], r.quorum), r.durableOp)
	if target > r.commit {
		r.commitMax = max(r.commitMax, target)
		r.applyCommitted(target)
	}
}

// applyCommitted applies ops up to target (which the log must hold) in order.
func (r *Replica) applyCommitted(target uint64) {
	assert.True(target <= r.op, "vsr: commit past the log")
	for r.commit < target {
		op := r.commit + 1
		e := &r.log[op-r.logBase-1]
		r.applyEntry(e)
		r.commit = op
		r.stats.Applied++
	}
	if r.commit-r.snapOp >= r.cfg.CheckpointOps {
		r.takeCheckpoint()
	}
}

// applyEntry runs one committed entry through the client table and the state machine. A request the
// table already holds is not applied again.
func (r *Replica) applyEntry(e *wire.VSREntry) {
	if e.Client != 0 {
		if s, ok := r.clients.lookup(e.Client); ok && e.Request <= s.request {
			r.drop("apply: request already applied")
			return
		}
	}
	r.result = r.sm.Apply(e.Body, e.Op, r.result[:0])
	if e.Client == 0 {
		return
	}
	r.clients.commit(e.Client, e.Request, e.Op, r.result)
	if r.isPrimary() {
		r.reply(e.Client, e.Request, e.Op, r.result)
	}
}

// onPrepareTimeout is the primary re-sending what backups have not acknowledged: prepares past a
// backup's last acknowledgement; to a backup with none in this view, the start-view once, then only the
// newest prepare (a gap makes the backup ask for the rest, and a dead backup costs one small message).
func (r *Replica) onPrepareTimeout() {
	r.prepareTimeout.Reset()
	assert.True(r.isPrimary(), "vsr: prepare timeout on a backup")
	for i := 0; i < r.cfg.ReplicaCount; i++ {
		to := uint8(i)
		if to == r.cfg.Self || r.acked[i] >= r.op {
			continue
		}
		switch {
		case r.acked[i] > 0:
			r.sendPrepares(to, max(r.acked[i]+1, r.logBase+1))
		case !r.startViewSent.has(to):
			// No acknowledgement in this view yet: the backup may have missed the start-view.
			r.startViewSent.add(to)
			r.send(to, r.startViewMessage(), true)
		case r.op > r.logBase:
			// Only the newest prepare: a backup that lacks the ops before it asks for them.
			r.sendPrepares(to, r.op)
		}
	}
}

// sendPrepares sends prepares from op on, at most RepairOpsMax of them, to member to.
func (r *Replica) sendPrepares(to uint8, from uint64) {
	for op := from; op <= r.op && op < from+uint64(r.cfg.RepairOpsMax); op++ {
		e := r.log[op-r.logBase-1]
		r.send(to, wire.VSRMessage{Command: wire.CommandVSRPrepare, View: r.view, Op: op, Commit: r.commit,
			Entries: r.fx.oneEntry(e)}, false)
	}
}

// onRequestPrepare answers repair: prepares from the asked op when this replica is normal in the
// asker's view and holds them, the checkpoint when the asked op is at or below it.
func (r *Replica) onRequestPrepare(m *wire.VSRMessage) {
	switch {
	case r.status == statusNormal && m.View == r.view && m.Op > r.logBase && m.Op <= r.op:
		r.sendPrepares(m.Replica, m.Op)
	case r.snapOp > 0 && m.Op <= r.snapOp:
		r.sendChunk(m.Replica, 0) // the first chunk of a state transfer (transfer.go)
	default:
		r.drop("request_prepare: nothing to send")
	}
}

// askRepair asks the primary for the ops after op, once until the next repair timeout. A state
// transfer in progress asks on its own (transfer.go): the ops it would ask for are at or below the
// checkpoint it is assembling.
func (r *Replica) askRepair() {
	if r.repairAsked == r.op+1 || (r.xfer.active && r.xfer.op > r.commit) {
		return
	}
	r.repairAsked = r.op + 1
	r.send(r.PrimaryIndex(), wire.VSRMessage{Command: wire.CommandVSRRequestPrepare, View: r.view, Op: r.op + 1},
		false)
}

// askStartView asks the primary of view for its start-view, once until the next repair timeout.
func (r *Replica) askStartView(view uint32) {
	if r.startViewAsked == view || r.isPrimaryOf(view) {
		return
	}
	r.startViewAsked = view
	r.send(primaryIndex(view, r.cfg.ReplicaCount), wire.VSRMessage{Command: wire.CommandVSRRequestStartView,
		View: view}, false)
}

// onRepairTimeout re-sends whatever this replica is waiting for.
func (r *Replica) onRepairTimeout() {
	r.repairTimeout.Reset()
	r.repairAsked, r.startViewAsked = 0, 0
	transferring := r.repairTransfer()
	switch {
	case r.awaitingSnapshot:
		if !transferring {
			r.send(r.snapshotFrom, wire.VSRMessage{Command: wire.CommandVSRRequestPrepare, View: r.view,
				Op: r.commit + 1}, false)
		}
	case r.status == statusRecovering:
		r.broadcastRecovery()
	case r.status == statusViewChange:
		r.resendViewChange()
	case !r.isPrimary() && r.commitMax > r.op:
		r.askRepair()
	}
}

// reply queues a client reply; its result is copied into the effects' own buffer.
func (r *Replica) reply(client, request, op uint64, result []byte) {
	start := len(r.fx.replyBytes)
	r.fx.replyBytes = append(r.fx.replyBytes, result...)
	r.fx.Replies = append(r.fx.Replies, Reply{Client: client, Request: request, Op: op,
		Result: r.fx.replyBytes[start:len(r.fx.replyBytes):len(r.fx.replyBytes)]})
}
