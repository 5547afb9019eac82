package control

import (
	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/internal/assert"
)

// CheckInvariants asserts every invariant the controller keeps. It walks the whole state, so tests and
// engine/sim call it after each input; a broken invariant panics with a "control:" message.
func (c *Controller) CheckInvariants() {
	for i := 1; i < len(c.nodes); i++ {
		assert.True(c.nodes[i-1].id < c.nodes[i].id, "control: node views not ascending")
	}
	if !c.primary {
		assert.True(len(c.works) == 0, "control: recovery work on a backup")
		assert.True(len(c.proposals) == 0, "control: proposals out on a backup")
		assert.True(len(c.deliveries) == 0, "control: deliveries on a backup")
		return
	}
	for i, p := range c.proposals {
		assert.True(i == 0 || c.proposals[i-1].stream < p.stream, "control: proposals not ascending")
		assert.True(p.ticksLeft > 0, "control: proposal slot past its time")
	}
	for i, r := range c.reports {
		assert.True(i == 0 || compareReports(c.reports[i-1], r) < 0, "control: reports not ascending")
	}
	for i := 1; i < len(c.deliveries); i++ {
		assert.True(c.deliveries[i-1].msg.Stream < c.deliveries[i].msg.Stream, "control: deliveries not ascending")
	}
	for i, w := range c.works {
		assert.True(i == 0 || c.works[i-1].stream < w.stream, "control: works not ascending")
		c.checkWork(w)
	}
}

func (c *Controller) checkWork(w *work) {
	assert.True(len(w.answers) == len(w.copies), "control: answers not parallel to copies")
	assert.True(w.threshold >= 1, "control: seal threshold below one")
	assert.True(w.threshold <= len(w.copies), "control: seal threshold above the copies")
	assert.True(w.fence >= 2, "control: fence below epoch 2")
	for i := 1; i < len(w.copies); i++ {
		assert.True(w.copies[i-1] < w.copies[i], "control: copies not ascending")
	}
	for _, a := range w.answers {
		assert.True(!(a.sealed && a.noCopy), "control: an answer both sealed and without a copy")
	}
	if c.dirty {
		return // the state moved since the last reconcile
	}
	rec, ok := c.state.RecoveryOf(w.stream)
	assert.True(ok, "control: work for a stream without a recovery")
	assert.True(rec.Status == meta.RecoveryPending, "control: work for a recovery that is not pending")
	assert.True(rec.ID == w.id, "control: work for another transition than the recorded one")
	assert.True(rec.FromEpoch+1 == w.fence, "control: work fencing at another epoch than the recovery's")
}
