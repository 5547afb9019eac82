package metahost

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringstream/ringstream/engine/vsr"
	"github.com/ringstream/ringstream/shard"
)

// tickCounter is a Controller that counts the ticks it is given.
type tickCounter struct {
	calls, skipped atomic.Uint64
}

func (c *tickCounter) Tick(skipped uint64)    { c.calls.Add(1); c.skipped.Add(skipped) }
func (c *tickCounter) Step() bool             { return false }
func (c *tickCounter) Replied(vsr.Reply) bool { return false }
func (c *tickCounter) LinkUp(uint16)          {}
func (c *tickCounter) LinkDown(uint16)        {}

// The controller hears the ticks shard 0 skipped: shard 0 held for 30 ticks' time (a stall) runs
// fewer ticks than passed, and the controller is told how many it missed, so the timers that measure
// wall time (the eager failover grace) do not stretch when shard 0 is busy.
func TestGroup_ControllerHearsTheTicksShard0Skipped(t *testing.T) {
	const tick = 2 * time.Millisecond
	ctl := &tickCounter{}
	nodes := startMetaClusterTB(t, []string{t.TempDir(), t.TempDir(), t.TempDir()}, tick, nil, func(n *metaNode) {
		if n.id == 1 {
			n.group.SetController(ctl)
		}
	})
	waitForTB(t, "ticks", func() bool { return ctl.calls.Load() > 5 })
	before := ctl.skipped.Load()
	done := make(chan struct{})
	if err := nodes[0].node.Run(0, func(*shard.Shard) { time.Sleep(30 * tick); close(done) }); err != nil {
		t.Fatal(err)
	}
	<-done
	waitForTB(t, "the skipped ticks counted", func() bool { return ctl.skipped.Load() >= before+20 })
}

// lateTicks counts the clock's ticks beyond the one being run: none on time or early, one for every
// whole period late, and the part of a period left over is carried, so ticks 3 ms apart at a 2 ms
// period add one late tick every second tick (what a shard 0 busier than its tick does to the eager
// failover grace, which is wall time).
func TestLateTicks(t *testing.T) {
	const ms = time.Millisecond
	if n, c := lateTicks(2*ms, 0, 2*ms); n != 0 || c != 0 {
		t.Fatalf("on time: %d late, carry %v", n, c)
	}
	if n, c := lateTicks(1*ms, 500*time.Microsecond, 2*ms); n != 0 || c != 0 {
		t.Fatalf("early: %d late, carry %v", n, c)
	}
	if n, c := lateTicks(7*ms, 0, 2*ms); n != 2 || c != ms {
		t.Fatalf("3.5 periods: %d late, carry %v; want 2 and 1ms", n, c)
	}
	var late uint64
	var carry time.Duration
	for range 100 {
		var n uint64
		n, carry = lateTicks(3*ms, carry, 2*ms)
		late += n
	}
	if late != 50 {
		t.Fatalf("100 ticks 3 ms apart at 2 ms: %d late, want 50 (150 ticks of the clock in all)", late)
	}
}

// With TickPeriod the controller also hears the ticks that passed on the clock while shard 0 ran
// late but not late enough for the shard to skip tick numbers (under half its quorum window): a
// 15-tick delay is heard as about 14 late ticks, so the eager failover grace stays wall time.
func TestGroup_ControllerHearsTheClocksTicksWhenShard0RunsLate(t *testing.T) {
	const tick = 2 * time.Millisecond
	ctl := &tickCounter{}
	opts := func(uint16) metaNodeOpts {
		return metaNodeOpts{tune: func(c *Config) { c.TickPeriod = tick }}
	}
	nodes := startMetaClusterTB(t, []string{t.TempDir(), t.TempDir(), t.TempDir()}, tick, opts, func(n *metaNode) {
		if n.id == 1 {
			n.group.SetController(ctl)
		}
	})
	waitForTB(t, "ticks", func() bool { return ctl.calls.Load() > 5 })
	before := ctl.skipped.Load()
	done := make(chan struct{})
	if err := nodes[0].node.Run(0, func(*shard.Shard) { time.Sleep(15 * tick); close(done) }); err != nil {
		t.Fatal(err)
	}
	<-done
	waitForTB(t, "the late ticks counted", func() bool { return ctl.skipped.Load() >= before+10 })
}
