package streamhost

import (
	"errors"

	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/segment"
	"github.com/ringstream/ringstream/wire"
)

// sealPhase is where a copy's seal is (the stream-failover spec's seal, one storage operation in
// steps, each a segment job or ring operation that reports back).
type sealPhase uint8

const (
	sealNone      sealPhase = iota
	sealQueued              // waits for the copy to serve, or for storage to take the seal
	sealFencing             // segment.Seal runs: the fence at the new epoch is being made durable
	sealCutting             // the cut onto the history starts below the fence runs
	sealDigesting           // segment.Seal again after the cut: digest and tails of the cut logs
	sealAnswered            // the reply went out; it is kept for a repeated seal
)

// sealWork is a copy's seal: the newest seal frame taken, its history starts, and the reply once
// answered.
type sealWork struct {
	phase  sealPhase
	to     uint16 // the controller's node: the seal's sender
	msg    wire.StreamSeal
	starts []meta.HistoryStart
	again  bool // a newer transition arrived while storage worked: start over once the step ends
	reply  wire.StreamSealReply
}

// busy says whether a seal step runs in storage.
func (s *sealWork) busy() bool {
	return s.phase == sealFencing || s.phase == sealCutting || s.phase == sealDigesting
}

// onSeal takes a seal frame from node from (the metadata primary's controller). A seal at or below
// the copy's assignment or fence, or an older transition at the fence it holds, is answered stale;
// the same transition again is answered again from the kept reply (or left to the running seal); a
// newer one takes the seal over.
func (cg *copyGroup) onSeal(from uint16, m wire.StreamSeal, starts wire.HistoryStarts) {
	s := &cg.seal
	fence := cg.fenceEpoch()
	sameFence := s.phase != sealNone && m.FenceEpoch == s.msg.FenceEpoch
	switch {
	case m.FenceEpoch <= cg.spec.Assignment.Epoch || m.FenceEpoch < fence ||
		(sameFence && m.TransitionID < s.msg.TransitionID) || m.FenceEpoch < s.msg.FenceEpoch:
		cg.h.stats.SealsStale++
		cg.sendSealReply(from, wire.StreamSealReply{Stream: m.Stream, Incarnation: m.Incarnation,
			FenceEpoch: m.FenceEpoch, Status: wire.SealStale, TransitionID: m.TransitionID}, nil)
		return
	case sameFence && m.TransitionID == s.msg.TransitionID:
		if s.phase == sealAnswered {
			s.to = from
			cg.answerSeal()
		}
		return
	}
	s.to, s.msg = from, m
	s.starts = historyStarts(s.starts[:0], starts)
	if s.busy() {
		s.again = true
		return
	}
	cg.startSeal()
}

// fenceEpoch is storage's fence epoch; 0 while storage is not open (a seal or an assignment then
// waits for the open, and the copy's OpenDone compares the fence with its assignment).
func (cg *copyGroup) fenceEpoch() uint32 {
	if cg.seg == nil || cg.state == stateOpening || cg.state == stateClosed || cg.state == stateFailed {
		return 0
	}
	return uint32(cg.seg.FenceEpoch())
}

// startSeal fences the copy: the protocol copy stops at once (produces waiting are refused as
// sealed), storage writes the fence and commits what is queued. A copy not serving yet, or storage
// busy with another operation, keeps the seal queued: OnTick and the operation's end try again.
func (cg *copyGroup) startSeal() {
	s := &cg.seal
	s.phase, s.again = sealQueued, false
	if s.msg.FenceEpoch <= cg.spec.Assignment.Epoch {
		s.phase = sealNone // the copy reopened at or past the fence while the seal waited
		return
	}
	if cg.state != stateServing || cg.apply.phase == applyCutting {
		return
	}
	if cg.c != nil {
		cg.c.Sealed(s.msg.FenceEpoch)
		cg.h.markDirty(cg)
	}
	err := cg.seg.Seal(tagSeal, uint64(s.msg.FenceEpoch))
	switch {
	case err == nil:
		s.phase = sealFencing
	case errors.Is(err, segment.ErrBusy), errors.Is(err, segment.ErrBackpressure):
	default:
		cg.sealFailed(err)
	}
}

// sealFailed gives a seal up: nothing is answered, and the controller seals again while it waits.
func (cg *copyGroup) sealFailed(err error) {
	cg.h.h.log.Error("streamhost: seal failed", "stream", cg.spec.Stream, "fence", cg.seal.msg.FenceEpoch, "err", err)
	cg.h.stats.SealsFailed++
	cg.seal.phase = sealNone
	cg.stepApply()
}

// SealDone: the fence is durable and storage computed the digest (from segment's completions, so it
// only starts the next step: the cut is a job that runs in Jobs.Poll).
func (cg *copyGroup) SealDone(_ uint64, res segment.Seal, err error) {
	s := &cg.seal
	switch {
	case err != nil && (cg.fail.active || storageFault(err)):
		// Its storage failed: not an answer the controller can use. The seal waits for the copy to
		// reopen (openDone starts it again); the controller seals again meanwhile and learns of the
		// failure from the node's heartbeats.
		cg.h.h.log.Warn("streamhost: seal failed on failed storage", "stream", cg.spec.Stream, "fence", s.msg.FenceEpoch, "err", err)
		cg.h.stats.SealsFailed++
		s.phase = sealQueued
		cg.storageFailed(err)
		return
	case err != nil:
		cg.sealFailed(err)
		return
	case s.again:
		cg.startSeal()
		return
	case s.phase == sealDigesting:
		cg.sealAnswer(res)
		return
	}
	rec, cur := cg.seg.Tails()
	cut, ok := meta.CutPoint(cg.h.h.cfg.Node, cg.metaEpochs(), s.msg.FenceEpoch, s.starts)
	if !ok || (cut.Record >= rec && cut.Cursor >= cur) {
		cg.sealAnswer(res)
		return
	}
	if err := cg.startCut(tagSealCut, min(cut.Record, rec), min(cut.Cursor, cur)); err != nil {
		cg.sealFailed(err)
		return
	}
	s.phase = sealCutting
	cg.h.stats.Cuts++
}

// sealCutDone: the cut ended; the seal runs again at the same fence for the cut logs' digest.
func (cg *copyGroup) sealCutDone(err error) {
	s := &cg.seal
	switch {
	case err != nil && (cg.fail.active || storageFault(err)):
		s.phase = sealQueued // reopened, the copy seals again (the cut repeats as a no-op)
		cg.storageFailed(err)
	case err != nil:
		cg.sealFailed(err)
	case s.again:
		cg.startSeal()
	default:
		if err := cg.seg.Seal(tagSeal, uint64(s.msg.FenceEpoch)); err != nil {
			s.phase = sealQueued // storage busy: the whole seal again (the cut repeats as a no-op)
			return
		}
		s.phase = sealDigesting
	}
}

// storageFault says whether err is the storage's failure (a log failed, or an operation failed with
// an errno) rather than a refusal of the request.
func storageFault(err error) bool {
	return errors.Is(err, segment.ErrFailed) || errnoOf(err) != 0
}

// sealAnswer keeps the reply of a finished seal and sends it.
func (cg *copyGroup) sealAnswer(res segment.Seal) {
	s := &cg.seal
	s.phase = sealAnswered
	s.reply = wire.StreamSealReply{Stream: s.msg.Stream, Incarnation: s.msg.Incarnation, FenceEpoch: s.msg.FenceEpoch,
		Status: wire.SealSealed, TransitionID: s.msg.TransitionID, RecordTail: res.RecordTail, CursorTail: res.CursorTail,
		Digest: res.Digest}
	cg.h.stats.Seals++
	cg.answerSeal()
	cg.stepApply()
	if cg.apply.phase == applyNone {
		cg.parkAfterOp() // sealed and idle until an assignment comes
	}
}

// answerSeal sends the kept reply with the copy's log epochs.
func (cg *copyGroup) answerSeal() {
	var epochs []wire.LogEpoch
	for _, e := range cg.seg.Epochs() {
		epochs = append(epochs, wire.LogEpoch{Epoch: uint32(e.Epoch), RecordStart: e.RecordStart, CursorStart: e.CursorStart})
	}
	cg.sendSealReply(cg.seal.to, cg.seal.reply, epochs)
}

// sendSealReply sends a seal reply to node to; one for this node goes to Config.SealReplies.
func (cg *copyGroup) sendSealReply(to uint16, r wire.StreamSealReply, epochs []wire.LogEpoch) {
	cg.h.sendSealReply(to, r, epochs)
}

func (sh *shardHost) sendSealReply(to uint16, r wire.StreamSealReply, epochs []wire.LogEpoch) {
	cfg := &sh.h.cfg
	if to == cfg.Node {
		if cfg.SealReplies != nil {
			cfg.SealReplies(to, r)
		}
		return
	}
	sh.scratch = wire.AppendStreamSealReply(sh.scratch[:0], wire.From{Cluster: cfg.Cluster, Node: cfg.Node}, &r, epochs)
	if sh.send.SendFrame(to, sh.scratch) != nil {
		sh.stats.SendsRefused++ // the controller seals again and gets the kept reply
	}
}

// metaEpochs are the copy's log epochs as meta.CutPoint reads them.
func (cg *copyGroup) metaEpochs() []meta.LogEpoch {
	var out []meta.LogEpoch
	for _, e := range cg.seg.Epochs() {
		out = append(out, meta.LogEpoch{Epoch: uint32(e.Epoch), RecordStart: e.RecordStart, CursorStart: e.CursorStart})
	}
	return out
}

// historyStarts appends the decoded starts of a seal or assignment frame to dst.
func historyStarts(dst []meta.HistoryStart, l wire.HistoryStarts) []meta.HistoryStart {
	for i := range l.Len() {
		h := l.At(i)
		dst = append(dst, meta.HistoryStart{Epoch: h.Epoch, Node: h.Node, RecordStart: h.RecordStart, CursorStart: h.CursorStart})
	}
	return dst
}
