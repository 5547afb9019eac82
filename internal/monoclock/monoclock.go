// Package monoclock reads CLOCK_MONOTONIC as nanoseconds, so that instants taken in different
// processes on one machine can be compared: the stage trace of a record (engine/stagetrace) puts the
// marks of the client, the owner and the followers on one time line.
//
// Decisions where the design is silent:
//   - A Clock is anchored once: it reads CLOCK_MONOTONIC by a system call and time.Now() side by
//     side, and from then on turns any time.Time that carries Go's monotonic reading into
//     CLOCK_MONOTONIC nanoseconds by the difference of the two monotonic readings. Go's monotonic
//     clock is CLOCK_MONOTONIC on Linux, so a reading costs one time.Now() (vDSO, no system call),
//     and times the code takes anyway (a segment's commit start) convert without another read. The
//     anchor's error is the time between its two reads, a microsecond or less.
//   - A time.Time without a monotonic reading (a wall time built from a number) converts by its wall
//     difference: close, but it moves with a clock step.
//   - No package-level clock: each user keeps the Clock it made (a node one, the bench one).
package monoclock

import (
	"time"

	"golang.org/x/sys/unix"
)

// Clock turns time.Time values of this process into CLOCK_MONOTONIC nanoseconds.
type Clock struct {
	mono int64     // CLOCK_MONOTONIC at the anchor, ns
	at   time.Time // time.Now() at the anchor, with its monotonic reading
}

// New anchors a Clock now.
func New() Clock {
	var ts unix.Timespec
	before := time.Now()
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts) // fails only for an unknown clock id
	after := time.Now()
	return Clock{mono: ts.Nano(), at: before.Add(after.Sub(before) / 2)}
}

// Nanos is t as CLOCK_MONOTONIC nanoseconds (0 for the zero time).
func (c Clock) Nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return c.mono + int64(t.Sub(c.at))
}

// Now is CLOCK_MONOTONIC now, in nanoseconds.
func (c Clock) Now() int64 { return c.Nanos(time.Now()) }
