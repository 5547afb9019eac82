package control

import (
	"errors"
	"fmt"

	"github.com/ringstream/ringstream/engine/meta"
)

// Sentinel errors of the operator actions, one meaning each.
var (
	// ErrNotPrimary: the controller is not running on the metadata primary.
	ErrNotPrimary = errors.New("control: not the metadata primary")
	// ErrNoStream: no live stream has that id.
	ErrNoStream = errors.New("control: no such stream")
	// ErrNoPendingRecovery: the stream has no pending recovery to accept or withdraw.
	ErrNoPendingRecovery = errors.New("control: no pending recovery")
)

// AcceptOwnerLoss builds the operator's op that moves stream to owner without a seal (owner 0 means
// the recovery's proposed owner). The history start it carries is owner's tails as it last published
// them in a heartbeat to this controller, or none if it published nothing (stream-failover spec,
// known limits). The host proposes the op and reports the result to the operator; meta checks that
// owner is a proposed member and the recovery is still the pending one.
func (c *Controller) AcceptOwnerLoss(stream uint64, owner uint16) (meta.AcceptOwnerLoss, error) {
	st, rec, err := c.pendingRecovery(stream)
	if err != nil {
		return meta.AcceptOwnerLoss{}, err
	}
	if owner == 0 {
		owner = rec.ProposedOwner
	}
	op := meta.AcceptOwnerLoss{Stream: st.ID, Incarnation: st.Incarnation, Recovery: rec.ID, Owner: owner}
	if n := c.node(owner); n != nil {
		if t, ok := n.tail(st.ID, st.Incarnation); ok {
			op.TailsPublished, op.RecordTail, op.CursorTail = true, t.RecordTail, t.CursorTail
		}
	}
	return op, nil
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
