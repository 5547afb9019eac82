package monoclock

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A Clock's readings agree with CLOCK_MONOTONIC read by a system call, within the anchor's error, and
// two clocks anchored apart (two processes do the same) agree with each other.
func TestNowMatchesClockMonotonic(t *testing.T) {
	c := New()
	time.Sleep(2 * time.Millisecond)
	other := New()
	for range 100 {
		var ts unix.Timespec
		before := c.Now()
		if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
			t.Fatal(err)
		}
		after := other.Now()
		const slack = int64(200 * time.Microsecond)
		if got := ts.Nano(); got < before-slack || got > after+slack {
			t.Fatalf("CLOCK_MONOTONIC %d outside [%d, %d] of the two clocks", got, before, after)
		}
	}
	if c.Nanos(time.Time{}) != 0 {
		t.Fatal("the zero time is not 0")
	}
}
