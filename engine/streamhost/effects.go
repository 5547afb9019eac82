package streamhost

import (
	"errors"
	"fmt"

	"github.com/ringstream/ringstream/engine/stream"
	"github.com/ringstream/ringstream/internal/assert"
	"github.com/ringstream/ringstream/segment"
	"github.com/ringstream/ringstream/shard/heartbeat"
	"github.com/ringstream/ringstream/wire"
)

// carryOut takes the copy's Ready and carries out its effects in engine/stream's order: log epochs,
// appends, the cursor commit, reads, prepares and prepare-oks, replies; then it keeps the heartbeat
// state for the shard. It never drives the ring: everything is queued, and the shard host's turn
// hook flushes the group commits.
func (cg *copyGroup) carryOut() {
	cg.wake()
	if cg.c == nil || cg.state != stateServing {
		return
	}
	sh := cg.h
	cg.syncHead()
	fx := cg.c.Ready()
	for _, e := range fx.Epochs {
		cg.epochWait = true
		cg.epochEntry = segment.EpochEntry{Epoch: uint64(e.Epoch), RecordStart: e.RecordStart, CursorStart: e.CursorStart}
		cg.tryEpoch()
	}
	ob, appendErr := cg.appendAll(fx)
	failed := appendErr != nil
	if fx.SyncCursors && !failed {
		cg.seg.SyncCursors()
	}
	for _, rd := range fx.Reads {
		cg.startRead(readReq{log: rd.Log, tag: rd.Tag, from: rd.From, bytesMax: rd.BytesMax})
	}
	for i := range fx.Prepares {
		cg.sendPrepare(&fx.Prepares[i], ob, failed)
	}
	from := wire.From{Cluster: sh.h.cfg.Cluster, Node: sh.h.cfg.Node}
	for i := range fx.PrepareOKs {
		ok := &fx.PrepareOKs[i]
		sh.scratch = wire.AppendStreamPrepareOK(sh.scratch[:0], from, &ok.Msg, ok.Epochs)
		if sh.send.SendFrame(ok.To, sh.scratch) != nil {
			sh.stats.SendsRefused++ // the owner's resend timer asks again
		} else if ok.Msg.Log == wire.LogRecords && ok.Msg.Status == wire.PrepareAppended && sh.tr.On() {
			sh.tr.FollowerAnswered(cg.spec.Stream, ok.Msg.RecordTail, sh.tr.Now())
		}
	}
	if f := sh.h.cfg.Replies; f != nil {
		for i := range fx.Replies {
			r := &fx.Replies[i]
			if r.Kind == stream.ReplyProduce && sh.tr.On() {
				sh.tr.OwnerConfirmed(cg.spec.Stream, r.Produce.BaseOffset, sh.tr.Now())
			}
			f(cg.spec.Stream, r)
		}
	}
	for i, b := range cg.fresh { // the sends above hold their own references
		sh.pool.unref(b)
		cg.fresh[i] = nil
	}
	cg.fresh = cg.fresh[:0]
	if ob != nil {
		sh.pool.unref(ob) // the held list and the sends keep theirs
	}
	cg.role, cg.commit, cg.holders = fx.Heartbeat.Role, fx.Heartbeat.Commit, cg.holderSet(fx.Heartbeat.Holders)
	cg.ticking = cg.c.Ticking()
	if failed {
		cg.storageFailed(appendErr)
	}
	if cg.fail.active {
		cg.closeForHeal() // the refusals of the failure went out above
	}
}

// appendAll queues the Ready's appends. The owner's record batches are encoded once, into one
// buffer for the whole Ready, and appended from it (segment.Copy.AppendEncoded): the sends of
// SourceAppends prepares use the same bytes. That buffer is returned with a reference for the
// caller, and another kept on the held list until the log reports it durable. A refused append
// stops the rest and is returned: the caller fails the copy (a refused append cannot be retried: the
// protocol copy counts it appended; see the package doc for which refusals can happen).
func (cg *copyGroup) appendAll(fx *stream.Effects) (ob *buffer, err error) {
	sh := cg.h
	size := 0
	for i := range fx.Appends {
		if a := &fx.Appends[i]; a.Log == wire.LogRecords && a.Encoded == nil {
			size += segment.BatchHeaderSize + len(a.Payload)
		}
	}
	if size > 0 {
		if n := len(cg.held); n > 0 && cap(cg.held[n-1].b)-len(cg.held[n-1].b) >= size {
			ob = cg.held[n-1] // go on filling the newest held buffer: what it holds stays put
			ob.refs++
		} else {
			ob = sh.pool.get(size)
			ob.refs++ // one for the held list, one for this Ready
			cg.held = append(cg.held, ob)
		}
		size += len(ob.b)
	}
	cg.spanOf = cg.spanOf[:0]
	var now int64 // stage tracing's clock read, taken at the first traced append
	for i := range fx.Appends {
		a := &fx.Appends[i]
		cg.token++
		var base uint64
		switch {
		case a.Log == wire.LogRecords && a.Encoded == nil:
			h := segment.BatchHeader{BaseOffset: a.Header.BaseOffset, RecordCount: a.Header.Count, Epoch: uint64(a.Header.Epoch),
				ProducerID: a.Header.ProducerID, ProducerSeq: a.Header.Sequence, Codec: a.Header.Codec,
				Version:        uint16(a.Header.Format),
				FirstTimestamp: sh.nowMs, MaxTimestamp: sh.nowMs}
			from := len(ob.b)
			if a.PayloadSummed {
				ob.b = segment.AppendBatchSummed(ob.b, &h, a.Payload, a.PayloadSum)
			} else {
				ob.b = segment.AppendBatch(ob.b, &h, a.Payload)
			}
			assert.True(cap(ob.b) >= size, "streamhost: owner buffer grew")
			ob.spans = append(ob.spans, span{base: h.BaseOffset, end: h.NextOffset(), from: from, to: len(ob.b)})
			ob.end = h.NextOffset()
			cg.spanOf = append(cg.spanOf, len(ob.spans)-1)
			base, err = cg.seg.AppendEncoded(cg.token, ob.b[from:])
			if err == nil && sh.tr.On() {
				if now == 0 {
					now = sh.tr.Now() // one clock read for the Ready: its appends and prepares are queued together
				}
				sh.tr.OwnerAppended(cg.spec.Stream, h.ProducerID, h.ProducerSeq, h.BaseOffset, h.NextOffset(),
					cg.Quorum(), now)
			}
		case a.Log == wire.LogRecords:
			cg.spanOf = append(cg.spanOf, -1)
			base, err = cg.seg.AppendEncoded(cg.token, a.Encoded)
		case a.Encoded == nil && a.CursorDelete:
			cg.spanOf = append(cg.spanOf, -1)
			base, err = cg.seg.DeleteCursor(cg.token, uint64(a.Header.Epoch), string(a.CursorName))
		case a.Encoded == nil:
			cg.spanOf = append(cg.spanOf, -1)
			base, err = cg.seg.CommitCursor(cg.token, uint64(a.Header.Epoch), string(a.CursorName), a.CursorOffset)
		default:
			cg.spanOf = append(cg.spanOf, -1)
			base, err = cg.seg.AppendCursorEncoded(cg.token, a.Encoded)
		}
		if err == nil && base != a.Header.BaseOffset {
			err = fmt.Errorf("%w: appended at %d, the copy asked for %d", segment.ErrOffsetOrder, base, a.Header.BaseOffset)
		}
		if err != nil {
			return ob, fmt.Errorf("streamhost: append at %d refused: %w", a.Header.BaseOffset, err)
		}
	}
	return ob, nil
}

// sendPrepare sends one prepare: from the Ready's encoded appends, from what waits for the group
// commit, or from a read's data (or an empty probe, through the outbox).
func (cg *copyGroup) sendPrepare(p *stream.Prepare, ob *buffer, failed bool) {
	sh := cg.h
	msg := p.Msg
	switch p.Source {
	case stream.SourceAppends:
		if failed {
			return
		}
		first, last := cg.spanOf[p.AppendFrom], cg.spanOf[p.AppendTo-1]
		assert.True(ob != nil && first >= 0 && last >= first, "streamhost: prepare of appends that are not record batches")
		msg.Batches = ob.b[ob.spans[first].from:ob.spans[last].to]
		if sh.sendData(p.To, &msg, ob) {
			sh.stats.AppendBytes += uint64(len(msg.Batches))
		}
	case stream.SourceUnsynced:
		if !failed {
			cg.sendUnsynced(p.To, &msg)
		}
	default:
		if len(msg.Batches) == 0 {
			sh.scratch = wire.AppendStreamPrepare(sh.scratch[:0], wire.From{Cluster: sh.h.cfg.Cluster, Node: sh.h.cfg.Node}, &msg)
			if sh.send.SendFrame(p.To, sh.scratch) != nil {
				sh.stats.SendsRefused++
			}
			return
		}
		sh.sendData(p.To, &msg, cg.fresh...)
	}
}

// sendUnsynced sends the records from msg.BaseOffset (the durable tail) to the appended tail, which
// only the held buffers have. When they sit in one buffer it is sent as it is; across buffers they
// are copied into one (a follower catching up past the durable tail, once).
func (cg *copyGroup) sendUnsynced(to uint16, msg *wire.StreamPrepare) {
	sh := cg.h
	var first *buffer
	start, n := -1, 0
	for _, b := range cg.held {
		for _, s := range b.spans {
			if s.base < msg.BaseOffset {
				continue
			}
			if first == nil {
				first, start = b, s.from
			}
			n += s.to - s.from
		}
	}
	assert.True(first != nil && first.spans[0].base <= msg.BaseOffset, "streamhost: unsynced send without the held bytes")
	if first == cg.held[len(cg.held)-1] {
		msg.Batches = first.b[start : start+n]
		sh.sendData(to, msg, first)
		return
	}
	joined := sh.pool.get(n)
	for _, b := range cg.held {
		for _, s := range b.spans {
			if s.base >= msg.BaseOffset {
				joined.b = append(joined.b, b.b[s.from:s.to]...)
			}
		}
	}
	sh.stats.UnsyncedCopies++
	msg.Batches = joined.b
	sh.sendData(to, msg, joined)
	sh.pool.unref(joined)
}

// readReq is a read the protocol copy asked for.
type readReq struct {
	log      wire.LogKind
	tag      uint64
	from     uint64
	bytesMax int
}

// startRead starts a read the copy asked for. Busy is not broken: a log whose read slots are all in
// use (ErrBackpressure) keeps it waiting, in order, until a slot frees; any other refusal goes to the
// copy (a fetch below the head or past the tail is refused, a follower's catch-up reads again).
func (cg *copyGroup) startRead(rd readReq) {
	if len(cg.readWait) > 0 {
		cg.readWait = append(cg.readWait, rd) // behind the ones waiting already
		return
	}
	switch err := cg.tryRead(rd); {
	case err == nil:
	case errors.Is(err, segment.ErrBackpressure):
		cg.readWait = append(cg.readWait, rd)
		cg.h.stats.ReadsQueued++
	default:
		cg.c.ReadDone(rd.tag, nil, err)
		cg.h.markDirty(cg)
	}
}

func (cg *copyGroup) tryRead(rd readReq) error {
	log := cg.seg.Records()
	if rd.log == wire.LogCursors {
		log = cg.seg.Cursors()
	}
	return cg.read(log, rd.tag, rd.from, rd.bytesMax)
}

// startWaitingReads starts the reads waiting for a slot, in order, while the log takes them.
func (cg *copyGroup) startWaitingReads() {
	for len(cg.readWait) > 0 && cg.c != nil && cg.state == stateServing {
		rd := cg.readWait[0]
		err := cg.tryRead(rd)
		if errors.Is(err, segment.ErrBackpressure) {
			return // still no slot
		}
		n := copy(cg.readWait, cg.readWait[1:])
		cg.readWait = cg.readWait[:n]
		if err != nil {
			cg.c.ReadDone(rd.tag, nil, err)
			cg.h.markDirty(cg)
		}
	}
}

// endWaitingReads answers the reads still waiting when the protocol copy stops (an assignment, a
// failure): the copy takes them as failed reads (a fetch refused, a catch-up read again later).
func (cg *copyGroup) endWaitingReads() {
	waiting := cg.readWait
	cg.readWait = nil
	for _, rd := range waiting {
		if cg.c != nil {
			cg.c.ReadDone(rd.tag, nil, fmt.Errorf("streamhost: read not started: %w", segment.ErrBackpressure))
			cg.h.markDirty(cg)
		}
	}
}

// holderSet turns the followers that hold the confirmed tail into member indexes.
func (cg *copyGroup) holderSet(nodes []uint16) heartbeat.Members {
	var m heartbeat.Members
	for _, n := range nodes {
		for _, mem := range cg.members {
			if mem.Node == n {
				m |= 1 << mem.Index
			}
		}
	}
	return m
}

// startRetain runs retention by the spec's bytes and age, never past the copy's RetainLimit.
func (cg *copyGroup) startRetain() {
	sp := &cg.spec
	if cg.retain || (sp.RetainBytes == 0 && sp.RetainAgeMs == 0) {
		return
	}
	if cg.seg.RetainBelow(tagRetain, cg.h.nowMs, sp.RetainBytes, sp.RetainAgeMs, cg.c.RetainLimit()) == nil {
		cg.retain = true
	}
}
