package metahost

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/shard/heartbeat"
)

// TestMetaGroup_BackupPersistsABurstTogether: 32 proposals ordered in one turn of the primary reach
// each backup as a burst of prepares, and the backup persists them in a few persists (one per loop
// turn that received some), not one each. Pumping after every frame (the way before) made one persist
// per prepare, and under a failover's load of ops each meta op waited behind dozens of them.
func TestMetaGroup_BackupPersistsABurstTogether(t *testing.T) {
	for _, eachFrame := range []bool{false, true} {
		persists := map[uint16]*atomic.Int64{1: {}, 2: {}, 3: {}}
		// Timeouts of seconds: a loaded machine that stalls the 1 ms tick for tens of milliseconds
		// must not start a view change in the middle of the burst (the test counts one primary's).
		patient := func(uint16) metaNodeOpts {
			return metaNodeOpts{schedule: heartbeat.Ticks{BroadcastIntervalTicks: 5, HeartbeatTimeoutTicks: 5000,
				IdleHeartbeatIntervalTicks: 10, IdleHeartbeatTimeoutTicks: 8000}}
		}
		nodes := startMetaClusterTB(t, []string{t.TempDir(), t.TempDir(), t.TempDir()}, time.Millisecond, patient,
			func(n *metaNode) {
				count := persists[n.id]
				n.group.SetPersistObserver(func(time.Duration) { count.Add(1) })
				n.group.pumpEachFrame = eachFrame
			})
		alive := map[uint16]bool{1: true, 2: true, 3: true}
		op := meta.AppendOp(nil, meta.RegisterNode{Node: 500, Address: "10.0.0.1:7000"})
		commitOp(t, nodes, alive, 9, 1, op) // a primary, in normal status
		p := primaryOf(nodes, alive)
		const burst = 32
		before := map[uint16]int64{}
		for id, c := range persists {
			before[id] = c.Load()
		}
		// All of them in the inbox before the primary's loop takes it: one turn orders them all.
		g := p.group
		results := make([]chan ProposeResult, burst)
		g.mu.Lock()
		for i := range results {
			results[i] = make(chan ProposeResult, 1)
			g.inbox = append(g.inbox, proposal{client: 10, request: uint64(i + 1), op: op, done: results[i]})
		}
		g.mu.Unlock()
		g.inboxPending.Store(true)
		(*g.wake.Load())()
		for i, ch := range results {
			select {
			case res := <-ch:
				if res.Err != nil {
					t.Fatalf("proposal %d: %v", i+1, res.Err)
				}
			case <-time.After(waitBound):
				t.Fatalf("proposal %d never answered", i+1)
			}
		}
		// Both backups hold every op once their status shows the primary's op; their persists of the
		// burst are then all queued, and the count settles.
		want := p.group.Status().Op
		for _, n := range nodes {
			waitForTB(t, "every backup holding the burst", func() bool { return n.group.Status().Op >= want })
		}
		backups := make([]*metaNode, 0, 2)
		for _, n := range nodes {
			if n != p {
				backups = append(backups, n)
			}
		}
		persisted := func(n *metaNode) int64 { return persists[n.id].Load() - before[n.id] }
		if eachFrame {
			// The test's own check: without batching, a backup that took the prepares one by one makes
			// about one persist per op (waited for: its persists run one after another).
			waitForTB(t, "a backup persisting the burst op by op", func() bool {
				return max(persisted(backups[0]), persisted(backups[1])) >= burst/2
			})
		} else {
			for _, n := range backups {
				waitForTB(t, "the backup's persist of the burst", func() bool { return persisted(n) >= 1 })
			}
			time.Sleep(100 * time.Millisecond) // persists still queued complete (a count only grows)
		}
		for _, n := range backups {
			got := persisted(n)
			t.Logf("pump each frame %v: backup %d persisted %d ops in %d persists", eachFrame, n.id, burst, got)
			if !eachFrame && got > burst/4 {
				t.Errorf("backup %d persisted a burst of %d prepares in %d persists, want 1..%d", n.id, burst, got, burst/4)
			}
		}
		for _, n := range nodes {
			_ = n.node.Stop()
			n.group.Close()
		}
	}
}
