package stream

import (
	"fmt"
	"slices"

	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/internal/assert"
	"github.com/ringstream/ringstream/wire"
)

// checkAssignment says what is wrong with a as an assignment of a copy on node self, or nil.
func checkAssignment(self uint16, a meta.Assignment) error {
	switch {
	case a.Epoch == 0:
		return fmt.Errorf("%w: assignment at epoch 0", ErrConfig)
	case a.Owner == 0:
		return fmt.Errorf("%w: assignment without an owner", ErrConfig)
	case !a.Includes(self):
		return fmt.Errorf("%w: node %d holds no copy at epoch %d", ErrConfig, self, a.Epoch)
	case !slices.IsSorted(a.Followers) || slices.Contains(a.Followers, a.Owner):
		return fmt.Errorf("%w: followers not ascending or holding the owner", ErrConfig)
	}
	if err := a.Policy.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return nil
}

// Reassign moves an open copy to a newer assignment a in place, keeping what it knows of its logs:
// the epochs of its records, its producer table and its retained head. It is the failover's role
// change without a reread of the log: a sealed copy released, a copy promoted owner at its own
// tails, a follower of a new owner. What waits (produces, fetches) is refused as unavailable; the
// copy's role state goes, its cursor map too. The host calls it once the copy's appends are
// durable and its reads ended (their ends not reported), and only when its logs were not cut since it opened (a
// cut changes what the copy knows: the host makes a New copy and feeds it the log again). Then, as
// at boot, the host feeds the cursors storage holds (ObserveCursor) and calls OpenDone with its
// storage's state. An assignment New would refuse is ErrConfig, and the copy is left as it was.
func (c *Copy) Reassign(a meta.Assignment, starts []meta.HistoryStart) error {
	assert.True(c.role != RoleOpening, "stream: Reassign of a copy not open")
	assert.True(!c.failed, "stream: Reassign of a copy whose log failed")
	assert.True(c.Quiet(), "stream: Reassign with appends not durable")
	if err := checkAssignment(c.cfg.Self, a); err != nil {
		return err
	}
	if a.Epoch <= c.asg.Epoch {
		return fmt.Errorf("%w: reassignment at epoch %d, the copy is at %d", ErrConfig, a.Epoch, c.asg.Epoch)
	}
	c.refuseWaiting(wire.CodeUnavailable, msgReassigned)
	for i := range c.fetches {
		if f := &c.fetches[i]; f.inUse { // reading: the host dropped the read's end
			c.refuse(f.client, f.req.RequestID, wire.CodeUnavailable, msgReassigned)
		}
		c.freeFetch(i)
	}
	c.asg = a
	c.asg.Followers = slices.Clone(a.Followers)
	c.starts = append(c.starts[:0], starts...)
	c.w = a.ConfirmCount()
	c.role = RoleOpening
	c.epochPending, c.restarted, c.reassigned, c.quorumLost = false, false, true, false
	c.followers = c.followers[:0]
	c.tails = c.tails[:0]
	c.acks.reset()
	c.deletes.reset()
	c.parked, c.cursorDue, c.confirmed = 0, 0, 0
	clear(c.cursors)
	c.agreed, c.ackBase, c.ackDue, c.cursorAck, c.ownerCommit = 0, 0, false, false, 0
	return nil
}
