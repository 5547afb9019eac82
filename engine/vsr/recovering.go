package vsr

import (
	"github.com/ringstream/ringstream/internal/assert"
	"github.com/ringstream/ringstream/wire"
)

// Recovery after lost state, as in VR Revisited (Liskov and Cowling 2012, section 4.3). A replica whose
// storage was formatted to replace a lost one, or that cannot prove it holds its latest superblock,
// starts in recovering status. It sends a recovery message with a nonce to every other member; a
// replica in normal status answers with its view and the nonce, and the primary of that view adds its
// log. Once answers from a quorum of other members are in, among them the primary of the highest view
// they name, the replica takes that primary's log (after its checkpoint, when the log starts above
// what the replica holds) and becomes a backup of that view in normal status. Until then it votes in no
// view change, acknowledges no prepare, answers no recovery and applies nothing.
//
// Why a quorum of others and the latest primary: every view that ever started had a quorum in it, so
// the quorum that answers holds a member of the latest view, whose primary's log holds every committed
// op, including those this replica acknowledged before it lost them. The nonce ties the answers to this
// recovery: an answer to an earlier one (before a crash in the middle of it) may be older than the
// ops this replica acknowledged since.

// recoveryResponse is the latest answer a member gave to this replica's recovery.
type recoveryResponse struct {
	received bool
	view     uint32
	log      dvcRecord // the primary's log; received only on the primary's answer
}

// startRecovery puts a new replica in recovering status. view is the highest view its storage knows
// (0 when none): only a lower bound, the group's answers say where the group is.
func (r *Replica) startRecovery(view uint32, nonce uint64) {
	assert.True(nonce != 0, "vsr: recovery with a zero nonce")
	r.status, r.view, r.logView, r.nonce = statusRecovering, view, 0, nonce
	r.dirty = true // the superblock says recovering until the recovery is durable
	r.broadcastRecovery()
}

// broadcastRecovery asks every other member for the group's state (again on each repair timeout).
func (r *Replica) broadcastRecovery() {
	r.broadcast(wire.VSRMessage{Command: wire.CommandVSRRecovery, View: r.view, Request: r.nonce}, false)
}

// stepRecovering is Step in recovering status: only answers to this recovery, and the checkpoint it
// asked for, are taken.
func (r *Replica) stepRecovering(m *wire.VSRMessage) {
	switch m.Command {
	case wire.CommandVSRRecoveryResponse:
		r.onRecoveryResponse(m)
	case wire.CommandVSRSnapshot:
		if !r.awaitingSnapshot || m.Replica != r.snapshotFrom {
			r.drop("recovering: snapshot not asked for")
			return
		}
		r.onSnapshot(m)
	default:
		r.drop("recovering: " + m.Command.String())
	}
}

// onRecovery answers another member's recovery: only in normal status; the primary adds its log, which
// leaves once it is durable (as a start-view does).
func (r *Replica) onRecovery(m *wire.VSRMessage) {
	if r.status != statusNormal {
		r.drop("recovery: not in normal status")
		return
	}
	if m.Request == 0 {
		r.drop("recovery: zero nonce")
		return
	}
	if !r.isPrimary() {
		r.send(m.Replica, wire.VSRMessage{Command: wire.CommandVSRRecoveryResponse, View: r.view,
			Request: m.Request}, true)
		return
	}
	resp := r.startViewMessage()
	resp.Command, resp.Request = wire.CommandVSRRecoveryResponse, m.Request
	r.send(m.Replica, resp, true)
}

// onRecoveryResponse records an answer to this recovery and completes it once it can.
func (r *Replica) onRecoveryResponse(m *wire.VSRMessage) {
	switch {
	case m.Request != r.nonce:
		r.drop("recovery_response: other nonce")
		return
	case r.responses[m.Replica].received && m.View < r.responses[m.Replica].view:
		r.drop("recovery_response: older than the sender's last")
		return
	}
	fromPrimary := primaryIndex(m.View, r.cfg.ReplicaCount) == m.Replica
	if fromPrimary {
		if reason, ignore := ignoreLog(m); ignore {
			r.drop("recovery_response: " + reason)
			return
		}
		if m.LogView != m.View {
			r.drop("recovery_response: primary's log of another view")
			return
		}
	}
	resp := &r.responses[m.Replica]
	resp.received, resp.view = true, m.View
	resp.log.received = fromPrimary
	if fromPrimary {
		resp.log.logView, resp.log.op, resp.log.commit, resp.log.logBase = m.LogView, m.Op, m.Commit, m.LogBase
		resp.log.entries = resp.log.entries[:0]
		for i := range m.Entries {
			resp.log.entries = append(resp.log.entries, copyEntry(&m.Entries[i]))
		}
	}
	if !r.awaitingSnapshot {
		r.tryCompleteRecovery()
	}
}

// tryCompleteRecovery becomes a backup of the latest view once a quorum of other members answered,
// the primary of the latest view they name among them; it first asks that primary for its checkpoint
// when the primary's log starts above what this replica holds.
func (r *Replica) tryCompleteRecovery() {
	assert.True(r.status == statusRecovering, "vsr: completing a recovery in another status")
	count, latest := 0, uint32(0)
	for i := range r.responses[:r.cfg.ReplicaCount] {
		if r.responses[i].received {
			count++
			latest = max(latest, r.responses[i].view)
		}
	}
	if count < r.quorum {
		return
	}
	p := primaryIndex(latest, r.cfg.ReplicaCount)
	resp := &r.responses[p]
	if p == r.cfg.Self || !resp.received || resp.view != latest || !resp.log.received {
		return // the latest view's primary has not answered (or is this replica): wait for more
	}
	d := &resp.log
	if r.commit < d.logBase {
		r.view = latest
		r.awaitSnapshot(p)
		return
	}
	if !r.adoptLog(d.logBase, d.op, d.entries) {
		// The primary's log moved past what was recorded (a newer checkpoint came in between): ask again.
		r.drop("recovery_response: log does not extend the checkpoint")
		r.responses = [MembersMax]recoveryResponse{}
		r.broadcastRecovery()
		return
	}
	r.completeRecovery(latest, d.commit)
}

// completeRecovery makes this replica a backup in normal status of view with the log it adopted.
func (r *Replica) completeRecovery(view uint32, commit uint64) {
	r.status, r.view, r.logView = statusNormal, view, view
	r.awaitingSnapshot = false
	r.responses = [MembersMax]recoveryResponse{}
	r.dirty = true
	r.stats.Recoveries++
	r.commitMax = max(r.commitMax, commit)
	r.applyCommitted(min(r.commitMax, r.op))
	r.sendPrepareOK(r.op)
}
