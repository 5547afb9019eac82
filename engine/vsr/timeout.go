package vsr

import "github.com/ringstream/ringstream/internal/assert"

// Timeout is one named timer counted in ticks. The replica ticks every running timeout once per Tick
// and then runs the handler of each one that Fired; the handler must Reset, Backoff or Stop it, and
// Fired asserts it was not left due from an earlier tick.
type Timeout struct {
	name         string
	afterTicks   uint64
	elapsedTicks uint64
	attempts     uint64
	running      bool
	seenDue      bool
}

func newTimeout(name string, afterTicks uint64) Timeout {
	assert.True(afterTicks > 0, "vsr: timeout of zero ticks")
	return Timeout{name: name, afterTicks: afterTicks}
}

// Start runs the timeout from zero with no attempts.
func (t *Timeout) Start() { t.running, t.elapsedTicks, t.attempts, t.seenDue = true, 0, 0, false }

// Stop halts it.
func (t *Timeout) Stop() { t.running, t.elapsedTicks, t.attempts, t.seenDue = false, 0, 0, false }

// Reset restarts the count, keeping attempts.
func (t *Timeout) Reset() {
	assert.True(t.running, "vsr: reset of a stopped timeout")
	t.elapsedTicks, t.seenDue = 0, false
}

// Backoff restarts the count and adds an attempt: each attempt waits one more afterTicks, up to four.
func (t *Timeout) Backoff() {
	assert.True(t.running, "vsr: backoff of a stopped timeout")
	t.attempts++
	t.elapsedTicks, t.seenDue = 0, false
}

func (t *Timeout) tick() {
	if t.running {
		t.elapsedTicks++
	}
}

func (t *Timeout) dueTicks() uint64 { return t.afterTicks * (1 + min(t.attempts, 4)) }

// Fired reports whether the timeout is due on this tick. A timeout seen due must be reset, backed off
// or stopped before the next tick.
func (t *Timeout) Fired() bool {
	if !t.running || t.elapsedTicks < t.dueTicks() {
		return false
	}
	assert.True(!t.seenDue, "vsr: timeout left due past its tick")
	t.seenDue = true
	return true
}
