package shard_test

import (
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringstream/ringstream/ring"
	"github.com/ringstream/ringstream/shard"
	"github.com/ringstream/ringstream/shard/heartbeat"
	"github.com/ringstream/ringstream/shard/shardtest"
)

// defaultTicks is the R23 defaults at tick_ms = 10: P = 50, busy timeout 500, idle interval 200,
// idle timeout 1200 ticks. Tests run these tick counts with a 1 ms tick, so 5 s worth of ticks (500)
// takes about half a second.
func defaultTicks(t testing.TB) heartbeat.Ticks {
	ticks, err := heartbeat.DefaultConfig().Ticks(10)
	if err != nil {
		t.Fatal(err)
	}
	return ticks
}

// counters is a snapshot of the counters the traffic tests compare.
type counters struct {
	sendTicks, commitFrames, commitEntries, replyFrames, replyEntries, bytesSent uint64
}

func snapshot(s *shard.Shard) counters {
	st := s.Stats()
	return counters{st.SendTicks.Load(), st.CommitBatchesSent.Load(), st.CommitEntriesSent.Load(),
		st.ReplyBatchesSent.Load(), st.ReplyEntriesSent.Load(), st.BytesSent.Load()}
}

func (c counters) minus(o counters) counters {
	return counters{c.sendTicks - o.sendTicks, c.commitFrames - o.commitFrames, c.commitEntries - o.commitEntries,
		c.replyFrames - o.replyFrames, c.replyEntries - o.replyEntries, c.bytesSent - o.bytesSent}
}

func (c counters) plus(o counters) counters {
	return counters{c.sendTicks + o.sendTicks, c.commitFrames + o.commitFrames, c.commitEntries + o.commitEntries,
		c.replyFrames + o.replyFrames, c.replyEntries + o.replyEntries, c.bytesSent + o.bytesSent}
}

// clusterSpec describes one traffic run. Its ticks count on each shard from the tick on which that
// shard first saw every link of the cluster up (its base): the nodes start one after another and a
// slow start must not eat a shard's measured ticks.
type clusterSpec struct {
	shards      []int // shard count per node; node ids are 1..len
	groups      int
	commitEvery int           // 0: idle groups; n: every group commits on every n-th tick
	window      uint64        // tick after base at which the measured window starts
	limit       uint64        // last tick after base on which groups are polled (no Commits owed after it)
	tick        time.Duration // real tick period
	backend     ring.Backend  // "" for auto (io_uring here)
}

// clusterRun is a finished run: every node stopped, every counter final.
type clusterRun struct {
	spec    clusterSpec
	nodes   []*shard.Node
	groups  [][]*shardtest.Group // groups[node index][group index]
	atStart map[[2]int]counters  // (node index, shard) -> counters at tick base + window
	atLimit map[[2]int]counters  // (node index, shard) -> counters at tick base + limit
	base    map[[2]int]uint64    // (node index, shard) -> the first tick on which it saw ready
	started atomic.Bool          // every node's Start returned
	ready   atomic.Bool          // every link of every node is up: the primaries come online
}

// runCluster starts the nodes over real loopback links, lets every shard run to spec.limit ticks past
// its base and beyond until every Commit and reply sent was handled by its owner, then stops them all.
func runCluster(t testing.TB, spec clusterSpec) *clusterRun {
	t.Helper()
	run := &clusterRun{spec: spec, atStart: map[[2]int]counters{}, atLimit: map[[2]int]counters{},
		base: map[[2]int]uint64{}}
	ticks := defaultTicks(t)
	var mu sync.Mutex
	totalShards := 0
	for _, s := range spec.shards {
		totalShards += s
	}
	var pastLimit atomic.Int64
	drained := make(chan struct{})
	var drainOnce sync.Once
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	for i, S := range spec.shards {
		node := uint16(i + 1)
		n, err := shard.NewNode(shard.Config{Node: node, Cluster: testCluster, Shards: S, Tick: spec.tick,
			Schedule: ticks, Seed: 7, Logger: logger, Ring: ring.Config{Backend: spec.backend, Logger: logger}})
		if err != nil {
			t.Fatalf("node %d: %v", node, err)
		}
		var gs []*shardtest.Group
		for g := 0; g < spec.groups; g++ {
			members := make([]uint16, len(spec.shards))
			for m := range members {
				members[m] = uint16((g+m)%len(spec.shards) + 1) // primary: node g mod N + 1
			}
			grp := newGroup(uint64(g+1), members, node, members[0])
			grp.CommitEvery = spec.commitEvery
			grp.Ready = &run.ready
			gs = append(gs, grp)
			if err := n.AddGroup(grp); err != nil {
				t.Fatal(err)
			}
		}
		run.nodes = append(run.nodes, n)
		run.groups = append(run.groups, gs)
		idx := i
		n.SetTickHook(func(s *shard.Shard, tick uint64) {
			if !run.ready.Load() && run.started.Load() && run.allLinksUp() {
				run.ready.Store(true)
			}
			key := [2]int{idx, s.Index()}
			mu.Lock()
			defer mu.Unlock()
			base, ok := run.base[key]
			if !ok {
				if !run.ready.Load() {
					return
				}
				base = tick
				run.base[key] = base
				s.SetSendLimit(base + spec.limit)
			}
			switch {
			case tick == base+spec.window:
				run.atStart[key] = snapshot(s)
			case tick == base+spec.limit:
				run.atLimit[key] = snapshot(s)
				pastLimit.Add(1)
			case tick > base+spec.limit && pastLimit.Load() == int64(totalShards) && run.settled():
				drainOnce.Do(func() { close(drained) })
			}
		})
	}
	for i, n := range run.nodes {
		var peers []shard.Peer
		for j, p := range run.nodes {
			if j != i {
				peers = append(peers, shard.Peer{Node: uint16(j + 1), Addr: p.Addr()})
			}
		}
		if err := n.Start(peers); err != nil {
			t.Fatalf("start node %d: %v", i+1, err)
		}
	}
	run.started.Store(true)
	select {
	case <-drained:
	case <-time.After(120 * time.Second):
		// A liveness guard, not a timing assertion: entries were lost or the loops stopped.
		t.Errorf("traffic never settled: some Commit or reply entries were not handled")
	}
	for _, n := range run.nodes {
		if err := n.Stop(); err != nil {
			t.Errorf("stop: %v", err)
		}
	}
	return run
}

// allLinksUp says whether every shard of every node has its links to every peer up.
func (r *clusterRun) allLinksUp() bool {
	for i, n := range r.nodes {
		status := n.Status()
		if len(status) != r.spec.shards[i]*(len(r.nodes)-1) {
			return false
		}
		for _, l := range status {
			if !l.Up {
				return false
			}
		}
	}
	return true
}

// primaryOnline returns the tick at which group id's primary came online, and the base of the shard
// it runs on. A primary comes online on its shard's base tick or the one after it.
func (r *clusterRun) primaryOnline(t testing.TB, id uint64) (online, base uint64) {
	t.Helper()
	for ni, gs := range r.groups {
		g := gs[id-1]
		if g.Role() == shard.RolePrimary {
			return g.OnlineTick, r.base[[2]int{ni, shard.ShardOf(id, r.spec.shards[ni])}]
		}
	}
	t.Fatalf("group %d: no primary came online", id)
	return 0, 0
}

// settled says whether every Commit and reply entry sent so far was handled by its owning shard.
// It reads only atomics, so any shard goroutine may call it.
func (r *clusterRun) settled() bool {
	var sent, recv, accepted, rsent, rrecv uint64
	for _, n := range r.nodes {
		for _, s := range n.Shards() {
			st := s.Stats()
			sent += st.CommitEntriesSent.Load()
			recv += st.CommitEntriesReceived.Load()
			accepted += st.CommitEntriesAccepted.Load()
			rsent += st.ReplyEntriesSent.Load()
			rrecv += st.ReplyEntriesReceived.Load()
		}
	}
	return sent > 0 && sent == recv && accepted == rsent && rsent == rrecv
}

// total sums a per-shard statistic over every shard of every node.
func (r *clusterRun) total(get func(*shard.Stats) uint64) uint64 {
	var sum uint64
	for _, n := range r.nodes {
		for _, s := range n.Shards() {
			sum += get(s.Stats())
		}
	}
	return sum
}

// window sums the counters of [window, limit] over every shard.
func (r *clusterRun) windowCounters() counters {
	var c counters
	for k, end := range r.atLimit {
		c = c.plus(end.minus(r.atStart[k]))
	}
	return c
}

// simulateSends counts the ticks in online..limit on which one group owes its backups an entry, and
// those after tick from, by running the pure schedule the shard runs, in the shard's order.
func simulateSends(t testing.TB, spec clusterSpec, online, from, limit uint64) (sends, sendsAfter int) {
	ticks := defaultTicks(t)
	sched := heartbeat.NewSchedule(ticks)
	var p heartbeat.Primary
	var commit uint64
	for tick := uint64(1); tick <= limit; tick++ {
		tk := sched.Advance()
		if tick < online {
			continue
		}
		committed := spec.commitEvery > 0 && tick%uint64(spec.commitEvery) == 0
		if committed {
			commit++
		}
		if tick == online {
			p.Start(ticks, tick, 3, commit, 0, 0b110, 2)
		} else if committed {
			p.Committed(tick, commit, 0b110)
		}
		p.Plan(tk)
		if owed, _ := p.Owed(); owed != 0 {
			sends++
			if tick > from {
				sendsAfter++
			}
			p.Sent(owed, p.Timestamp(tick))
		}
	}
	return sends, sendsAfter
}
