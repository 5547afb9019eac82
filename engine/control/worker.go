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
	waitFailedAhead          // fewer than R healthy answers, and a failed copy answered past every healthy one
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
	ahead       uint16            // the failed copy ahead of every healthy answer, when wait is waitFailedAhead
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
	if w.elapsed+1 == c.cfg.SealTimeoutTicks {
		c.markDue(w) // the copies that have not answered are no longer waited for
	}
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
		c.markDue(w)
	case wire.SealNoCopy:
		// A node that lost its copy holds no record: it is not a sealed copy and never counts to R.
		w.answers[j] = answer{noCopy: true}
		c.stats.SealRepliesIgnored++
		c.markDue(w)
	default:
		c.stats.SealRepliesIgnored++
	}
}

// decide commits the recovery once it can: at least R answers; every live copy answered or the seal
// timeout passed; and the furthest answer (record tail, then cursor tail, then lowest node id) at or
// past the latest history start, read from the same starts snapshot whose version the commit's guard
// checks. One guarded CommitRecovery then sets the assignment (stamped with the recovery's policy),
// clears the recovery and appends the new owner's history start.
//
// A copy whose node's heartbeat flags its log failed (wire.CopyLogFailed) is never waited for, and
// never promoted: it can serve nothing. Its sealed answer (a seal reply, which a host sends only once
// the fence is durable, so the copy's tail can no longer grow from the old owner) still counts toward
// R, but only as evidence: with fewer than R healthy answers, the recovery may promote the furthest
// healthy copy h only if no failed answer is past h's record tail. The proof, with S the sealed
// answers counted (|S| >= R) and H the healthy ones among them:
//   - Every confirmed record is on W copies of the old assignment, the owner included, and any W
//     copies meet any R copies (W + R = E + 1), so each confirmed record is on some copy of S.
//   - Every copy's log is a prefix of one history once the seal cut it onto the starts (the stream-
//     failover spec's argument), so a copy with a record tail t holds every record any copy of S holds
//     below t.
//   - If h is the furthest of H and every failed answer's record tail is at most h's, h's tail is the
//     furthest of S, so h holds every confirmed record. If a failed answer is past it, the records
//     between may be confirmed (on the old owner and that copy) and on no healthy copy: promoting h
//     could lose them, and promoting the failed copy serves nothing, so the recovery waits for it to
//     heal (attention), as it waits with fewer than R answers.
//   - With at least R healthy answers the first point holds for H alone, and the failed answers are
//     left out of the sealed set (they stay sealed until an assignment includes them again).
//
// A heartbeat flag alone is never an answer: published tails are not fenced, and a copy that heals
// could take more records from the old owner after it published them.
func (c *Controller) decide(w *work) {
	if c.proposing(w.stream) {
		w.wait = waitProposal
		return
	}
	healthy, failedAnswers, liveUnanswered := 0, 0, 0
	for i, a := range w.answers {
		_, failed := c.logFailed(w.copies[i], w.stream, w.incarnation)
		switch {
		case a.sealed && failed:
			failedAnswers++
		case a.sealed:
			healthy++
		case c.nodeAlive(w.copies[i]) && !a.noCopy && !failed:
			liveUnanswered++
		}
	}
	if healthy+failedAnswers < w.threshold {
		w.wait = waitFewerThanR
		return
	}
	if liveUnanswered > 0 && w.elapsed < c.cfg.SealTimeoutTicks {
		w.wait = waitAnswers
		return
	}
	best := w.furthest(func(i int) bool {
		_, failed := c.logFailed(w.copies[i], w.stream, w.incarnation)
		return !failed
	})
	useFailed := healthy < w.threshold
	if useFailed {
		if ahead, ok := w.failedAhead(c, best); ok {
			w.wait, w.ahead = waitFailedAhead, ahead
			return
		}
	}
	starts, _ := c.state.Starts(w.stream)
	if latest, ok := starts.Latest(); ok && w.answers[best].recordTail < latest.RecordStart {
		w.wait, w.start = waitBelowPrefix, latest
		return
	}
	sealed := make([]uint16, 0, healthy+failedAnswers)
	for i, a := range w.answers {
		_, failed := c.logFailed(w.copies[i], w.stream, w.incarnation)
		if a.sealed && (useFailed || !failed) {
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

// failedAhead reports a sealed copy flagged failed whose record tail is past the answer at best
// (-1: no healthy answer, so any failed answer is ahead).
func (w *work) failedAhead(c *Controller, best int) (uint16, bool) {
	for i, a := range w.answers {
		if !a.sealed {
			continue
		}
		if _, failed := c.logFailed(w.copies[i], w.stream, w.incarnation); !failed {
			continue
		}
		if best < 0 || a.recordTail > w.answers[best].recordTail {
			return w.copies[i], true
		}
	}
	return 0, false
}

// furthest returns the index of the sealed copy, among those eligible, with the highest record tail,
// then the highest cursor tail, then the lowest node id (copies are ascending, so the first of
// equals); -1 when no eligible copy answered.
func (w *work) furthest(eligible func(i int) bool) int {
	best := -1
	for i, a := range w.answers {
		if !a.sealed || !eligible(i) {
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
