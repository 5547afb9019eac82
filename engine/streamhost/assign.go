package streamhost

import (
	"errors"
	"slices"

	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/engine/stream"
	"github.com/ringstream/ringstream/segment"
	"github.com/ringstream/ringstream/shard"
	"github.com/ringstream/ringstream/wire"
)

// applyPhase is where the application of a new assignment is.
type applyPhase uint8

const (
	applyNone    applyPhase = iota
	applyWaiting            // waits for a seal step, the open, or reads in flight to end
	applyCutting            // the cut onto the history starts at the new epoch runs
)

// applyWork is a new assignment being applied to the copy.
type applyWork struct {
	phase  applyPhase
	asg    meta.Assignment
	starts []meta.HistoryStart
}

// OnControlFrame takes a seal or assignment frame the controller on this node addresses to it
// (engine.ControlHostConfig.LocalFrame), on any goroutine: it is copied and carried out on the
// shard of its stream.
func (h *Host) OnControlFrame(hd *wire.Header, body []byte) {
	hc, bc := *hd, slices.Clone(body)
	i := shard.ShardOf(hd.Group, len(h.shards))
	_ = h.node.Run(i, func(*shard.Shard) { h.shards[i].controlFrame(h.cfg.Node, &hc, bc) })
}

// OnUnroutedFrame takes a frame addressed to a stream this node holds no copy of, on the shard
// ShardOf puts the stream on (shard.UnroutedHandler): a seal is answered that there is no copy, an
// assignment that includes this node creates the copy (empty, or over what its directory holds)
// and applies it, a seal reply goes to Config.SealReplies. It reports whether it took the frame.
func (h *Host) OnUnroutedFrame(s *shard.Shard, from uint16, hd *wire.Header, body []byte) bool {
	switch hd.Command {
	case wire.CommandStreamSeal, wire.CommandStreamSealReply, wire.CommandStreamAssignment:
		h.shards[s.Index()].controlFrame(from, hd, body)
		return true
	}
	return false
}

// controlFrame carries out a seal, seal reply or assignment frame on the stream's shard.
func (sh *shardHost) controlFrame(from uint16, hd *wire.Header, body []byte) {
	if cg := sh.copies[hd.Group]; cg != nil && cg.state != stateClosed {
		cg.onControlFrame(from, hd, body)
		return
	}
	switch hd.Command {
	case wire.CommandStreamSeal:
		m, _, err := wire.DecodeStreamSeal(hd, body)
		if err != nil {
			sh.stats.FramesBad++
			return
		}
		sh.sendSealReply(from, wire.StreamSealReply{Stream: m.Stream, Incarnation: m.Incarnation, FenceEpoch: m.FenceEpoch,
			Status: wire.SealNoCopy, TransitionID: m.TransitionID}, nil)
	case wire.CommandStreamSealReply:
		sh.onSealReply(from, hd, body)
	case wire.CommandStreamAssignment:
		m, starts, err := wire.DecodeStreamAssignment(hd, body)
		if err != nil {
			sh.stats.FramesBad++ // an unreadable list withholds the assignment
			return
		}
		a := assignmentOf(&m)
		if !a.Includes(sh.h.cfg.Node) {
			return
		}
		cg, err := sh.h.newCopy(Spec{Stream: m.Stream, Incarnation: m.Incarnation, Assignment: a,
			RetainBytes: sh.h.cfg.RetainBytes, RetainAgeMs: sh.h.cfg.RetainAgeMs})
		if err != nil {
			sh.h.log.Error("streamhost: assignment not applied", "stream", m.Stream, "err", err)
			return
		}
		cg.apply = applyWork{phase: applyWaiting, asg: a, starts: historyStarts(nil, starts)}
		sh.copies[m.Stream] = cg // frames before the shard attaches it find it opening
		sh.addTail(cg)
		if err := sh.h.node.AddGroup(cg); err != nil {
			delete(sh.copies, m.Stream)
			sh.h.log.Error("streamhost: assignment not applied", "stream", m.Stream, "err", err)
		}
	default:
		sh.stats.FramesDropped++
	}
}

// onSealReply hands a seal reply that reached this node to Config.SealReplies.
func (sh *shardHost) onSealReply(from uint16, hd *wire.Header, body []byte) {
	m, _, err := wire.DecodeStreamSealReply(hd, body)
	if err != nil {
		sh.stats.FramesBad++
		return
	}
	if f := sh.h.cfg.SealReplies; f != nil {
		f(from, m)
	}
}

// onControlFrame carries out a seal, seal reply or assignment for this copy.
func (cg *copyGroup) onControlFrame(from uint16, hd *wire.Header, body []byte) {
	cg.wake()
	sh := cg.h
	switch hd.Command {
	case wire.CommandStreamSealReply:
		sh.onSealReply(from, hd, body)
	case wire.CommandStreamSeal:
		m, starts, err := wire.DecodeStreamSeal(hd, body)
		if err != nil {
			sh.stats.FramesBad++
			return
		}
		if m.Incarnation != cg.spec.Incarnation {
			sh.sendSealReply(from, wire.StreamSealReply{Stream: m.Stream, Incarnation: m.Incarnation,
				FenceEpoch: m.FenceEpoch, Status: wire.SealNoCopy, TransitionID: m.TransitionID}, nil)
			return
		}
		cg.onSeal(from, m, starts)
	case wire.CommandStreamAssignment:
		m, starts, err := wire.DecodeStreamAssignment(hd, body)
		if err != nil {
			sh.stats.FramesBad++ // an unreadable list withholds the assignment
			return
		}
		if m.Incarnation != cg.spec.Incarnation {
			sh.stats.FramesDropped++
			return
		}
		cg.onAssign(assignmentOf(&m), starts)
	}
}

// assignmentOf is the meta assignment a frame carries.
func assignmentOf(m *wire.StreamAssignment) meta.Assignment {
	return meta.Assignment{Epoch: m.Epoch, Owner: m.Owner, Followers: slices.Clone(m.FollowerList()),
		Policy: meta.Policy{Kind: meta.PolicyKind(m.PolicyKind), Count: m.PolicyCount}}
}

// onAssign takes a new assignment. One that leaves this node out changes nothing (a sealed copy
// stays sealed); one at or below the epoch the copy serves or is applying, or below its fence, is
// stale; one that keeps as owner a copy that reopened within its own epoch, without a seal at its
// epoch, is refused. Otherwise it is applied once no seal step runs: see stepApply.
func (cg *copyGroup) onAssign(a meta.Assignment, starts wire.HistoryStarts) {
	sh := cg.h
	switch {
	case !a.Includes(sh.h.cfg.Node):
		sh.stats.AssignmentsLeftOut++
		return
	case a.Epoch <= cg.spec.Assignment.Epoch || (cg.apply.phase != applyNone && a.Epoch <= cg.apply.asg.Epoch),
		a.Epoch < cg.fenceEpoch():
		sh.stats.AssignmentsStale++
		return
	case a.Policy.Validate() != nil:
		sh.stats.FramesBad++
		return
	case a.Owner == sh.h.cfg.Node && cg.c != nil && cg.c.Restarted() &&
		a.Epoch > cg.fenceEpoch():
		// It may have lost records a follower holds: it publishes its restart and waits for the
		// recovery, whose seal at a's epoch comes first.
		sh.stats.AssignmentsRefused++
		return
	case a.Owner == sh.h.cfg.Node && cg.fail.active && cg.fail.role == stream.RoleOwner:
		// An owner whose storage failed reopens in its own epoch as a restarted owner, and takes,
		// as that one, no assignment that keeps it owner before a recovery's seal.
		sh.stats.AssignmentsRefused++
		return
	}
	if cg.apply.phase == applyCutting {
		// The cut for an older assignment runs: this one is applied after it (its cut repeats).
		cg.apply.asg, cg.apply.starts = a, historyStarts(cg.apply.starts[:0], starts)
		return
	}
	cg.apply = applyWork{phase: applyWaiting, asg: a, starts: historyStarts(cg.apply.starts[:0], starts)}
	cg.stepApply()
}

// stepApply moves a waiting assignment on: once no seal step runs and the copy's storage is open,
// the protocol copy stops (what waits is refused), the reads in flight end, and the copy is cut onto
// meta.CutPoint at the new epoch (a longer divergent suffix goes; cursors above the new record tail
// are clamped). Then the copy reopens in its new role from its storage: a sealed copy is released in
// place, the chosen copy becomes owner at its own tails, the others follow, a new member starts
// empty. The log epoch of the new epoch is appended by the copy's OpenDone, as at boot.
func (cg *copyGroup) stepApply() {
	ap := &cg.apply
	if ap.phase != applyWaiting || cg.seal.busy() {
		return
	}
	switch cg.state {
	case stateOpening, stateScanning, stateClosing, stateFailed, stateClosed:
		return // the open's end (or its failure, then its reopen) comes back here
	case stateServing:
		if cg.c != nil {
			cg.c.Sealed(ap.asg.Epoch)
			cg.endWaitingReads()
			cg.carryOut()
		}
		if cg.state != stateServing {
			return // carrying out found its storage failed: applied once it reopened (Done(OpOpen))
		}
		cg.state = stateApplying
		if cg.seal.phase == sealQueued {
			cg.seal.phase = sealNone // the assignment supersedes it
		}
	}
	if len(cg.reading) > 0 {
		return // ReadDone comes back here: the next copy must not get the old one's reads
	}
	if r, c := cg.seg.Records(), cg.seg.Cursors(); r.NextOffset() != r.DurableTail() || c.NextOffset() != c.DurableTail() ||
		(cg.c != nil && !cg.c.Failed() && !cg.c.Quiet()) {
		cg.seg.SyncCursors() // cursor events wait for a sync of their own: ask for it
		return               // AppendDone comes back here: the next copy starts at durable tails that no longer move
	}
	rec, cur := cg.seg.Tails()
	cut, ok := meta.CutPoint(cg.h.h.cfg.Node, cg.metaEpochs(), ap.asg.Epoch, ap.starts)
	if ok && (cut.Record < rec || cut.Cursor < cur) {
		err := cg.startCut(tagApplyCut, min(cut.Record, rec), min(cut.Cursor, cur))
		switch {
		case err == nil:
			ap.phase = applyCutting
			cg.h.stats.Cuts++
		case errors.Is(err, segment.ErrBusy):
			// another rare operation runs (retention): OnTick tries again
		default:
			cg.applyFailed(err)
		}
		return
	}
	cg.reopen()
}

// applyCutDone: the cut for the new assignment ended.
func (cg *copyGroup) applyCutDone(err error) {
	if err != nil {
		cg.applyFailed(err)
		return
	}
	cg.apply.phase = applyWaiting
	cg.stepApply() // a newer assignment that came during the cut cuts again (a no-op if the same)
}

// applyFailed closes a copy whose cut (or whose old copy's appends) failed: its logs match no role
// yet, so it serves nothing and is reported; reopened, it applies the assignment again (its cut
// repeats). The others serve.
func (cg *copyGroup) applyFailed(err error) {
	cg.apply.phase = applyWaiting
	cg.failScan(err)
}

// reopen starts the copy at the applied assignment: in place (stream.Copy.Reassign) when its logs
// were not cut since it read them, else from its storage, as at boot (a new protocol copy fed every
// retained batch header).
func (cg *copyGroup) reopen() {
	ap := &cg.apply
	cg.setAssignment(ap.asg)
	cg.starts = append(cg.starts[:0], ap.starts...)
	ap.phase = applyNone
	cg.h.stats.Applied++
	cg.warnBelowPrefix()
	if c := cg.c; c != nil && !cg.cutSinceScan && !c.Failed() && c.Reassign(cg.spec.Assignment, cg.starts) == nil {
		cg.h.stats.InPlace++
		cg.openDone() // what the copy knows of its logs stands: no reread
		return
	}
	cg.startScan()
}

// warnBelowPrefix logs a promotion of this copy below the confirmed prefix: its record tail under
// the latest history start of an earlier epoch. A recovery never promotes such a copy (its guard
// waits); an operator's accepted owner loss can, and records confirmed there may be gone.
func (cg *copyGroup) warnBelowPrefix() {
	a := &cg.spec.Assignment
	if a.Owner != cg.h.h.cfg.Node {
		return
	}
	var prefix meta.HistoryStart
	for _, s := range cg.starts {
		if s.Epoch < a.Epoch {
			prefix = s
		}
	}
	if rec, _ := cg.seg.Tails(); prefix.Epoch != 0 && rec < prefix.RecordStart {
		cg.h.stats.BelowPrefix++
		cg.h.h.log.Warn("streamhost: promoted below the confirmed prefix (an accepted owner loss): confirmed records may be lost",
			"stream", cg.spec.Stream, "epoch", a.Epoch, "record_tail", rec, "prefix", prefix.RecordStart,
			"prefix_epoch", prefix.Epoch, "prefix_node", prefix.Node)
	}
}

// setAssignment makes a the copy's assignment and group membership: the owner is member 0, the
// followers follow in ascending order; the shard reads them again when the view changes.
func (cg *copyGroup) setAssignment(a meta.Assignment) {
	cg.spec.Assignment = a
	cg.spec.Assignment.Followers = slices.Clone(a.Followers)
	cg.members = append(cg.members[:0], shard.Member{Index: 0, Node: a.Owner})
	for i, f := range cg.spec.Assignment.Followers {
		cg.members = append(cg.members, shard.Member{Index: uint8(i + 1), Node: f})
	}
	cg.self = 0
	for _, m := range cg.members {
		if m.Node == cg.h.h.cfg.Node {
			cg.self = m.Index
		}
	}
}
