package control

import (
	"cmp"
	"slices"

	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/wire"
)

// waitKind says why a recovery worker has not committed yet.
type waitKind uint8

const (
	waitNone        waitKind = iota
	waitAnswers              // fewer than every live copy answered, and the seal timeout has not passed
	waitFewerThanR           // fewer than R copies answered
	waitBelowPrefix          // the furthest answer is below the latest history start
	waitProposal             // the commit (or a refused one's back-off) is out
)

// work is the recovery worker's state for one pending recovery: the transition it seals for and
// the answers it has. Answers count only for this transition (id and fence); late answers are kept.
type work struct {
	stream      uint64
	incarnation uint32
	id          uint64 // the transition id: the recovery's id
	fence       uint32 // the recovery's FromEpoch + 1
	threshold   int    // R of the old assignment
	copies      []uint16
	answers     []answer // parallel to copies
	elapsed     uint32   // ticks since the first seal
	sinceSeal   uint32   // ticks since the last (re)seal
	gen         uint64
	wait        waitKind
	start       meta.HistoryStart // the start the worker waits for, when wait is waitBelowPrefix
}

// answer is one copy's answer to the current transition's seal.
type answer struct {
	sealed     bool
	noCopy     bool // the node answered that it holds no copy
	recordTail uint64
	cursorTail uint64
}

func (c *Controller) workIndex(stream uint64) (int, bool) {
	return slices.BinarySearchFunc(c.works, stream, func(w *work, s uint64) int { return cmp.Compare(w.stream, s) })
}

// resumeWork keeps the worker of rec running, or starts one (a new recovery, a replacement, or a
// recovery this primary found recorded): it seals every copy of the old assignment at once.
func (c *Controller) resumeWork(st meta.Stream, a meta.Assignment, rec meta.Recovery) {
	i, ok := c.workIndex(st.ID)
	if ok && c.works[i].id == rec.ID {
		c.works[i].gen = c.gen
		return
	}
	copies := append(slices.Clone(a.Followers), a.Owner)
	slices.Sort(copies)
	w := &work{
		stream:      st.ID,
		incarnation: st.Incarnation,
		id:          rec.ID,
		fence:       rec.FromEpoch + 1,
		threshold:   int(rec.SealThreshold),
		copies:      copies,
		answers:     make([]answer, len(copies)),
		gen:         c.gen,
	}
	if ok {
		c.works[i] = w // a newer transition: the old answers do not count
	} else {
		c.works = slices.Insert(c.works, i, w)
	}
	c.seal(w, false)
}

// seal sends the transition's seal, carrying the stream's history starts, to every copy (or every
// copy that has not answered).
func (c *Controller) seal(w *work, unansweredOnly bool) {
	w.sinceSeal = 0
	starts, _ := c.state.Starts(w.stream)
	ws := c.fx.wireStarts(starts.List)
	m := wire.StreamSeal{Stream: w.stream, Incarnation: w.incarnation, FenceEpoch: w.fence, TransitionID: w.id}
	for i, n := range w.copies {
		if unansweredOnly && w.answers[i].sealed {
			continue
		}
		c.fx.Seals = append(c.fx.Seals, Seal{To: n, Seal: m, Starts: ws})
		c.stats.Seals++
	}
}

// tickWork advances a worker's timers and seals the copies that have not answered again.
func (c *Controller) tickWork(w *work) {
	w.elapsed = min(w.elapsed+1, c.cfg.SealTimeoutTicks)
	w.sinceSeal++
	if w.sinceSeal < c.cfg.SealRetryTimeoutTicks {
		return
	}
	w.sinceSeal = 0
	if rec, ok := c.state.RecoveryOf(w.stream); !ok || rec.ID != w.id || rec.Status != meta.RecoveryPending {
		return // withdrawn or finished since the last Ready; the next one drops or replaces the worker
	}
	for _, a := range w.answers {
		if !a.sealed {
			c.seal(w, true)
			return
		}
	}
}

// OnSealReply handles a copy's answer to a seal. It counts only for the current transition of the
// stream's recovery (same transition id and fence) and only from a copy of the old assignment; an
// answer that arrives after the seal timeout is kept like any other.
func (c *Controller) OnSealReply(from uint16, m wire.StreamSealReply) {
	i, ok := c.workIndex(m.Stream)
	if !c.primary || !ok {
		c.stats.SealRepliesIgnored++
		return
	}
	w := c.works[i]
	j := slices.Index(w.copies, from)
	if j < 0 || m.Incarnation != w.incarnation || m.TransitionID != w.id || m.FenceEpoch != w.fence {
		c.stats.SealRepliesIgnored++
		return
	}
	switch m.Status {
	case wire.SealSealed:
		w.answers[j] = answer{sealed: true, recordTail: m.RecordTail, cursorTail: m.CursorTail}
		c.stats.SealReplies++
	case wire.SealNoCopy:
		// A node that lost its copy holds no record: it is not a sealed copy and never counts to R.
		w.answers[j] = answer{noCopy: true}
		c.stats.SealRepliesIgnored++
	default:
		c.stats.SealRepliesIgnored++
	}
}

// decide commits the recovery once it can: at least R answers; every live copy answered or the seal
// timeout passed; and the furthest answer (record tail, then cursor tail, then lowest node id) at or
// past the latest history start, read from the same starts snapshot whose version the commit's guard
// checks. One guarded CommitRecovery then sets the assignment (stamped with the recovery's policy),
// clears the recovery and appends the new owner's history start.
func (c *Controller) decide(w *work) {
	if c.proposing(w.stream) {
		w.wait = waitProposal
		return
	}
	answered, liveUnanswered := 0, 0
	for i, a := range w.answers {
		switch {
		case a.sealed:
			answered++
		case c.nodeAlive(w.copies[i]) && !a.noCopy:
			liveUnanswered++
		}
	}
	if answered < w.threshold {
		w.wait = waitFewerThanR
		return
	}
	if liveUnanswered > 0 && w.elapsed < c.cfg.SealTimeoutTicks {
		w.wait = waitAnswers
		return
	}
	best := w.furthest()
	starts, _ := c.state.Starts(w.stream)
	if latest, ok := starts.Latest(); ok && w.answers[best].recordTail < latest.RecordStart {
		w.wait, w.start = waitBelowPrefix, latest
		return
	}
	sealed := make([]uint16, 0, answered)
	for i, a := range w.answers {
		if a.sealed {
			sealed = append(sealed, w.copies[i])
		}
	}
	w.wait = waitProposal
	c.propose(w.stream, meta.CommitRecovery{
		Stream:                w.stream,
		Incarnation:           w.incarnation,
		Recovery:              w.id,
		ExpectedEpoch:         w.fence - 1,
		ExpectedStartsVersion: starts.Version,
		Owner:                 w.copies[best],
		RecordTail:            w.answers[best].recordTail,
		CursorTail:            w.answers[best].cursorTail,
		Sealed:                sealed,
	})
}

// furthest returns the index of the sealed copy with the highest record tail, then the highest cursor
// tail, then the lowest node id (copies are ascending, so the first of equals). At least one copy has
// answered.
func (w *work) furthest() int {
	best := -1
	for i, a := range w.answers {
		if !a.sealed {
			continue
		}
		if best < 0 {
			best = i
			continue
		}
		b := w.answers[best]
		if a.recordTail > b.recordTail || a.recordTail == b.recordTail && a.cursorTail > b.cursorTail {
			best = i
		}
	}
	return best
}
