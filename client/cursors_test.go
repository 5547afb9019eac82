package client

import (
	"context"
	"errors"
	"math"
	"testing"
)

// A shift moves from the cursor, clamped to the retained head and the confirmed tail, without
// wrapping at either end of uint64.
func TestCursorShiftClamps(t *testing.T) {
	for _, c := range []struct {
		from   uint64
		delta  int64
		lo, hi uint64
		want   uint64
	}{
		{10, 5, 0, 100, 15}, {10, -5, 0, 100, 5}, {10, -50, 3, 100, 3}, {10, 500, 0, 100, 100},
		{0, math.MinInt64, 0, 100, 0}, {math.MaxUint64, math.MaxInt64, 0, 100, 100}, {5, 0, 8, 6, 8},
	} {
		if got := shift(c.from, c.delta, c.lo, c.hi); got != c.want {
			t.Errorf("shift(%d, %d, [%d, %d]) = %d, want %d", c.from, c.delta, c.lo, c.hi, got, c.want)
		}
	}
}

// A reset names exactly one target; the check comes before anything is sent.
func TestResetCursorWantsOneTarget(t *testing.T) {
	var c Client
	one := uint64(1)
	for _, r := range []CursorReset{{}, {ToEarliest: true, ToLatest: true}, {ToOffset: &one, ToEarliest: true}} {
		if _, err := c.ResetCursor(context.Background(), "s", "c", r); !errors.Is(err, ErrConfig) {
			t.Errorf("reset %+v: %v, want ErrConfig", r, err)
		}
	}
}
