package shard_test

import (
	"testing"
	"time"

	"github.com/ringstream/ringstream/ring"
	"github.com/ringstream/ringstream/shard"
	"github.com/ringstream/ringstream/wire"
)

// checkTraffic asserts what every traffic run must show: batched frame counts bounded by nodes x peers
// x shards x (ticks that owed anything), not by groups; every group's entries delivered exactly once
// to each backup; every accepted Commit answered; every reply handled once; no link drop.
func checkTraffic(t *testing.T, run *clusterRun, owingTicks uint64) {
	t.Helper()
	spec := run.spec
	nodes := len(spec.shards)
	peers := uint64(nodes - 1)
	// owingTicks counts the send and commit ticks in limit ticks; a shard's primaries run from its base
	// (or the tick after) to base + limit, which may hold one more of each, and the online tick.
	var bound uint64
	for _, S := range spec.shards {
		bound += peers * uint64(S) * (owingTicks + 3)
	}
	frames := run.total(func(s *shard.Stats) uint64 { return s.CommitBatchesSent.Load() })
	entries := run.total(func(s *shard.Stats) uint64 { return s.CommitEntriesSent.Load() })
	if frames > bound {
		t.Errorf("%d Commit frames, above the bound %d (nodes x peers x shards x owing ticks)", frames, bound)
	}
	if frames == 0 || entries < uint64(spec.groups)*peers {
		t.Fatalf("%d frames, %d entries: no traffic", frames, entries)
	}
	if dropped := run.total(func(s *shard.Stats) uint64 { return s.EntriesDroppedLinkDown.Load() }); dropped != 0 {
		t.Errorf("%d entries dropped on a down link", dropped)
	}
	// Every entry sent reached its owning shard once, and was accepted once (a duplicate would be
	// "not newer" and counted as ignored).
	received := run.total(func(s *shard.Stats) uint64 { return s.CommitEntriesReceived.Load() })
	accepted := run.total(func(s *shard.Stats) uint64 { return s.CommitEntriesAccepted.Load() })
	if received != entries || accepted != entries {
		t.Errorf("sent %d Commit entries, received %d, accepted %d", entries, received, accepted)
	}
	for ni, gs := range run.groups {
		for _, g := range gs {
			online, base := run.primaryOnline(t, g.GroupID)
			sends, _ := simulateSends(t, spec, online, 0, base+spec.limit)
			if g.Role() == shard.RolePrimary {
				if g.QuorumLost != 0 {
					t.Errorf("node %d group %d lost its quorum", ni+1, g.GroupID)
				}
				continue
			}
			if len(g.Received) != sends {
				t.Fatalf("node %d group %d: %d entries, want %d (one per owing tick)", ni+1, g.GroupID,
					len(g.Received), sends)
			}
			for i := 1; i < len(g.Received); i++ {
				if g.Received[i].TimestampMonotonic <= g.Received[i-1].TimestampMonotonic {
					t.Fatalf("node %d group %d: entry %d not newer than the one before", ni+1, g.GroupID, i)
				}
			}
			// A backup whose timeout ran out before its primary came online (a node that started
			// late) is right to report it; once the primary spoke it must never go silent.
			if g.SilentHeard != 0 {
				t.Errorf("node %d group %d: primary reported silent", ni+1, g.GroupID)
			}
		}
	}
	// Replies: one per accepted Commit, each handled once by the primary's owning shard (R27, R29).
	replies := run.total(func(s *shard.Stats) uint64 { return s.ReplyEntriesSent.Load() })
	replyRecv := run.total(func(s *shard.Stats) uint64 { return s.ReplyEntriesReceived.Load() })
	counted := run.total(func(s *shard.Stats) uint64 { return s.ReplyEntriesCounted.Load() })
	if replies != accepted || replyRecv != replies || counted != replies {
		t.Errorf("accepted %d, replies sent %d, received %d, counted %d", accepted, replies, replyRecv, counted)
	}
	replyFrames := run.total(func(s *shard.Stats) uint64 { return s.ReplyBatchesSent.Load() })
	// A backup shard answers at most once per peer per tick, and only on ticks after Commit batches
	// arrived: a reply frame per Commit frame and receiving shard at most.
	var maxShards uint64
	for _, S := range spec.shards {
		maxShards = max(maxShards, uint64(S))
	}
	if replyFrames > frames*maxShards {
		t.Errorf("%d reply frames for %d Commit frames", replyFrames, frames)
	}
	w := run.windowCounters()
	t.Logf("%d groups, %d ticks: %d Commit frames / %d entries, %d reply frames / %d entries; "+
		"window of %d ticks: %d Commit frames, %d reply frames, %d bytes (unbatched: %d frames, %d bytes)",
		spec.groups, spec.limit, frames, entries, replyFrames, replies, spec.limit-spec.window,
		w.commitFrames, w.replyFrames, w.bytesSent, w.commitEntries+w.replyEntries,
		(w.commitEntries+w.replyEntries)*wire.HeaderSize)
}

// The traffic test of issue 5, idle: three nodes in one process over real loopback links, two shards
// each, 1000 groups led across the nodes with no writes. The primaries come online once every link is
// up and turn idle one commit_heartbeat_timeout later; the measured window is the 5 s worth of ticks
// (500) from tick 1400 after the base (see clusterSpec), by which every group is idle. The Commit frames are bounded by nodes x peers x shards x send ticks, not by the number
// of groups.
func TestTraffic_IdleGroupsThreeNodes(t *testing.T) {
	spec := clusterSpec{shards: []int{2, 2, 2}, groups: 1000, window: 1400, limit: 1900, tick: time.Millisecond}
	run := runCluster(t, spec)
	ticks := defaultTicks(t)
	checkTraffic(t, run, spec.limit/ticks.BroadcastIntervalTicks)
	// In the idle window only the idle send ticks (and the switch tick) carry heartbeats.
	w := run.windowCounters()
	windowSendTicks := (spec.limit - spec.window) / ticks.BroadcastIntervalTicks
	if bound := 3 * 2 * 2 * windowSendTicks; w.commitFrames > bound {
		t.Errorf("idle window: %d Commit frames above %d", w.commitFrames, bound)
	}
	var want uint64
	for id := uint64(1); id <= uint64(spec.groups); id++ {
		online, base := run.primaryOnline(t, id)
		if online+ticks.HeartbeatTimeoutTicks+ticks.BroadcastIntervalTicks > base+spec.window {
			t.Fatalf("group %d came online at tick %d: too late to be idle by tick %d", id, online, base+spec.window)
		}
		_, idleSends := simulateSends(t, spec, online, base+spec.window, base+spec.limit)
		want += uint64(2 * idleSends)
	}
	if w.commitEntries != want {
		t.Errorf("idle window: %d entries, want %d (the idle heartbeats of every group and backup)",
			w.commitEntries, want)
	}
	for _, n := range run.nodes {
		for _, s := range n.Shards() {
			if s.Stats().GroupsBusy.Load() != 0 {
				t.Errorf("shard %d still has busy groups after the window", s.Index())
			}
		}
	}
}

// The same traffic with every group busy: each commits an op every 10 ticks, so eager Commits leave
// on those ticks too and the bound counts send ticks plus commit ticks.
func TestTraffic_BusyGroupsThreeNodes(t *testing.T) {
	spec := clusterSpec{shards: []int{2, 2, 2}, groups: 1000, commitEvery: 10, window: 100, limit: 600,
		tick: time.Millisecond}
	run := runCluster(t, spec)
	ticks := defaultTicks(t)
	owing := spec.limit/ticks.BroadcastIntervalTicks + spec.limit/10
	checkTraffic(t, run, owing)
	for ni, gs := range run.groups {
		for _, g := range gs {
			// Commits on every tenth tick from the online tick to the limit, both included.
			online, base := run.primaryOnline(t, g.GroupID)
			want := (base+spec.limit)/10 - (online-1)/10
			if g.Role() != shard.RolePrimary && g.Received[len(g.Received)-1].Commit != want {
				t.Fatalf("node %d group %d: last commit %d, want %d", ni+1, g.GroupID,
					g.Received[len(g.Received)-1].Commit, want)
			}
		}
	}
}

// R16 across shard counts: two nodes with 2 and 3 shards; every entry still reaches the shard that
// owns its group on the receiving node, exactly once.
func TestR16_TrafficAcrossDifferentShardCounts(t *testing.T) {
	spec := clusterSpec{shards: []int{2, 3}, groups: 600, commitEvery: 25, window: 100, limit: 400,
		tick: time.Millisecond}
	run := runCluster(t, spec)
	ticks := defaultTicks(t)
	checkTraffic(t, run, spec.limit/ticks.BroadcastIntervalTicks+spec.limit/25)
}

// The runtime on the ring's fallback backend (plain syscalls and epoll) carries the same traffic with
// the same guarantees.
func TestTraffic_FallbackBackend(t *testing.T) {
	spec := clusterSpec{shards: []int{2, 2, 2}, groups: 300, commitEvery: 10, window: 100, limit: 400,
		tick: time.Millisecond, backend: ring.BackendFallback}
	run := runCluster(t, spec)
	ticks := defaultTicks(t)
	checkTraffic(t, run, spec.limit/ticks.BroadcastIntervalTicks+spec.limit/10)
}
