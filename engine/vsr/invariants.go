package vsr

import "github.com/ringstream/ringstream/internal/assert"

// CheckInvariants asserts the replica's whole-state invariants. It walks the log, so tests and the
// simulator run it after every step; production code does not.
func (r *Replica) CheckInvariants() {
	assert.True(r.logBase <= r.commit, "vsr: log base above commit")
	assert.True(r.commit <= r.op, "vsr: commit past op")
	assert.True(r.commit <= r.commitMax, "vsr: commit past the highest commit heard")
	assert.True(r.snapOp <= r.commit, "vsr: checkpoint past commit")
	assert.True(r.logBase <= r.snapOp, "vsr: log base above the checkpoint")
	assert.True(uint64(len(r.log)) == r.op-r.logBase, "vsr: log length is not op minus base")
	assert.True(r.logView <= r.view, "vsr: log view past view")
	assert.True(r.status != statusNormal || r.logView == r.view, "vsr: normal status with an old log view")
	assert.True(!r.isPrimary() || r.durableOp <= r.op, "vsr: durable op past op")
	parent := r.logBaseHead
	for i := range r.log {
		e := &r.log[i]
		assert.True(e.Op == r.logBase+1+uint64(i), "vsr: log ops not consecutive")
		assert.True(e.Parent == parent, "vsr: log chain broken")
		assert.True(e.View <= r.logView, "vsr: entry from a view past the log view")
		parent = e.Checksum
	}
}
