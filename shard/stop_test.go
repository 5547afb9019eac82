package shard_test

import (
	"fmt"
	"math/rand/v2"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/ringstream/ringstream/ring"
	"github.com/ringstream/ringstream/shard"
	"github.com/ringstream/ringstream/shard/shardtest"
)

// stopWithin fails the test when n.Stop does not return within d: a hang is the bug these tests
// look for, so it is reported as such instead of waiting for the test binary's timeout.
func stopWithin(t *testing.T, n *shard.Node, d time.Duration, what string) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- n.Stop() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%s: Stop: %v", what, err)
		}
	case <-time.After(d):
		t.Fatalf("%s: Stop did not return within %v", what, d)
	}
}

// Issue 9 finding 1: a Stop between Start and a shard's first tick left that shard waiting on its ring
// for ever. Stop now wakes every shard, so a node stopped at once ends every time.
func TestStopRightAfterStartEnds(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b ring.Backend) {
		rounds := 200
		if testing.Short() {
			rounds = 20
		}
		for i := range rounds {
			n := newNetNodeOn(t, b, 1, 2, nil)
			if err := n.Start(nil); err != nil {
				t.Fatal(err)
			}
			stopWithin(t, n, liveness, fmt.Sprintf("round %d", i))
		}
	})
}

// hog keeps every CPU busy until the returned function is called: the stop tests run while the
// shard threads compete for CPU, as on a loaded CI machine.
func hog() (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range runtime.NumCPU() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for x := uint64(1); ; x = x*6364136223846793005 + 1 {
				if x&0xffff == 0 {
					select {
					case <-done:
						return
					default:
					}
				}
			}
		}()
	}
	return func() { close(done); wg.Wait() }
}

func stressNode(t *testing.T, b ring.Backend, id uint16, drain time.Duration, w *watcher, groups ...*shardtest.Group) *shard.Node {
	t.Helper()
	n, err := shard.NewNode(shard.Config{Node: id, Cluster: testCluster, Shards: 2, Tick: time.Millisecond,
		Schedule: testTicks, Seed: uint64(id), Logger: quietLogger(), ReconnectBaseTicks: 1, ReconnectMaxTicks: 2,
		DrainTimeout: drain, Ring: ring.Config{Backend: b, Logger: quietLogger()}})
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range groups {
		if err := n.AddGroup(g); err != nil {
			t.Fatal(err)
		}
	}
	if w != nil {
		n.SetTickHook(w.hook)
	}
	return n
}

// Issue 9 item 5: Stop ends in bounded time in every state. Two 2-shard nodes linked to each other,
// with a Commit flow, a group Nop, a group Recv that only OnStop ends, and a half-open connection on
// the listener, are stopped at a random tick (0 to 40, the first ones before the links are up), many
// times, while every CPU is busy. Every Stop must end, every group must hear OnStop, and no
// operation may be left to the drain deadline.
func TestStopEndsUnderLoadWithEverythingInFlight(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b ring.Backend) {
		stopHog := hog()
		defer stopHog()
		rng := rand.New(rand.NewPCG(9, uint64(len(b))))
		rounds := 12
		if testing.Short() {
			rounds = 4
		}
		for round := range rounds {
			var w watcher
			ga := newGroup(5, []uint16{1, 2}, 1, 1)
			ga.CommitEvery, ga.NopAt, ga.ParkAt = 1, 2, 1+rng.Uint64N(3)
			gb := newGroup(5, []uint16{1, 2}, 2, 1)
			gb.ParkAt = 1
			gm := newGroup(shard.MetadataGroupID, []uint16{1, 2}, 2, 2)
			gm.ParkAt, gm.CommitEvery = 2, 3
			gm2 := newGroup(shard.MetadataGroupID, []uint16{1, 2}, 1, 2)
			a := stressNode(t, b, 1, time.Hour, &w, ga, gm2)
			c := stressNode(t, b, 2, time.Hour, nil, gb, gm)
			if err := a.Start([]shard.Peer{{Node: 2, Addr: c.Addr()}}); err != nil {
				t.Fatal(err)
			}
			if err := c.Start([]shard.Peer{{Node: 1, Addr: a.Addr()}}); err != nil {
				t.Fatal(err)
			}
			half, err := net.Dial("tcp", a.Addr().String()) // accepted, never handshakes
			if err != nil {
				t.Fatal(err)
			}
			if at := rng.Uint64N(41); at > 0 {
				w.wait(t, "tick", func() bool { return a.Shards()[0].Stats().Ticks.Load() >= at })
			}
			what := fmt.Sprintf("round %d", round)
			stopWithin(t, a, liveness, what)
			stopWithin(t, c, liveness, what)
			half.Close()
			for _, g := range []*shardtest.Group{ga, gb, gm, gm2} {
				if g.Stops != 1 {
					t.Fatalf("%s: group %d heard OnStop %d times", what, g.GroupID, g.Stops)
				}
				if g.ParkErr != nil {
					t.Fatalf("%s: park: %v", what, g.ParkErr)
				}
				g.Close()
			}
			for _, n := range []*shard.Node{a, c} {
				for _, s := range n.Shards() {
					if got := s.Stats().DrainAbandoned.Load(); got != 0 {
						t.Fatalf("%s: %d operations abandoned at the drain deadline", what, got)
					}
				}
			}
		}
	})
}

// A group that leaves an operation on the ring through Stop (it ignores OnStop) holds the shard only
// until the drain deadline: Stop then abandons it, counts it and ends.
func TestStopAbandonsOperationsAtDrainDeadline(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b ring.Backend) {
		var w watcher
		g := newGroup(5, []uint16{1, 2}, 1, 1)
		g.ParkAt, g.IgnoreStop = 1, true
		n := stressNode(t, b, 1, 50*time.Millisecond, &w, g)
		if err := n.Start(nil); err != nil {
			t.Fatal(err)
		}
		owner := n.Shards()[shard.ShardOf(5, 2)]
		w.wait(t, "tick 3", func() bool { return owner.Stats().Ticks.Load() >= 3 })
		stopWithin(t, n, liveness, "stop")
		g.Close()
		if g.Stops != 1 || g.ParkDone != 0 {
			t.Fatalf("OnStop %d times, parked Recv completed %d times; want 1 and 0", g.Stops, g.ParkDone)
		}
		if got := owner.Stats().DrainAbandoned.Load(); got != 1 {
			t.Fatalf("DrainAbandoned %d, want 1", got)
		}
	})
}
