package vsr

import (
	"github.com/ringstream/ringstream/internal/assert"
	"github.com/ringstream/ringstream/wire"
)

// View change: a replica that suspects the primary moves to the next view and says so
// (start-view-change); once a quorum has, each sends its log to the new view's primary
// (do-view-change); the primary takes the log with the highest (log view, op), which holds every
// committed op, and installs it on the backups (start-view). A stalled view change moves on to the
// next view.

// startViewChange moves this replica to view in view-change status.
func (r *Replica) startViewChange(view uint32) {
	assert.True(view > r.view, "vsr: view change to an older view")
	r.view = view
	r.status = statusViewChange
	r.svcFrom, r.dvcSent, r.awaitingSnapshot = 0, false, false
	for i := range r.dvcs {
		r.dvcs[i] = dvcRecord{}
	}
	r.acked = [MembersMax]uint64{}
	r.durableOp = 0
	r.dirty = true
	r.stats.ViewChanges++
	r.prepareTimeout.Stop()
	if r.viewChangeTimeout.running {
		r.viewChangeTimeout.Backoff()
	} else {
		r.viewChangeTimeout.Start()
	}
	r.broadcast(wire.VSRMessage{Command: wire.CommandVSRStartViewChange, View: r.view}, true)
}

// onViewChangeTimeout: the view change did not finish in time; try the next view.
func (r *Replica) onViewChangeTimeout() {
	assert.True(r.status == statusViewChange, "vsr: view change timeout in normal status")
	r.startViewChange(r.view + 1)
}

// onStartViewChange counts a peer's move to m.View.
func (r *Replica) onStartViewChange(m *wire.VSRMessage) {
	switch {
	case m.View < r.view:
		r.drop("start_view_change: older view")
		return
	case m.View == r.view && r.status == statusNormal:
		if r.isPrimary() {
			r.send(m.Replica, r.startViewMessage(), true)
		}
		r.drop("start_view_change: view already started")
		return
	case m.View > r.view && r.status == statusNormal && !r.isPrimaryOf(r.view):
		// A normal backup trusts its own heartbeat timeout: a replica that cannot hear the primary
		// does not depose it through the backups.
		r.drop("start_view_change: normal backup, primary not suspected")
		return
	case m.View > r.view:
		r.startViewChange(m.View) // broadcasts this replica's own start-view-change
	case !r.svcFrom.has(m.Replica):
		// The first word from this peer in the view: it may have dropped ours while it still trusted
		// the primary (a normal backup does, above), and would otherwise wait for the repair timeout's
		// resend. Answering once per peer and view bounds the extra messages.
		r.send(m.Replica, wire.VSRMessage{Command: wire.CommandVSRStartViewChange, View: r.view}, true)
	}
	assert.True(r.status == statusViewChange, "vsr: counting start_view_change in normal status")
	r.svcFrom.add(m.Replica)
	r.maybeSendDoViewChange()
}

// maybeSendDoViewChange sends this replica's log to the new primary once a quorum moved to the view.
func (r *Replica) maybeSendDoViewChange() {
	if r.dvcSent || r.svcFrom.count()+1 < r.quorum || r.isPrimaryOf(r.view) {
		return
	}
	r.dvcSent = true
	r.send(r.PrimaryIndex(), r.doViewChangeMessage(), true)
}

func (r *Replica) doViewChangeMessage() wire.VSRMessage {
	return wire.VSRMessage{Command: wire.CommandVSRDoViewChange, View: r.view, LogView: r.logView, Op: r.op,
		Commit: r.commit, Checksum: r.headAt(r.op), LogBase: r.logBase,
		Entries: append([]wire.VSREntry(nil), r.log...)}
}

func (r *Replica) startViewMessage() wire.VSRMessage {
	return wire.VSRMessage{Command: wire.CommandVSRStartView, View: r.view, LogView: r.logView, Op: r.op,
		Commit: r.commit, Checksum: r.headAt(r.op), LogBase: r.logBase,
		Entries: append([]wire.VSREntry(nil), r.log...)}
}

// resendViewChange repeats this replica's part of a view change in progress, for lost messages.
func (r *Replica) resendViewChange() {
	r.broadcast(wire.VSRMessage{Command: wire.CommandVSRStartViewChange, View: r.view}, true)
	if r.isPrimaryOf(r.view) {
		return
	}
	if r.dvcSent {
		r.send(r.PrimaryIndex(), r.doViewChangeMessage(), true)
	}
	r.send(r.PrimaryIndex(), wire.VSRMessage{Command: wire.CommandVSRRequestStartView, View: r.view}, false)
}

// ignoreLog says why the log a do-view-change or start-view carries is unusable, if it is.
func ignoreLog(m *wire.VSRMessage) (string, bool) {
	switch {
	case m.LogView > m.View || m.Commit > m.Op || m.LogBase > m.Commit:
		return "log: fields out of order", true
	case uint64(len(m.Entries)) != m.Op-m.LogBase:
		return "log: entry count", true
	case !validChain(m.LogBase, m.Checksum, false, m.Entries):
		return "log: broken chain", true
	case len(m.Entries) > 0 && m.Entries[len(m.Entries)-1].Checksum != m.Checksum:
		return "log: head differs", true
	}
	return "", false
}

// onDoViewChange is the new primary collecting logs.
func (r *Replica) onDoViewChange(m *wire.VSRMessage) {
	switch {
	case m.View < r.view:
		r.drop("do_view_change: older view")
		return
	case !r.isPrimaryOf(m.View):
		r.drop("do_view_change: not the primary of its view")
		return
	case m.View == r.view && r.status == statusNormal:
		r.send(m.Replica, r.startViewMessage(), true)
		return
	}
	if reason, ignore := ignoreLog(m); ignore {
		r.drop("do_view_change: " + reason)
		return
	}
	if m.View > r.view {
		r.startViewChange(m.View)
	}
	d := &r.dvcs[m.Replica]
	*d = dvcRecord{received: true, logView: m.LogView, op: m.Op, commit: m.Commit, logBase: m.LogBase,
		entries: d.entries[:0]}
	for i := range m.Entries {
		d.entries = append(d.entries, copyEntry(&m.Entries[i]))
	}
	r.svcFrom.add(m.Replica)
	r.tryCompleteViewChange()
}

// bestLog picks the do-view-change with the highest (log view, op); -1 is this replica's own log,
// which wins ties.
func (r *Replica) bestLog() int {
	best, bestView, bestOp := -1, r.logView, r.op
	for i := range r.dvcs[:r.cfg.ReplicaCount] {
		d := &r.dvcs[i]
		if !d.received {
			continue
		}
		if r.betterLog(d, bestView, bestOp) {
			best, bestView, bestOp = i, d.logView, d.op
		}
	}
	return best
}

// tryCompleteViewChange becomes primary once a quorum's logs are in and this replica can hold the best.
func (r *Replica) tryCompleteViewChange() {
	if r.status != statusViewChange || !r.isPrimaryOf(r.view) {
		return
	}
	count := 1
	commitMax := r.commitMax
	for i := range r.dvcs[:r.cfg.ReplicaCount] {
		if r.dvcs[i].received {
			count++
			commitMax = max(commitMax, r.dvcs[i].commit)
		}
	}
	if count < r.quorum {
		return
	}
	best := r.bestLog()
	if best >= 0 {
		d := &r.dvcs[best]
		if r.commit < d.logBase {
			// The best log starts above what this replica applied: get the checkpoint first.
			r.awaitSnapshot(uint8(best))
			return
		}
		if !r.adoptLog(d.logBase, d.op, d.entries) {
			r.drop("do_view_change: best log does not extend the committed prefix")
			return
		}
	}
	r.becomePrimary(commitMax)
}

// adoptLog replaces the log above commit with entries (ops logBase+1 .. op), keeping what matches.
// It refuses a log whose entry after commit does not chain onto this replica's committed prefix.
func (r *Replica) adoptLog(logBase, op uint64, entries []wire.VSREntry) bool {
	assert.True(r.commit >= logBase, "vsr: adopting a log that starts above commit")
	if op < r.commit {
		return false
	}
	if op > r.commit && entries[r.commit-logBase].Parent != r.headAt(r.commit) {
		return false
	}
	keep := r.commit
	for keep < min(op, r.op) && r.log[keep-r.logBase].Checksum == entries[keep-logBase].Checksum {
		keep++
	}
	r.log = r.log[:keep-r.logBase]
	r.op = keep
	for o := keep + 1; o <= op; o++ {
		r.appendEntry(r.ownEntry(&entries[o-logBase-1]))
	}
	r.dirty = true
	return true
}

// becomePrimary finishes the view change on the new primary.
func (r *Replica) becomePrimary(commitMax uint64) {
	r.status = statusNormal
	r.logView = r.view
	r.dirty = true
	r.awaitingSnapshot = false
	r.viewChangeTimeout.Stop()
	r.prepareTimeout.Start()
	r.acked = [MembersMax]uint64{}
	r.durableOp = 0
	r.startViewSent = 0
	r.commitMax = max(r.commitMax, commitMax)
	r.broadcast(r.startViewMessage(), true)
	r.applyCommitted(min(r.commitMax, r.op))
}

// onStartView is a backup installing the new primary's log.
func (r *Replica) onStartView(m *wire.VSRMessage) {
	switch {
	case m.View < r.view:
		r.drop("start_view: older view")
		return
	case r.isPrimaryOf(m.View):
		r.drop("start_view: to its own primary")
		return
	}
	if reason, ignore := ignoreLog(m); ignore {
		r.drop("start_view: " + reason)
		return
	}
	if m.View == r.view && r.status == statusNormal {
		// A re-sent start-view of the view this backup is in: its log is a prefix of the primary's, so
		// it takes the ops it lacks.
		if m.Op > r.op && r.commit >= m.LogBase && r.adoptLog(m.LogBase, m.Op, m.Entries) {
			r.commitMax = max(r.commitMax, m.Commit)
			r.applyCommitted(min(r.commitMax, r.op))
		}
		r.sendPrepareOK(r.op)
		return
	}
	if m.View > r.view {
		r.startViewChange(m.View)
	}
	if r.commit < m.LogBase {
		r.awaitSnapshot(m.Replica)
		return
	}
	if !r.adoptLog(m.LogBase, m.Op, m.Entries) {
		r.drop("start_view: log does not extend the committed prefix")
		return
	}
	r.status = statusNormal
	r.logView = r.view
	r.dirty = true
	r.awaitingSnapshot = false
	r.viewChangeTimeout.Stop()
	r.commitMax = max(r.commitMax, m.Commit)
	r.applyCommitted(min(r.commitMax, r.op))
	r.sendPrepareOK(r.op)
}

// onRequestStartView re-sends the start-view to a replica that missed it.
func (r *Replica) onRequestStartView(m *wire.VSRMessage) {
	if m.View != r.view || !r.isPrimary() {
		r.drop("request_start_view: not the primary of that view")
		return
	}
	r.send(m.Replica, r.startViewMessage(), true)
}

// betterLog reports whether d's log beats the best so far: a higher log view, or the same log view and
// a higher op. The log view comes first because a long log from an old view may hold ops that a later
// view replaced.
func (r *Replica) betterLog(d *dvcRecord, bestView uint32, bestOp uint64) bool {
	if r.broken.ignoreLogView {
		return d.op > bestOp
	}
	return d.logView > bestView || (d.logView == bestView && d.op > bestOp)
}
