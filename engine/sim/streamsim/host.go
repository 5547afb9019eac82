package streamsim

import (
	"bytes"
	"slices"

	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/engine/stream"
	"github.com/ringstream/ringstream/wire"
)

// hostCopy is one open copy on a node: the real stream.Copy and what its host keeps for it.
type hostCopy struct {
	c         *stream.Copy
	asg       meta.Assignment // as meta stamped it
	reads     []stream.Read
	syncCur   bool   // SyncCursors asked
	confirmed uint64 // the last confirmed tail seen, which never moves back
	opened    uint64 // tick it was opened at
	// cutSinceOpen: a seal or an assignment cut the disk under this copy, which no longer knows its
	// logs: its next assignment makes it again from the disk (as the broker's cutSinceScan).
	cutSinceOpen bool
	quorum       quorumWatch // owner: R24 (quorum.go)
}

// heartbeatTicks is how often a node sends its heartbeat to the metadata primary.
const heartbeatTicks = 3

// copyPolicy is the policy a copy confirms by for assignment a: the stamped one, except in the
// broken variants that make the copies and the controller disagree.
func (s *Sim) copyPolicy(a meta.Assignment) meta.Policy {
	switch s.opt.Variant {
	case ConfirmWMinus1:
		w := a.ConfirmCount()
		return meta.Policy{Kind: meta.PolicyCountDurable, Count: uint8(max(w-1, 1))}
	case SealRMinus1:
		return meta.Policy{Kind: meta.PolicyMajorityDurable}
	}
	return a.Policy
}

// openCopy opens node n's copy of stream si at its disk's applied assignment, as a broker does at
// boot or after applying an assignment: every retained batch header and cursor fed, then OpenDone.
func (s *Sim) openCopy(n *node, si int) {
	d := n.disks[si]
	st := s.strs[si].st
	a := d.asg
	a.Policy = s.copyPolicy(d.asg)
	c, err := stream.New(copyConfig(n.id, st), a, d.starts)
	if err != nil {
		s.fail("node %d stream %d: open at epoch %d: %v", n.id, st.ID, a.Epoch, err)
		return
	}
	d.syncAll()
	for _, raw := range d.rec().raw {
		h, _, err := decodeBatch(raw)
		if err == nil {
			err = c.ObserveBatch(h)
		}
		if err != nil {
			s.fail("node %d stream %d: retained batch: %v", n.id, st.ID, err)
			return
		}
	}
	for _, raw := range d.cur().raw {
		if name, off, ok := cursorEvent(raw); ok {
			c.ObserveCursor(name, off)
		}
	}
	c.OpenDone(stream.OpenState{RecordTail: d.rec().tail(), CursorTail: d.cur().tail(), Fence: d.fence,
		LogEpochs: d.epochs})
	n.copies[si] = &hostCopy{c: c, asg: d.asg, opened: s.now}
	s.reopenFailed(n, si)
	s.drive(n, si)
}

// drive carries out the copy's effects in the order Effects names, until it asks for nothing more.
func (s *Sim) drive(n *node, si int) {
	hc, d := n.copies[si], n.disks[si]
	for round := 0; round < 100 && s.err == nil; round++ {
		hc.c.CheckInvariants()
		fx := hc.c.Ready()
		s.chk.onReady(s, n, si, hc)
		again := false
		var epochsDone []uint32
		for _, e := range fx.Epochs {
			d.epochs = append(d.epochs, e) // fdatasynced
			epochsDone = append(epochsDone, e.Epoch)
		}
		encoded := make([][]byte, len(fx.Appends))
		early := false
		for i, a := range fx.Appends {
			var raw []byte
			switch {
			case a.Encoded != nil:
				raw = bytes.Clone(a.Encoded)
			case a.Log == wire.LogCursors:
				raw = encodeBatch(a.Header, cursorPayload(a.CursorName, a.CursorOffset))
			default:
				raw = encodeBatch(a.Header, a.Payload)
				early = early || s.opt.Variant == AckBeforeFsync
			}
			if _, err := d.log(a.Log).append(raw); err != nil {
				s.fail("node %d stream %d: %v", n.id, s.strs[si].st.ID, err)
				return
			}
			encoded[i] = raw
		}
		hc.syncCur = hc.syncCur || fx.SyncCursors
		hc.reads = append(hc.reads, fx.Reads...)
		if !s.sendReplication(n, d, fx, encoded) {
			return
		}
		for _, r := range fx.Replies {
			r.Fetch.Batches = bytes.Clone(r.Fetch.Batches)
			r.Error.Message = bytes.Clone(r.Error.Message)
			s.send(envelope{from: n.id, to: clientNode, kind: kindReply, stream: s.strs[si].st.ID, reply: r})
		}
		for _, e := range epochsDone {
			hc.c.EpochDone(e, nil)
			again = true
		}
		if early {
			appended, _ := hc.c.Tails()
			hc.c.AppendDone(wire.LogRecords, appended)
			again = true
		}
		if !again {
			return
		}
	}
}

// sendReplication sends the effects' prepares (with the bytes they name) and prepare-oks, checking
// that no acknowledgement vouches past the durable tail. It reports false after a violation.
func (s *Sim) sendReplication(n *node, d *disk, fx *stream.Effects, encoded [][]byte) bool {
	for _, p := range fx.Prepares {
		msg := p.Msg
		switch p.Source {
		case stream.SourceAppends:
			msg.Batches = slices.Concat(encoded[p.AppendFrom:p.AppendTo]...)
		case stream.SourceUnsynced:
			b, ok := d.log(msg.Log).unsyncedFrom(msg.BaseOffset)
			if !ok {
				s.fail("node %d: unsynced send from %d, not a batch start", n.id, msg.BaseOffset)
				return false
			}
			msg.Batches = b
		}
		frame := wire.AppendStreamPrepare(nil, wire.From{Cluster: 1, Node: n.id}, &msg)
		s.send(envelope{from: n.id, to: p.To, kind: kindPrepare, stream: msg.Stream, frame: frame})
	}
	for _, ok := range fx.PrepareOKs {
		if ok.Msg.Status == wire.PrepareAppended && ok.Msg.RecordTail > d.rec().durableTail() {
			s.fail("node %d acknowledges %d past its durable tail %d", n.id, ok.Msg.RecordTail, d.rec().durableTail())
			return false
		}
		frame := wire.AppendStreamPrepareOK(nil, wire.From{Cluster: 1, Node: n.id}, &ok.Msg, ok.Epochs)
		s.send(envelope{from: n.id, to: ok.To, kind: kindPrepareOK, stream: ok.Msg.Stream, frame: frame})
	}
	return true
}

// diskStep completes a node's storage work at random moments: group commits (one fdatasync for
// every queued append of a log) and reads.
func (s *Sim) diskStep(n *node) {
	for si, hc := range n.copies {
		if hc == nil || s.err != nil {
			continue
		}
		d := n.disks[si]
		if s.diskFaulted(n, si, hc) {
			continue
		}
		moved := false
		if r := d.rec(); r.synced < len(r.ids) && !n.holdSync && s.rng.IntN(2) == 0 {
			r.synced = len(r.ids)
			if _, durable := hc.c.Tails(); r.tail() > durable {
				hc.c.AppendDone(wire.LogRecords, r.tail())
			}
			moved = true
		}
		if c := d.cur(); c.synced < len(c.ids) && (hc.syncCur || s.rng.IntN(4) == 0) {
			c.synced = len(c.ids)
			hc.c.AppendDone(wire.LogCursors, c.tail())
			hc.syncCur = false
			moved = true
		}
		if len(hc.reads) > 0 && s.rng.IntN(3) != 0 {
			reads := hc.reads
			hc.reads = nil
			for _, r := range reads {
				hc.c.ReadDone(r.Tag, d.log(r.Log).read(r.From, r.BytesMax), nil)
			}
			moved = true
		}
		if moved {
			s.drive(n, si)
		}
	}
}

// tickNode ticks every copy of a running node and sends its heartbeat when due.
func (s *Sim) tickNode(n *node) {
	for si, hc := range n.copies {
		if hc != nil && s.err == nil {
			if hc.c.Ticking() { // as the shard host does: a copy that times nothing is not ticked
				hc.c.Tick()
			}
			s.drive(n, si)
			s.tickQuorum(n, si, hc)
		}
	}
	if s.now%heartbeatTicks == uint64(n.id)%heartbeatTicks {
		s.sendHeartbeat(n)
	}
}

// sendHeartbeat publishes every copy's durable tails to the metadata primary.
func (s *Sim) sendHeartbeat(n *node) {
	to := s.meta.node
	if to == 0 {
		return
	}
	var tails []wire.CopyTail
	for si, hc := range n.copies {
		if hc == nil {
			continue
		}
		role := wire.RoleSealed
		switch hc.c.Role() {
		case stream.RoleOpening:
			continue
		case stream.RoleOwner:
			role = wire.RoleOwner
		case stream.RoleFollower:
			role = wire.RoleFollower
		}
		var flags wire.CopyFlags
		if hc.c.Restarted() {
			flags = wire.CopyOwnerRestarted
		}
		d := n.disks[si]
		if d.logFailed() != wire.LogFailNone {
			flags |= wire.CopyLogFailed
		}
		st := s.strs[si].st
		tails = append(tails, wire.CopyTail{Stream: st.ID, Incarnation: st.Incarnation, Epoch: hc.asg.Epoch,
			RecordTail: d.rec().durableTail(), CursorTail: d.cur().durableTail(), Role: role, Flags: flags,
			Cause: d.logFailed()})
	}
	tails = s.staleTails(n, tails)
	slices.SortFunc(tails, func(a, b wire.CopyTail) int { return int(a.Stream) - int(b.Stream) })
	n.hbSeq++
	frame := wire.AppendNodeHeartbeat(nil, wire.From{Cluster: 1, Node: n.id}, &wire.NodeHeartbeat{Sequence: n.hbSeq}, tails)
	s.send(envelope{from: n.id, to: to, kind: kindHeartbeat, frame: frame})
}

// onStreamFrame steps the copy a prepare or prepare-ok is for.
func (s *Sim) onStreamFrame(n *node, e envelope) {
	si, ok := s.streamIndex(e.stream)
	if !ok || n.copies[si] == nil {
		return
	}
	h, body, err := wire.ParseFrame(e.frame)
	if err != nil {
		s.fail("frame from %d does not parse: %v", e.from, err)
		return
	}
	if s.onCommitFrame(n, e, &h, body) {
		return
	}
	m := stream.Message{From: e.from}
	if e.kind == kindPrepare {
		m.Kind = stream.KindPrepare
		m.Prepare, err = wire.DecodeStreamPrepare(&h, body)
	} else {
		m.Kind = stream.KindPrepareOK
		m.PrepareOK, m.Epochs, err = wire.DecodeStreamPrepareOK(&h, body)
	}
	if err != nil {
		s.fail("frame from %d does not decode: %v", e.from, err)
		return
	}
	n.copies[si].c.Step(&m)
	s.drive(n, si)
}

// onRequest steps the copy a client request is for; a node without one answers unknown stream.
func (s *Sim) onRequest(n *node, e envelope) {
	si, ok := s.streamIndex(e.stream)
	if !ok {
		return
	}
	if n.copies[si] == nil {
		r := stream.Reply{Client: e.request.Client, Kind: stream.ReplyError}
		r.Error = wire.ErrorReply{Stream: e.stream, Code: wire.CodeUnknownStream}
		s.send(envelope{from: n.id, to: clientNode, kind: kindReply, stream: e.stream, reply: r})
		return
	}
	m := e.request
	n.copies[si].c.Step(&m)
	s.drive(n, si)
}

// onAssign applies an assignment as a broker does: a stale one is ignored; otherwise the copy is cut
// onto meta.CutPoint at the assignment's epoch, the assignment is recorded durably and the copy
// reopened in its new role. A member that held no copy starts an empty one.
func (s *Sim) onAssign(n *node, e envelope) {
	si, ok := s.streamIndex(e.stream)
	if !ok {
		return
	}
	w := e.assign.Assignment
	a := meta.Assignment{Epoch: w.Epoch, Owner: w.Owner, Followers: slices.Clone(w.Followers[:w.FollowerCount]),
		Policy: meta.Policy{Kind: meta.PolicyKind(w.PolicyKind), Count: w.PolicyCount}}
	if !a.Includes(n.id) {
		return
	}
	if _, ok := s.staleOf(n, si); ok {
		return // the copy of another incarnation takes it, and drops it (the controller resends)
	}
	d := n.disks[si]
	if d == nil {
		d = &disk{}
		n.disks[si] = d
		if a.Epoch > 1 {
			s.counts.empty++
		}
	}
	if d.fence > a.Epoch || (d.applied && d.asg.Epoch >= a.Epoch) || d.logFailed() != wire.LogFailNone {
		return // stale, or the copy's log failed: it applies the assignment once it healed
	}
	if hc := n.copies[si]; hc != nil && hc.c.Restarted() && a.Owner == n.id && d.fence < a.Epoch &&
		s.opt.Variant != RestartedOwnerKept {
		// An owner that reopened within its epoch may have lost records a follower holds: it stays
		// owner only through a recovery, whose seal at a's epoch reaches it first (engine/stream).
		s.logf("node %d: restarted owner of stream %d refuses epoch %d without a seal", n.id, e.stream, a.Epoch)
		return
	}
	starts := make([]meta.HistoryStart, len(e.assign.Starts))
	for i, h := range e.assign.Starts {
		starts[i] = meta.HistoryStart{Epoch: h.Epoch, Node: h.Node, RecordStart: h.RecordStart, CursorStart: h.CursorStart}
	}
	d.syncAll() // the old copy's queued appends complete before it is reopened
	recBefore, curBefore := d.rec().tail(), d.cur().tail()
	if cut, ok := meta.CutPoint(n.id, d.metaEpochs(), a.Epoch, starts); ok {
		s.chk.onCut(s, n, si, d.cut(cut))
	}
	if hc := n.copies[si]; hc != nil && cutChanged(recBefore, curBefore, d) {
		hc.cutSinceOpen = true
	}
	if a.Copies() < int(s.strs[si].st.Copies) && a.Owner == n.id {
		s.counts.shrunken++
	}
	d.asg, d.starts, d.applied = a, starts, true
	s.logf("node %d applies stream %d epoch %d owner %d followers %v (tail %d)", n.id, e.stream, a.Epoch, a.Owner,
		a.Followers, d.rec().tail())
	if s.opt.NoInPlace || !s.reassignInPlace(n, si, a, starts) {
		s.openCopy(n, si)
	}
}

// onSeal carries out a seal as one storage operation: the queued appends complete, the fence is
// written at the seal's epoch, the copy is cut onto the history starts below the fence, and the reply
// carries the tails after the cut. A seal at or below the copy's applied epoch is stale and ignored;
// one at the same fence again (a reseal, or a newer transition taking over) is carried out again.
func (s *Sim) onSeal(n *node, e envelope) {
	si, ok := s.streamIndex(e.stream)
	if !ok {
		return
	}
	m := e.seal.Seal
	d := n.disks[si]
	reply := wire.StreamSealReply{Stream: m.Stream, Incarnation: m.Incarnation, FenceEpoch: m.FenceEpoch,
		TransitionID: m.TransitionID}
	if _, stale := s.staleOf(n, si); d == nil || stale {
		reply.Status = wire.SealNoCopy // none, or only one of another incarnation
		s.send(envelope{from: n.id, to: e.from, kind: kindSealReply, stream: m.Stream, sealReply: reply})
		return
	}
	if d.fence > m.FenceEpoch || (d.applied && d.asg.Epoch >= m.FenceEpoch) || d.sealFenceFails() {
		return
	}
	d.syncAll() // the sealed copy serves nothing more; it is reopened from the disk on its next assignment
	if hc := n.copies[si]; hc != nil {
		hc.reads = nil
	}
	d.fence = m.FenceEpoch
	starts := make([]meta.HistoryStart, len(e.seal.Starts))
	for i, h := range e.seal.Starts {
		starts[i] = meta.HistoryStart{Epoch: h.Epoch, Node: h.Node, RecordStart: h.RecordStart, CursorStart: h.CursorStart}
	}
	if s.opt.Variant != RawTailSeal {
		recBefore, curBefore := d.rec().tail(), d.cur().tail()
		if cut, ok := meta.CutPoint(n.id, d.metaEpochs(), m.FenceEpoch, starts); ok {
			s.chk.onCut(s, n, si, d.cut(cut))
		}
		if hc := n.copies[si]; hc != nil && cutChanged(recBefore, curBefore, d) {
			hc.cutSinceOpen = true
		}
	}
	if hc := n.copies[si]; hc != nil {
		hc.c.Sealed(m.FenceEpoch)
		s.drive(n, si)
	}
	reply.Status = wire.SealSealed
	reply.RecordTail, reply.CursorTail = d.rec().tail(), d.cur().tail()
	if s.opt.Variant == NoPrefixGuard && len(starts) > 0 {
		reply.RecordTail = max(reply.RecordTail, starts[len(starts)-1].RecordStart)
	}
	s.logf("node %d sealed stream %d at %d (transition %d): tails %d/%d", n.id, m.Stream, m.FenceEpoch,
		m.TransitionID, reply.RecordTail, reply.CursorTail)
	s.send(envelope{from: n.id, to: e.from, kind: kindSealReply, stream: m.Stream, sealReply: reply})
}

// kill is a power loss of node n: its copies are gone, its disks keep what was synced and a random
// prefix of the rest. It restarts at restartAt (0: when the caller restarts it).
func (s *Sim) kill(n *node, restartAt uint64) {
	if !n.up {
		return
	}
	s.logf("node %d killed (restart at %d)", n.id, restartAt)
	n.up, n.pausedUntil, n.restartAt = false, 0, restartAt
	clear(n.copies)
	for _, d := range n.disks {
		if d != nil {
			d.powerLoss(s.rng, !n.loseUnsynced)
		}
	}
	s.meta.nodeDown(s, n.id)
}

// restart brings node n back: every copy reopens at the assignment its disk last applied.
func (s *Sim) restart(n *node) {
	if n.up {
		return
	}
	s.logf("node %d restarts", n.id)
	n.up, n.restartAt = true, 0
	for si, d := range n.disks {
		if d != nil && d.applied && s.err == nil {
			s.openCopy(n, si)
		}
	}
}

func (s *Sim) restartDue() {
	for _, n := range s.nodes[1:] {
		if !n.up && n.restartAt != 0 && n.restartAt <= s.now {
			s.restart(n)
		}
	}
}
