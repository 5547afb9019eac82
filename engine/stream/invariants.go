package stream

import "github.com/ringstream/ringstream/internal/assert"

// CheckInvariants asserts the relations that hold between every two inputs. Tests and engine/sim run
// it after every Step, Tick and report; it walks every follower, so it stays off the hot path.
func (c *Copy) CheckInvariants() {
	assert.True(c.rec.durable <= c.rec.appended, "stream: record durable tail past the appended tail")
	assert.True(c.cur.durable <= c.cur.appended, "stream: cursor durable tail past the appended tail")
	assert.True(c.rec.bytes >= 0 && c.rec.bytes <= c.cfg.PendingBytesMax+c.cfg.InflightBytesMax, "stream: pending bytes out of bounds")
	assert.True(len(c.epochHeld) == 0 || (c.epochPending && c.role == RoleOwner && !c.failed),
		"stream: produces held for the epoch entry outside an owner's wait for it")
	assert.True(len(c.epochHeld) <= c.cfg.ProducesMax && c.epochHeldBytes <= c.cfg.PendingBytesMax,
		"stream: produces held for the epoch entry past their bounds")
	switch c.role {
	case RoleOwner:
		assert.True(c.confirmed <= c.rec.durable, "stream: confirmed past the owner's durable tail")
		assert.True(c.acks.len() <= c.cfg.ProducesMax, "stream: more produces waiting than ProducesMax")
		assert.True(c.deletes.len() <= cursorDeletesMax, "stream: more cursor deletes waiting than cursorDeletesMax")
		assert.True(c.deletes.len() == 0 || c.deletes.front().end <= c.cur.appended, "stream: a cursor delete waits past the cursor log")
		assert.True(c.readFloor <= c.rec.durable, "stream: read floor past the owner's durable tail")
		for i := range c.fetches {
			f := &c.fetches[i]
			assert.True(!f.inUse || !f.reading || c.readable(), "stream: a fetch reads before the owner proved its tail")
		}
		for i := range c.followers {
			p := &c.followers[i]
			assert.True(p.match <= c.rec.appended, "stream: follower acknowledged past the owner's log")
			assert.True(p.sent <= c.rec.appended, "stream: sent past the owner's log")
			assert.True(p.inflightBytes <= c.cfg.InflightBytesMax, "stream: in-flight bytes past InflightBytesMax")
			assert.True(p.inflight.len() <= c.cfg.InflightPreparesMax, "stream: in-flight batches past InflightPreparesMax")
			assert.True(p.mode != modeLive || p.sent == c.rec.appended, "stream: live follower behind the appended tail")
		}
	case RoleFollower:
		assert.True(c.agreed <= c.rec.appended, "stream: agreed past the follower's log")
	}
}
