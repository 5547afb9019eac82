package streamhost

import (
	"github.com/ringstream/ringstream/engine/stream"
	"github.com/ringstream/ringstream/shard"
	"github.com/ringstream/ringstream/shard/heartbeat"
	"github.com/ringstream/ringstream/wire"
)

// The copy as a shard.Group: member 0 is the owner, the followers follow in ascending node order;
// the view is the assignment's epoch; the owner is the primary and its commit the confirmed tail.

func (cg *copyGroup) ID() uint64          { return cg.spec.Stream }
func (cg *copyGroup) Incarnation() uint32 { return cg.spec.Incarnation }
func (cg *copyGroup) View() uint32        { return cg.spec.Assignment.Epoch }
func (cg *copyGroup) Commit() uint64      { return cg.commit }
func (cg *copyGroup) Self() uint8         { return cg.self }
func (cg *copyGroup) Primary() uint8      { return 0 }
func (cg *copyGroup) Quorum() int         { return cg.spec.Assignment.ConfirmCount() }

func (cg *copyGroup) Members() []shard.Member { return cg.members }

func (cg *copyGroup) CommitHolders() heartbeat.Members { return cg.holders }

func (cg *copyGroup) Role() shard.Role {
	if cg.state != stateServing {
		return shard.RoleOffline
	}
	switch cg.role {
	case stream.RoleOwner:
		return shard.RolePrimary
	case stream.RoleFollower:
		return shard.RoleBackup
	}
	return shard.RoleOffline
}

func (cg *copyGroup) PendingSuperblock() (shard.SuperblockSave, bool) {
	return shard.SuperblockSave{}, false
}
func (cg *copyGroup) SuperblockSaved(error) {}

// OnCommit: the owner's Commit entry carries its confirmed tail; a follower keeps it as the bound
// of its retention.
func (cg *copyGroup) OnCommit(_ uint16, e wire.CommitEntry) {
	if cg.c != nil && cg.state == stateServing {
		cg.c.CommitSeen(e.View, e.Commit)
		if e.View == cg.spec.Assignment.Epoch {
			cg.silent = false
		}
	}
}

// OnCommitReply: an owner that lost its quorum (R24) serves again on the first reply the shard
// forwards after the loss. The shard's heartbeat.Primary decides: while the loss holds it forwards no
// reply until W copies, itself included, are heard within commit_heartbeat_timeout by Commits sent
// since the loss, each reply counted as of the tick its Commit was sent (a reply that waited in the
// network or for a paused owner counts for nothing). Counting here would count without that window.
// The copy's loss never outlives its Primary's (every way out of serving at an epoch makes a new copy
// or moves this one to a new epoch, which clears it), and QuorumHeard is nothing to a copy whose
// quorum holds, so no reply needs a check here.
func (cg *copyGroup) OnCommitReply(uint16, wire.CommitReplyEntry) {
	if cg.c != nil {
		cg.c.QuorumHeard()
	}
}

// OnPrimarySilent: a follower heard nothing from its owner for the shard's timeout. It is counted and
// published in the node's heartbeats (wire.CopyOwnerSilent) until the owner is heard again; the
// controller decides. OnQuorumLost is counted, and an owner stops serving until it hears a quorum
// again (R24, stream.Copy.QuorumLost).
func (cg *copyGroup) OnPrimarySilent() {
	cg.wake()
	cg.h.stats.PrimarySilent++
	cg.silent = true
}
func (cg *copyGroup) OnQuorumLost() {
	cg.wake()
	cg.h.stats.QuorumLost++
	if cg.c != nil && cg.state == stateServing {
		cg.c.QuorumLost()
	}
}

// OnFrame takes a stream prepare or prepare-ok. The message aliases the receive buffer, so the
// copy's effects are carried out before returning: a follower's appends copy the batches into the
// log's group buffer here.
func (cg *copyGroup) OnFrame(from uint16, h *wire.Header, body []byte) {
	switch h.Command {
	case wire.CommandStreamSeal, wire.CommandStreamSealReply, wire.CommandStreamAssignment:
		cg.onControlFrame(from, h, body)
		return
	}
	if cg.c == nil || cg.state != stateServing {
		cg.h.stats.FramesDropped++
		if h.Command == wire.CommandStreamPrepare && (cg.state == stateOpening || cg.state == stateScanning || cg.state == stateApplying) {
			cg.keepProbe(from, h, body)
		}
		return
	}
	m := &cg.h.msg
	*m = stream.Message{From: from}
	var err error
	switch h.Command {
	case wire.CommandStreamPrepare:
		m.Kind = stream.KindPrepare
		m.Prepare, err = wire.DecodeStreamPrepare(h, body)
	case wire.CommandStreamPrepareOK:
		m.Kind = stream.KindPrepareOK
		m.PrepareOK, m.Epochs, err = wire.DecodeStreamPrepareOK(h, body)
	default:
		cg.h.stats.FramesDropped++
		return
	}
	if err != nil {
		cg.h.stats.FramesBad++
		return
	}
	if cg.h.tr.On() {
		cg.traceFrame(from, m)
	}
	cg.syncHead()
	cg.c.Step(m)
	*m = stream.Message{}
	cg.carryOut()
}

// OnLinkUp implements shard.LinkWatcher: an owner probes again, at once, the followers on node that
// owe it an answer (stream.Copy.PeerUp).
func (cg *copyGroup) OnLinkUp(node uint16) {
	if cg.c != nil {
		cg.c.PeerUp(node)
		cg.h.markDirty(cg)
	}
}

// OnLinkDown implements shard.LinkWatcher; a link going down changes nothing until it is up again.
func (cg *copyGroup) OnLinkDown(uint16) {}

// keepProbe keeps a record prepare that arrived while the copy was not serving (opening, scanning,
// applying an assignment): a new owner probes its followers as soon as its own epoch is durable,
// while a follower may still be applying the same assignment, and the owner would probe again only
// after its ResendTicks. The copy takes the kept probe once it serves (stepKeptProbe) and answers it
// when its own epoch is durable (stream.OwedProbe).
func (cg *copyGroup) keepProbe(from uint16, h *wire.Header, body []byte) {
	if m, err := wire.DecodeStreamPrepare(h, body); err == nil {
		cg.keptProbe.Offer(from, &m)
	}
}

// stepKeptProbe hands the kept probe to the copy that now serves.
func (cg *copyGroup) stepKeptProbe() {
	if m, ok := cg.keptProbe.Take(); ok {
		cg.c.Step(&m)
	}
}

// traceFrame marks a record prepare's arrival at a follower, or a follower's answer at the owner
// (engine/stagetrace).
func (cg *copyGroup) traceFrame(from uint16, m *stream.Message) {
	tr := cg.h.tr
	switch {
	case m.Kind == stream.KindPrepare && m.Prepare.Log == wire.LogRecords && m.Prepare.Count > 0:
		p := &m.Prepare
		tr.FollowerReceived(cg.spec.Stream, from, p.BaseOffset, p.BaseOffset+uint64(p.Count), tr.Now())
	case m.Kind == stream.KindPrepareOK && m.PrepareOK.Log == wire.LogRecords && m.PrepareOK.Status == wire.PrepareAppended:
		tr.OwnerAnswer(cg.spec.Stream, from, m.PrepareOK.RecordTail, tr.Now())
	}
}

// OnTick advances the copy's tick-counted timers, and starts retention when due. A seal or an
// assignment that storage could not take yet is tried again.
func (cg *copyGroup) OnTick(tick uint64) {
	if !cg.sleeping { // awake: its tick may move what it publishes (a sleeping one's inputs mark it)
		cg.h.markTail(cg)
	}
	if cg.fail.active {
		cg.healTick(tick)
		return
	}
	if cg.seal.phase == sealQueued && cg.state == stateServing {
		cg.startSeal()
	}
	if cg.apply.phase == applyWaiting && cg.state == stateApplying {
		cg.stepApply()
	}
	cg.parkIfIdle(tick)
	if cg.c == nil || cg.state != stateServing {
		return
	}
	if cg.delWait {
		cg.tryDelete()
		return
	}
	cg.syncHead()
	cg.tryEpoch()
	cg.startWaitingReads()
	if cg.ticking {
		cg.c.Tick()
		cg.h.markDirty(cg)
	}
	if tick >= cg.retainAt {
		cg.retainAt = tick + cg.h.h.cfg.RetainEveryTicks
		cg.startRetain()
	}
}

// Attach is in copy.go: it starts the open.

var (
	_ shard.Group   = (*copyGroup)(nil)
	_ shard.Stopper = (*copyGroup)(nil)
)
