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
