package shard_test

import (
	"testing"
	"time"

	"github.com/ringstream/ringstream/shard"
)

// R24: a tick is a period of time, not a turn of the loop. A primary whose process is stopped for
// longer than its quorum window (SIGSTOP, a debugger, a starved machine) wakes with the window
// passed: the first tick its timer runs after the stop reports the quorum lost, instead of a whole
// window later while it serves as if its backup had just been heard.
func TestR24_StoppedPrimaryWakesWithItsQuorumWindowPassed(t *testing.T) {
	p := newGroup(7, []uint16{1, 2}, 1, 1)
	b := newGroup(7, []uint16{1, 2}, 2, 1)
	n1 := offlineNode(t, 1, 1, []uint16{2}, p)
	n2 := offlineNode(t, 2, 1, []uint16{1}, b)
	s1 := n1.Shards()[0]
	tick := uint64(10 * time.Millisecond) // the shard's default tick
	now := uint64(1_000_000_000_000)
	for range 60 {
		now += tick
		s1.TimerTick(now)
		deliver(t, s1, 1, n2, 2)
		runTicks(n2, 1)
		deliver(t, n2.Shards()[0], 2, n1, 1)
	}
	if p.QuorumLost != 0 || len(p.Replies) == 0 {
		t.Fatalf("with the backup replying: quorum lost %d times, %d replies", p.QuorumLost, len(p.Replies))
	}
	if got := s1.Stats().TicksSkipped.Load(); got != 0 {
		t.Fatalf("%d ticks skipped on time", got)
	}
	now += 6 * tick // late by 5 ticks, under half the window: every tick still runs
	s1.TimerTick(now)
	deliver(t, s1, 1, n2, 2)
	runTicks(n2, 1)
	deliver(t, n2.Shards()[0], 2, n1, 1)
	if got := s1.Stats().TicksSkipped.Load(); got != 0 || p.QuorumLost != 0 {
		t.Fatalf("a delay of 5 ticks: %d skipped, quorum lost %d times; want none", got, p.QuorumLost)
	}
	now += 100 * tick // stopped for five quorum windows (testTicks: 20 ticks)
	s1.TimerTick(now)
	if p.QuorumLost != 1 {
		t.Fatalf("first tick after a stop of 100 ticks: quorum lost %d times, want 1", p.QuorumLost)
	}
	if got := s1.Stats().TicksSkipped.Load(); got != 99 {
		t.Fatalf("ticks skipped %d, want 99", got)
	}
}

func TestMissedTicks(t *testing.T) {
	const tick = 10
	for _, c := range []struct{ last, now, want uint64 }{
		{0, 1000, 0},    // the first tick
		{100, 110, 0},   // on time
		{100, 119, 0},   // late within the period
		{100, 120, 1},   // one period missed
		{100, 1100, 99}, // stopped
		{100, 90, 0},    // a clock that went back is not a stop
	} {
		if got := shard.MissedTicks(c.last, c.now, tick); got != c.want {
			t.Errorf("MissedTicks(%d, %d, %d) = %d, want %d", c.last, c.now, tick, got, c.want)
		}
	}
}
