package metahost

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ringstream/ringstream/ring"
	"github.com/ringstream/ringstream/ring/powerloss"
	"github.com/ringstream/ringstream/shard"
)

var (
	metaPowerRuns   = flag.Int("meta.powerloss.runs", 4, "cluster runs of the metadata group's power-loss test")
	metaPowerFirst  = flag.Uint64("meta.powerloss.first", 1, "seed of the first run (-meta.powerloss.runs from it)")
	metaPowerStates = flag.Int("meta.powerloss.states", 250, "power-loss states drawn from each run's recorded disk")
)

// metaPowerLoss is what one run left: the cut node's disk model and directory, and the ops the clients
// saw committed (every one of them acknowledged by node 2, the only other replica up).
type metaPowerLoss struct {
	disk      *powerloss.Disk
	cfg       Config
	committed map[uint16]uint64 // registered node id: op
	lastOp    uint64
	nodes     []*metaNode
	dirs      []string
}

// metaPowerLossRun runs nodes 1 and 2 with node 3 down, so every op commits with node 2's
// acknowledgement, until the clients saw enough ops committed; then node 2's power goes in the middle
// of a persist (its next fsync fails, as the power cut leaves it: nothing after it is durable, and the
// replica acknowledges nothing more), and both nodes stop. Node 2's disk (ring/powerloss) holds what
// its syncs made durable and what was still pending.
// metaPowerCase is one run's setup: its seed, whether checkpoints come every 8 ops with the log
// compacted after each, and the broken variant it runs, if any.
type metaPowerCase struct {
	seed                    uint64
	compact                 bool
	noSync, noDir, noInline bool
}

func metaPowerLossRun(t *testing.T, pc metaPowerCase) *metaPowerLoss {
	seed := pc.seed
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	for i, dir := range dirs {
		if err := Format(FormatConfig{Dir: dir, Cluster: 42, Node: uint16(i + 1), Replica: uint8(i)}); err != nil {
			t.Fatal(err)
		}
	}
	disk := powerloss.NewDisk(dirs[1], seed)
	disk.WritesInAnyOrder() // one fdatasync covers the log append and the copies: no order among them
	var nodes []*metaNode
	for i, dir := range dirs[:2] {
		o := metaNodeOpts{}
		if i == 1 {
			o.wrap = disk.Wrap
		}
		if pc.compact {
			o.tune = func(c *Config) {
				c.VSR.PipelineOpsMax, c.VSR.CheckpointOps, c.LogCompactBytes = 4, 8, 1
			}
		}
		n := newMetaNode(t, uint16(i+1), dir, 2*time.Millisecond, netip.MustParseAddrPort("127.0.0.1:0"), o)
		n.group.store.brokenNoSync = pc.noSync
		n.group.store.brokenNoDirSync = pc.noDir
		n.group.store.brokenNoInline = pc.noInline
		nodes = append(nodes, n)
	}
	// Node 3 stays down: its peers dial a port where nothing listens.
	for i, n := range nodes {
		peers := []shard.Peer{{Node: nodes[1-i].id, Addr: nodes[1-i].node.Addr()},
			{Node: 3, Addr: netip.MustParseAddrPort("127.0.0.1:1")}}
		if err := n.node.Start(peers); err != nil {
			t.Fatal(err)
		}
	}
	up := nodes
	t.Cleanup(func() {
		for _, n := range up {
			_ = n.node.Stop()
			n.group.Close()
		}
	})
	alive := map[uint16]bool{1: true, 2: true}
	waitFor(t, "a primary", func() bool { return primaryOf(nodes, alive) != nil })
	run := &metaPowerLoss{disk: disk, cfg: nodes[1].group.cfg, committed: map[uint16]uint64{}, nodes: nodes,
		dirs: dirs}
	var mu sync.Mutex
	stop := proposeUntilStopped(nodes, alive, func(id uint16, op uint64) {
		mu.Lock()
		run.committed[id], run.lastOp = op, max(run.lastOp, op)
		mu.Unlock()
	})
	want := 10 + int(seed%7)
	if pc.compact {
		want = 30 + int(seed%7) // past a few checkpoints and compactions
	}
	waitFor(t, "ops committing", func() bool { mu.Lock(); defer mu.Unlock(); return len(run.committed) >= want })
	// The power cut: the next fsync of node 2, or the one after (by seed), fails.
	disk.Inject(powerloss.Fault{Op: ring.OpFsync, Nth: 1 + int(seed%2), Errno: unix.EIO})
	waitFor(t, "node 2 out", func() bool { return nodes[1].group.Status().PersistErr != nil })
	stop()
	for _, n := range up {
		_ = n.node.Stop()
		n.group.Close()
	}
	up = nil
	return run
}

// check opens node 2's replica from dir (a power-loss state) and says whether it holds every op it
// acknowledged: not recovering, its log reaching the last committed op.
func (run *metaPowerLoss) check(dir string) error {
	cfg := run.cfg
	cfg.Dir = dir
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	g, err := New(cfg)
	if err != nil {
		return err
	}
	defer g.Close()
	if st := g.Status(); st.Recovering || st.Op < run.lastOp {
		return fmt.Errorf("reopened at op %d (recovering %v), below the acknowledged op %d", st.Op, st.Recovering,
			run.lastOp)
	}
	return nil
}

// The power-lost replica keeps every op it acknowledged, in every power-loss state drawn from the
// recorded runs (-meta.powerloss.runs x -meta.powerloss.states); and in each run's own power-loss
// state, node 2 with node 3 (which missed every op) elects a primary, loses nothing and commits on.
// A failing state prints its seed (Report).
func TestMetaGroup_PowerLossKeepsAcknowledgedOps(t *testing.T) {
	states := 0
	for seed := *metaPowerFirst; seed < *metaPowerFirst+uint64(*metaPowerRuns); seed++ {
		// Odd runs checkpoint every 8 ops and compact the log after each checkpoint.
		run := metaPowerLossRun(t, metaPowerCase{seed: seed, compact: seed%2 == 1})
		for s := 0; s < *metaPowerStates; s++ {
			dst := filepath.Join(t.TempDir(), "state")
			rep, err := run.disk.PowerLossCopy(dst, seed<<20|uint64(s))
			if err != nil {
				t.Fatal(err)
			}
			if err := run.check(dst); err != nil {
				t.Fatalf("run %d, %s: %v", seed, rep, err)
			}
			states++
		}
		rep, err := run.disk.PowerLoss()
		if err != nil {
			t.Fatal(err)
		}
		if lost := run.electAndCheck(t); len(lost) > 0 {
			t.Fatalf("run %d, %s: committed ops lost: register node %v", seed, rep, lost)
		}
	}
	t.Logf("%d runs, %d power-loss states checked", *metaPowerRuns, states)
}

// electAndCheck brings node 2 back from its power-lost files with node 3, node 1 staying down, commits
// a new op and returns the committed ops that node 2 does not hold.
func (run *metaPowerLoss) electAndCheck(t *testing.T) []uint16 {
	alive := map[uint16]bool{2: true, 3: true}
	node2 := newMetaNode(t, 2, run.dirs[1], 2*time.Millisecond, run.nodes[1].node.Addr(), metaNodeOpts{})
	node3 := newMetaNode(t, 3, run.dirs[2], 2*time.Millisecond, netip.MustParseAddrPort("127.0.0.1:0"), metaNodeOpts{})
	back := []*metaNode{node2, node3}
	nodes := []*metaNode{run.nodes[0], node2, node3} // node 1 stays down on its old address
	for _, n := range back {
		startMetaNode(t, n, nodes)
	}
	defer func() {
		for _, n := range back {
			_ = n.node.Stop()
			n.group.Close()
		}
	}()
	last := commitOp(t, nodes, alive, 9, 1, registerOp(9999)).Op
	waitFor(t, "both at the new op", func() bool {
		return back[0].group.Status().Commit >= last && back[1].group.Status().Commit >= last
	})
	for _, n := range back {
		_ = n.node.Stop()
	}
	var lost []uint16
	for id := range run.committed {
		if _, ok := back[0].group.State().Node(id); !ok {
			lost = append(lost, id)
		}
	}
	return lost
}

// The broken variants: with a persist's writes never synced, with the compaction's rename not made
// durable by a directory fsync before the new log takes appends, or with copies that do not carry the
// persist's records inline (so a power loss may keep the superblock and lose the log append it names),
// some power-loss state rolls the replica back below an op it acknowledged or leaves it unable to
// prove its state.
func TestMetaGroup_PowerLossCatchesBrokenVariants(t *testing.T) {
	for _, c := range []struct {
		name string
		pc   metaPowerCase
	}{
		{"persist without fdatasync", metaPowerCase{seed: 1, noSync: true}},
		{"compaction rename without directory fsync", metaPowerCase{seed: 1, compact: true, noDir: true}},
		{"copies without the records inline", metaPowerCase{seed: 1, noInline: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			run := metaPowerLossRun(t, c.pc)
			for s := 0; s < *metaPowerStates; s++ {
				dst := filepath.Join(t.TempDir(), "state")
				rep, err := run.disk.PowerLossCopy(dst, uint64(s))
				if err != nil {
					t.Fatal(err)
				}
				if err := run.check(dst); err != nil {
					t.Logf("caught at state %d: %s: %v", s, rep, err)
					return
				}
			}
			t.Fatalf("survived %d power-loss states", *metaPowerStates)
		})
	}
}

// proposeUntilStopped runs three clients that propose RegisterNode ops to the primary among nodes
// (alive) one after another, retrying a request the replica refused, and report each committed one.
// The returned function stops them and waits until they have.
func proposeUntilStopped(nodes []*metaNode, alive map[uint16]bool, committed func(id uint16, op uint64)) func() {
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for c := uint64(1); c <= 3; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for req := uint64(1); ; {
				id := uint16(100*c + req)
				p := primaryOf(nodes, alive)
				if p == nil {
					p = nodes[0]
				}
				select {
				case <-stop:
					return
				case res := <-p.group.Propose(c, req, registerOp(id)):
					if res.Err != nil {
						time.Sleep(time.Millisecond) // not (or no longer) the primary: again
						continue
					}
					committed(id, res.Op)
					req++
				}
			}
		}()
	}
	return func() {
		close(stop)
		wg.Wait()
	}
}
