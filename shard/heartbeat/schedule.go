package heartbeat

import "github.com/ringstream/ringstream/internal/assert"

// State is the heartbeat_state byte of a Commit entry (R21). The values are the wire's.
type State uint8

const (
	StateNone  State = 0 // nothing owed; never on the wire
	StateBusy  State = 1 // a heartbeat of a busy group
	StateIdle  State = 2 // a heartbeat of an idle group
	StateEager State = 3 // an eager Commit (R6)
)

// Valid says whether s is one of the three values a Commit entry may carry (R21).
func (s State) Valid() bool { return s == StateBusy || s == StateIdle || s == StateEager }

func (s State) String() string {
	switch s {
	case StateNone:
		return "none"
	case StateBusy:
		return "busy"
	case StateIdle:
		return "idle"
	case StateEager:
		return "eager"
	}
	return "invalid"
}

// Tick is one tick of a shard as the Schedule hands it out.
type Tick struct {
	Number   uint64 // 1 for the first tick, then one more per Advance
	Send     bool   // a send tick: heartbeats may leave (R1)
	IdleSend bool   // also lines up with commit_idle_heartbeat_interval: idle groups send (R20)
}

// Schedule is a shard's tick counter. One per shard; every group the shard leads reads the same ticks,
// so all of them send on the same send ticks and idle groups share frames (R1, R20).
type Schedule struct {
	ticks  Ticks
	number uint64
}

// NewSchedule returns a schedule before its first tick. t must be valid (Ticks.Validate).
func NewSchedule(t Ticks) Schedule {
	assert.True(t.Validate() == nil, "heartbeat: schedule built from invalid ticks")
	return Schedule{ticks: t}
}

// Ticks returns the configuration in ticks.
func (s *Schedule) Ticks() Ticks { return s.ticks }

// Now is the current tick (the zero Tick before the first Advance).
func (s *Schedule) Now() Tick { return s.tickAt(s.number) }

// Skip moves the schedule n ticks on without returning them: ticks whose time passed while the
// process could not run them (it was stopped, or starved of CPU). Timers that compare tick numbers
// (the quorum window, a backup's timeout) then see that time pass.
func (s *Schedule) Skip(n uint64) { s.number += n }

// Advance moves to the next tick and returns it.
func (s *Schedule) Advance() Tick {
	s.number++
	return s.tickAt(s.number)
}

func (s *Schedule) tickAt(n uint64) Tick {
	if n == 0 {
		return Tick{}
	}
	send := n%s.ticks.BroadcastIntervalTicks == 0
	idle := n%s.ticks.IdleHeartbeatIntervalTicks == 0
	// The idle interval is a whole multiple of P, so every idle send tick is a send tick.
	assert.True(!idle || send, "heartbeat: idle send tick is not a send tick")
	return Tick{Number: n, Send: send, IdleSend: idle}
}
