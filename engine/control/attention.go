package control

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/wire"
)

// AttentionKind names why a stream waits for an operator or a node.
type AttentionKind uint8

const (
	// AttentionFewerThanR: the recovery has fewer than R sealed answers after the seal timeout.
	AttentionFewerThanR AttentionKind = 1
	// AttentionBelowConfirmedPrefix: no copy known to hold the confirmed prefix (at or past the latest
	// history start) can answer; the recovery waits for one, or for an operator to accept the loss.
	AttentionBelowConfirmedPrefix AttentionKind = 2
	// AttentionOneCopyOwnerLost: a stream with one copy lost its owner and waits for that node.
	AttentionOneCopyOwnerLost AttentionKind = 3
	// AttentionOwnerSilentButAlive: a follower reports the owner silent while the controller still
	// sees the owner's node alive.
	AttentionOwnerSilentButAlive AttentionKind = 4
	// AttentionCopyLogFailed: a node's heartbeat flags its copy's log failed (wire.CopyLogFailed), with
	// the cause: the copy confirms and serves nothing until it heals. An owner is failed over, a
	// follower taken out of the assignment (and not waited for by a recovery).
	AttentionCopyLogFailed AttentionKind = 5
	// AttentionFailedCopyAhead: a recovery has fewer than R healthy answers, and the sealed answer of a
	// copy whose log failed is past every healthy one: it may hold confirmed records no healthy copy
	// holds, so the recovery waits for it to heal (or for an operator to accept the loss).
	AttentionFailedCopyAhead AttentionKind = 6
)

func (k AttentionKind) String() string {
	switch k {
	case AttentionFewerThanR:
		return "fewer_than_r"
	case AttentionBelowConfirmedPrefix:
		return "below_confirmed_prefix"
	case AttentionOneCopyOwnerLost:
		return "one_copy_owner_lost"
	case AttentionOwnerSilentButAlive:
		return "owner_silent_but_alive"
	case AttentionCopyLogFailed:
		return "copy_log_failed"
	case AttentionFailedCopyAhead:
		return "failed_copy_ahead"
	default:
		return fmt.Sprintf("attention(%d)", uint8(k))
	}
}

// Attention is one thing that waits for an operator or a node, with why.
type Attention struct {
	Kind        AttentionKind
	Stream      uint64
	Incarnation uint32
	Recovery    uint64 // the pending recovery, when there is one
	Node        uint16 // the node waited for (one copy), or the silent owner, or the reporting follower
	Answers     int    // sealed answers so far (fewer than R)
	Needed      int    // R (fewer than R)
	Start       meta.HistoryStart
	Cause       wire.LogFailCause // why the copy's log failed (copy_log_failed, failed_copy_ahead)
	Why         string
}

// silentReport is a follower's report that the owner of stream at epoch has gone silent.
type silentReport struct {
	stream      uint64
	incarnation uint32
	epoch       uint32
	follower    uint16
	ticksLeft   uint32
}

// OnOwnerSilent records a follower's report that the owner of stream at epoch sent it nothing for its
// timeout (a heartbeat entry flagged wire.CopyOwnerSilent reports it). It is listed under attention while the controller still sees the owner alive, for one
// liveness timeout unless reported again.
func (c *Controller) OnOwnerSilent(follower uint16, stream uint64, incarnation uint32, epoch uint32) {
	if !c.primary {
		return
	}
	r := silentReport{stream: stream, incarnation: incarnation, epoch: epoch, follower: follower,
		ticksLeft: c.cfg.NodeLivenessTimeoutTicks}
	i, ok := slices.BinarySearchFunc(c.reports, r, compareReports)
	if ok {
		if r.incarnation == c.reports[i].incarnation && r.epoch < c.reports[i].epoch {
			return // a late report about an older epoch
		}
		c.reports[i] = r
		return
	}
	c.reports = slices.Insert(c.reports, i, r)
}

func compareReports(a, b silentReport) int {
	return cmp.Or(cmp.Compare(a.stream, b.stream), cmp.Compare(a.follower, b.follower))
}

func (c *Controller) tickReports() {
	kept := c.reports[:0]
	for _, r := range c.reports {
		if r.ticksLeft--; r.ticksLeft > 0 {
			kept = append(kept, r)
		}
	}
	c.reports = kept
}

// Attention appends to dst every wait that needs an operator or a node, in stream order, and returns
// it. It judges from the tails copies publish in their heartbeats and the seal answers, so a wait
// below the confirmed prefix stays quiet while a live copy has published nothing (it may hold the
// prefix). A controller that is not primary lists nothing.
func (c *Controller) Attention(dst []Attention) []Attention {
	if !c.primary {
		return dst
	}
	for _, st := range c.state.Streams() {
		a, _ := c.state.Assignment(st.ID)
		if i, ok := c.workIndex(st.ID); ok {
			dst = c.workAttention(dst, st, a, c.works[i])
		}
		if _, rec := c.state.RecoveryOf(st.ID); !rec && a.Copies() == 1 && !c.nodeAlive(a.Owner) {
			dst = append(dst, Attention{Kind: AttentionOneCopyOwnerLost, Stream: st.ID,
				Incarnation: st.Incarnation, Node: a.Owner, Why: fmt.Sprintf(
					"stream %q has one copy and its owner, node %d, is lost: it waits for that node",
					st.Name, a.Owner)})
		}
		dst = c.silentAttention(dst, st, a)
		dst = c.failedAttention(dst, st, a)
	}
	return dst
}

// failedAttention lists every copy of st that a node's heartbeat flags failed, with its cause and
// what the controller does about it.
func (c *Controller) failedAttention(dst []Attention, st meta.Stream, a meta.Assignment) []Attention {
	for i := range c.nodes {
		n := &c.nodes[i]
		cause, failed := n.logFailed(st.ID, st.Incarnation)
		if !failed {
			continue
		}
		var does string
		switch {
		case a.Owner == n.id && a.Copies() == 1:
			does = "it is the stream's only copy, so the stream waits for it to heal"
		case a.Owner == n.id:
			does = "the stream fails over from it"
		case a.Includes(n.id):
			does = "no recovery waits for it, and it is taken out of the assignment once the other copies " +
				"can seal without it"
		default:
			does = "it is out of the assignment and is placed again once it heals"
		}
		dst = append(dst, Attention{Kind: AttentionCopyLogFailed, Stream: st.ID, Incarnation: st.Incarnation,
			Node: n.id, Cause: cause, Why: fmt.Sprintf(
				"the copy of stream %q on node %d failed its log (%s): it confirms and serves nothing until it heals; %s",
				st.Name, n.id, cause, does)})
	}
	return dst
}

func (c *Controller) workAttention(dst []Attention, st meta.Stream, a meta.Assignment, w *work) []Attention {
	answered := 0
	for _, an := range w.answers {
		if an.sealed {
			answered++
		}
	}
	if answered < w.threshold && w.elapsed >= c.cfg.SealTimeoutTicks {
		var silent []string
		for i, n := range w.copies {
			switch {
			case w.answers[i].sealed:
			case w.answers[i].noCopy:
				silent = append(silent, fmt.Sprintf("node %d (holds no copy)", n))
			case !c.nodeAlive(n):
				silent = append(silent, fmt.Sprintf("node %d (lost)", n))
			case c.failedCause(n, w) != wire.LogFailNone:
				silent = append(silent, fmt.Sprintf("node %d (log failed: %s, not waited for)", n, c.failedCause(n, w)))
			default:
				silent = append(silent, fmt.Sprintf("node %d (alive, not answering)", n))
			}
		}
		dst = append(dst, Attention{Kind: AttentionFewerThanR, Stream: st.ID, Incarnation: st.Incarnation,
			Recovery: w.id, Answers: answered, Needed: w.threshold, Why: fmt.Sprintf(
				"recovery %d of stream %q has %d of the %d sealed copies it needs; it waits for %s",
				w.id, st.Name, answered, w.threshold, strings.Join(silent, ", "))})
	}
	if w.wait == waitFailedAhead {
		cause := c.failedCause(w.ahead, w)
		dst = append(dst, Attention{Kind: AttentionFailedCopyAhead, Stream: st.ID, Incarnation: st.Incarnation,
			Recovery: w.id, Node: w.ahead, Cause: cause, Answers: answered, Needed: w.threshold, Why: fmt.Sprintf(
				"recovery %d of stream %q has fewer than %d healthy sealed copies, and node %d, whose log failed (%s), "+
					"answered past every healthy one: it may hold confirmed records no healthy copy holds, so the "+
					"recovery waits for it to heal (accept the loss to move on)", w.id, st.Name, w.threshold, w.ahead, cause)})
	}
	starts, _ := c.state.Starts(st.ID)
	latest, ok := starts.Latest()
	if !ok || c.prefixReachable(st, w, latest) {
		return dst
	}
	return append(dst, Attention{Kind: AttentionBelowConfirmedPrefix, Stream: st.ID, Incarnation: st.Incarnation,
		Recovery: w.id, Node: latest.Node, Start: latest, Why: fmt.Sprintf(
			"recovery %d of stream %q waits for a copy holding the confirmed prefix: %d records, where node %d "+
				"took over at epoch %d; no copy that can answer holds them (accept the loss to move on)",
			w.id, st.Name, latest.RecordStart, latest.Node, latest.Epoch)})
}

// prefixReachable reports whether some copy may still bring the recovery to the latest start: one that
// answered at or past it, or a live copy that has not answered and either published nothing (it may
// hold the prefix) or published a tail at or past it.
func (c *Controller) prefixReachable(st meta.Stream, w *work, latest meta.HistoryStart) bool {
	for i, node := range w.copies {
		an := w.answers[i]
		if an.sealed {
			if an.recordTail >= latest.RecordStart {
				return true
			}
			continue
		}
		n := c.node(node)
		if n == nil || !n.alive() || an.noCopy {
			continue
		}
		t, published := n.tail(st.ID, st.Incarnation)
		if !published || t.RecordTail >= latest.RecordStart {
			return true
		}
	}
	return false
}

// failedCause is the cause node's heartbeat gives for its copy of w's stream failing, or LogFailNone.
func (c *Controller) failedCause(node uint16, w *work) wire.LogFailCause {
	cause, _ := c.logFailed(node, w.stream, w.incarnation)
	return cause
}

func (c *Controller) silentAttention(dst []Attention, st meta.Stream, a meta.Assignment) []Attention {
	i, _ := slices.BinarySearchFunc(c.reports, silentReport{stream: st.ID}, compareReports)
	for ; i < len(c.reports) && c.reports[i].stream == st.ID; i++ {
		r := c.reports[i]
		if r.incarnation != st.Incarnation || r.epoch != a.Epoch || !c.nodeAlive(a.Owner) {
			continue
		}
		dst = append(dst, Attention{Kind: AttentionOwnerSilentButAlive, Stream: st.ID, Incarnation: st.Incarnation,
			Node: r.follower, Why: fmt.Sprintf(
				"follower node %d reports the owner of stream %q, node %d, silent at epoch %d, "+
					"but the controller still sees node %d alive", r.follower, st.Name, a.Owner, a.Epoch, a.Owner)})
	}
	return dst
}
