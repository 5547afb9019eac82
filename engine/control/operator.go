package control

import (
	"errors"
	"fmt"
	"slices"

	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/wire"
)

// Sentinel errors of the operator actions, one meaning each.
var (
	// ErrNotPrimary: the controller is not running on the metadata primary.
	ErrNotPrimary = errors.New("control: not the metadata primary")
	// ErrNoStream: no live stream has that id.
	ErrNoStream = errors.New("control: no such stream")
	// ErrNoPendingRecovery: the stream has no pending recovery to accept or withdraw.
	ErrNoPendingRecovery = errors.New("control: no pending recovery")
	// ErrOwnerTailsUnknown: the node asked to own the stream has neither answered the pending
	// recovery's seal nor published its tails to this controller, so where its history starts is
	// unknown.
	ErrOwnerTailsUnknown = errors.New("control: the new owner's tails are unknown")
	// ErrOwnerCannotServe: the node asked to own the stream has not answered the pending recovery's
	// seal and its heartbeat says its copy cannot take the role: its log failed
	// (wire.CopyLogFailed), or it reopened within its own epoch (wire.CopyOwnerRestarted) and applies
	// no assignment that keeps it owner until a seal reached it, which an accepted loss never sends.
	ErrOwnerCannotServe = errors.New("control: the new owner's copy cannot serve")
)

// AcceptOwnerLoss builds the operator's op that moves stream to owner without a seal (owner 0 means
// the recovery's proposed owner). The history start it carries is owner's tails from its answer to the
// pending recovery's seal when it answered (exact: a sealed copy appends nothing until its next
// assignment), else its tails as it last published them in a heartbeat to this controller (which can
// only lag its log, so a returning copy may cut lower than needed and fetch again).
//
// An owner that has not answered the seal and whose heartbeat flags its copy failed or restarted
// within its epoch is refused with ErrOwnerCannotServe: it would not serve the assignment, and no
// recovery would be left to end the wait. An owner that did neither is refused with
// ErrOwnerTailsUnknown. meta accepts a loss without a start,
// but the new epoch then has no recorded start, and a copy that returns from an older epoch is not
// cut onto it: it keeps a suffix the new owner overwrote, follows with it, and a later recovery can
// promote it over the records the new owner confirmed (streamsim seed 322682 found this). The operator
// waits for the node's heartbeat or seal answer, or names another owner. The host proposes the op and
// reports the result to the operator; meta checks that owner is a proposed member and the recovery is
// still the pending one.
func (c *Controller) AcceptOwnerLoss(stream uint64, owner uint16) (meta.AcceptOwnerLoss, error) {
	st, rec, err := c.pendingRecovery(stream)
	if err != nil {
		return meta.AcceptOwnerLoss{}, err
	}
	if owner == 0 {
		owner = rec.ProposedOwner
	}
	op := meta.AcceptOwnerLoss{Stream: st.ID, Incarnation: st.Incarnation, Recovery: rec.ID, Owner: owner}
	if a, ok := c.sealAnswer(st.ID, rec.ID, owner); ok {
		op.TailsPublished, op.RecordTail, op.CursorTail = true, a.recordTail, a.cursorTail
		return op, nil
	}
	if n := c.node(owner); n != nil {
		if t, ok := n.tail(st.ID, st.Incarnation); ok && t.Flags&(wire.CopyLogFailed|wire.CopyOwnerRestarted) != 0 {
			// Promoted without a seal, it would refuse the assignment (or serve nothing) and the stream
			// would wait with no recovery left to end the wait (streamsim seed 3088 with disk errors).
			return meta.AcceptOwnerLoss{}, fmt.Errorf("%w: node %d's copy of stream %d %s and has not answered the "+
				"seal of recovery %d; wait for its answer (the recovery commits then) or name another owner",
				ErrOwnerCannotServe, owner, st.ID, cannotServe(t), rec.ID)
		}
		if t, ok := n.tail(st.ID, st.Incarnation); ok {
			op.TailsPublished, op.RecordTail, op.CursorTail = true, t.RecordTail, t.CursorTail
			return op, nil
		}
	}
	return meta.AcceptOwnerLoss{}, fmt.Errorf("%w: node %d has neither answered the seal of recovery %d of stream %d "+
		"nor published its tails to this controller; wait for its heartbeat or name another owner",
		ErrOwnerTailsUnknown, owner, rec.ID, st.ID)
}

// cannotServe says why a copy with t's flags cannot take the owner's role without a seal.
func cannotServe(t wire.CopyTail) string {
	if t.Flags&wire.CopyLogFailed != 0 {
		return "failed its log (" + t.Cause.String() + ")"
	}
	return "reopened within its own epoch"
}

// sealAnswer is node's sealed answer to recovery id of stream, if the worker holds one.
func (c *Controller) sealAnswer(stream, id uint64, node uint16) (answer, bool) {
	i, ok := c.workIndex(stream)
	if !ok || c.works[i].id != id {
		return answer{}, false
	}
	w := c.works[i]
	j := slices.Index(w.copies, node)
	if j < 0 || !w.answers[j].sealed {
		return answer{}, false
	}
	return w.answers[j], true
}

// Withdraw builds the operator's op that withdraws stream's pending recovery. The controller then
// records a replacement (a new transition at the same fence) before any other assignment change.
func (c *Controller) Withdraw(stream uint64) (meta.WithdrawRecovery, error) {
	st, rec, err := c.pendingRecovery(stream)
	if err != nil {
		return meta.WithdrawRecovery{}, err
	}
	return meta.WithdrawRecovery{Stream: st.ID, Incarnation: st.Incarnation, Recovery: rec.ID}, nil
}

func (c *Controller) pendingRecovery(stream uint64) (meta.Stream, meta.Recovery, error) {
	if !c.primary {
		return meta.Stream{}, meta.Recovery{}, ErrNotPrimary
	}
	st, ok := c.state.StreamByID(stream)
	if !ok {
		return meta.Stream{}, meta.Recovery{}, fmt.Errorf("%w: %d", ErrNoStream, stream)
	}
	rec, ok := c.state.RecoveryOf(stream)
	if !ok || rec.Status != meta.RecoveryPending {
		return meta.Stream{}, meta.Recovery{}, fmt.Errorf("%w: stream %d", ErrNoPendingRecovery, stream)
	}
	return st, rec, nil
}
