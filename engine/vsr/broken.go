package vsr

import "github.com/ringstream/ringstream/wire"

// brokenRules are deliberately wrong protocol rules. Each is off in every replica the package builds;
// only the Break* hooks of export_test.go turn one on, so that a test can prove the simulator
// (engine/sim) catches the bug the rule stands for (broken_test.go).
type brokenRules struct {
	// ignoreLogView: the longest do-view-change log wins whatever its log view.
	ignoreLogView bool
	// prepareOKEarly: a backup acknowledges a prepare before the entry is durable.
	prepareOKEarly bool
	// viewChangeEarly: do-view-change and start-view leave before the log they carry is durable.
	viewChangeEarly bool
	// mixChunks: a state transfer takes a chunk of another checkpoint as the next one of the checkpoint
	// it assembles, and installs what the bytes decode to without checking the whole's checksum or op.
	mixChunks bool
}

// sendsEarly reports whether a broken rule lets a message of command c leave before the persist it
// vouches for is durable.
func (b *brokenRules) sendsEarly(c wire.Command) bool {
	switch c {
	case wire.CommandVSRPrepareOK:
		return b.prepareOKEarly
	case wire.CommandVSRDoViewChange, wire.CommandVSRStartView:
		return b.viewChangeEarly
	}
	return false
}

// skipRecovery is the broken rule of a replica that takes a lost disk for a new one: started in
// recovery, it acts at once on the state it has (none) in the view its storage named, votes and
// acknowledges without having learnt the group's state. The simulator must catch the committed op
// this loses (issue 10's first repro).
func (r *Replica) skipRecovery() {
	if r.status != statusRecovering {
		return
	}
	r.logView = r.view
	if r.isPrimaryOf(r.view) {
		r.startViewChange(r.view + 1)
		return
	}
	r.status = statusNormal
}
