package shard_test

import (
	"testing"

	"github.com/ringstream/ringstream/ring"
	"github.com/ringstream/ringstream/ring/ringtest"
	"github.com/ringstream/ringstream/shard"
)

// forEachBackend runs f once per ring backend (ringtest.ForEachBackend: the io_uring subtest skips
// with the reason where io_uring is refused, and fails then when RINGSTREAM_REQUIRE_IOURING=1).
func forEachBackend(t *testing.T, f func(t *testing.T, b ring.Backend)) {
	ringtest.ForEachBackend(t, f)
}

// tickClock is the shard's tick number as its bounds count it: the ticks run and the ticks skipped
// after a stall (timerTick). A test that checks a bound in ticks reads this, not Ticks alone: on a
// loaded machine a stall skips ticks the shard counts and Ticks does not.
func tickClock(s *shard.Shard) uint64 {
	st := s.Stats()
	return st.Ticks.Load() + st.TicksSkipped.Load()
}
