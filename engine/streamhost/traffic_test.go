package streamhost_test

import (
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/ringstream/ringstream/engine/streamhost"
	"github.com/ringstream/ringstream/shard"
	"github.com/ringstream/ringstream/shard/heartbeat"
)

// idleTraffic is what the shards of a cluster sent over a window of ticks.
type idleTraffic struct {
	ticks, frames, entries, replyFrames uint64
}

// sumStats adds f over every shard of every node of c.
func (c *cluster) sumStats(f func(s *shard.Stats) uint64) uint64 {
	var n uint64
	for _, tn := range c.nodes {
		for _, s := range tn.node.Shards() {
			n += f(s.Stats())
		}
	}
	return n
}

// measureIdle waits until every copy's owner is idle (R20), then counts the Commit traffic of the
// whole cluster while node 1's first shard runs window ticks.
func (c *cluster) measureIdle(t *testing.T, window uint64) idleTraffic {
	t.Helper()
	ticker := c.nodes[1].node.Shards()[0].Stats()
	deadline := time.Now().Add(60 * time.Second)
	for c.sumStats(func(s *shard.Stats) uint64 { return uint64(s.GroupsBusy.Load()) }) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the copies never went idle")
		}
		time.Sleep(10 * time.Millisecond)
	}
	snap := func() idleTraffic {
		return idleTraffic{
			ticks:       ticker.Ticks.Load(),
			frames:      c.sumStats(func(s *shard.Stats) uint64 { return s.CommitBatchesSent.Load() }),
			entries:     c.sumStats(func(s *shard.Stats) uint64 { return s.CommitEntriesSent.Load() }),
			replyFrames: c.sumStats(func(s *shard.Stats) uint64 { return s.ReplyBatchesSent.Load() }),
		}
	}
	a := snap()
	for ticker.Ticks.Load() < a.ticks+window {
		time.Sleep(5 * time.Millisecond) // counting ticks: the shards run on their own ring timers
	}
	b := snap()
	return idleTraffic{ticks: b.ticks - a.ticks, frames: b.frames - a.frames, entries: b.entries - a.entries,
		replyFrames: b.replyFrames - a.replyFrames}
}

// TestR11_IdleCopyHeartbeatFramesDoNotGrowWithCopies: issue 11 (e), R11. Stream copies on three
// real nodes (two shards each), every copy idle: the owners' Commit heartbeats leave batched, one
// frame per peer per shard per send tick, so ten times the copies send ten times the entries in
// about the same number of frames, under nodes x peers x shards x idle send ticks. One frame per
// copy heartbeat would multiply the frames by ten and fail.
func TestR11_IdleCopyHeartbeatFramesDoNotGrowWithCopies(t *testing.T) {
	few, many := 30, 300
	if testing.Short() {
		few, many = 10, 100
	}
	if v, err := strconv.Atoi(os.Getenv("STREAMHOST_R11_COPIES")); err == nil && v > few {
		many = v // issue 11 (e) at 10,000 copies: a measurement, too long for the test run
	}
	const shards = 2
	c := newCluster(t, majority(1, 2, 3), func(cfg *streamhost.Config) { cfg.Shards = shards })
	ticks, err := heartbeat.DefaultConfig().Ticks(10) // the schedule shard.Config defaults to, in ticks
	if err != nil {
		t.Fatal(err)
	}
	const window = 2500 // 5 s at the test nodes' 2 ms tick
	specs := func(from, to int) []streamhost.Spec {
		out := make([]streamhost.Spec, 0, to-from)
		for i := from; i < to; i++ {
			owner := uint16(1 + i%3) // owners spread over the nodes
			var followers []uint16
			for n := uint16(1); n <= 3; n++ {
				if n != owner {
					followers = append(followers, n)
				}
			}
			out = append(out, streamhost.Spec{Stream: uint64(1000 + i), Incarnation: 1, Assignment: majority(owner, followers...)})
		}
		return out
	}
	open := func(sp []streamhost.Spec) {
		for id := uint16(1); id <= 3; id++ {
			if _, errs := openAll(t, c.nodes[id], sp); len(errs) > 0 {
				t.Fatalf("node %d: %v", id, errs[0])
			}
		}
	}
	open(specs(0, few-1)) // with the cluster's own stream: few copies
	small := c.measureIdle(t, window)
	open(specs(few-1, many-1))
	large := c.measureIdle(t, window)
	t.Logf("%d idle copies: %+v; %d idle copies: %+v (window %d ticks)", few, small, many, large, window)

	const nodes, peers = 3, 2
	sendTicks := window/ticks.IdleHeartbeatIntervalTicks + 2
	bound := nodes * peers * shards * sendTicks
	for _, m := range []idleTraffic{small, large} {
		if m.frames > bound {
			t.Errorf("%d Commit frames in %d ticks, above nodes x peers x shards x idle send ticks = %d", m.frames, window, bound)
		}
	}
	if large.entries < uint64(many/few)*small.entries/2 {
		t.Fatalf("%d entries for %d copies against %d for %d: the copies did not heartbeat", large.entries, many, small.entries, few)
	}
	if large.frames > small.frames*3/2+nodes*peers*shards {
		t.Errorf("Commit frames grew with copies: %d for %d copies, %d for %d", large.frames, many, small.frames, few)
	}
}
