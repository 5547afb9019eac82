package metahost

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/engine/vsr"
	"github.com/ringstream/ringstream/ring"
	"github.com/ringstream/ringstream/shard"
	"github.com/ringstream/ringstream/shard/heartbeat"
)

// metaTestTicks: P = 5 ticks, busy timeout 40, idle interval 10, idle timeout 60 (valid under R9/R23
// relations in ticks). With a 2 ms tick a silent primary is noticed within about 100 ms.
func metaTestTicks() heartbeat.Ticks {
	return heartbeat.Ticks{BroadcastIntervalTicks: 5, HeartbeatTimeoutTicks: 40, IdleHeartbeatIntervalTicks: 10,
		IdleHeartbeatTimeoutTicks: 60}
}

// waitBound only guards a test from hanging when the cluster never gets there; nothing is timed.
const waitBound = 60 * time.Second

type metaNode struct {
	id    uint16
	node  *shard.Node
	group *Group
}

func startMetaCluster(t *testing.T, dirs []string) []*metaNode {
	return startMetaClusterTB(t, dirs, 2*time.Millisecond, nil, nil)
}

// metaNodeOpts adjusts one test node.
type metaNodeOpts struct {
	tune     func(*Config)
	wrap     func(ring.Ring) ring.Ring // shard 0's ring (shard.Config.WrapRing)
	schedule heartbeat.Ticks           // zero: metaTestTicks()
	drain    time.Duration             // shard.Config.DrainTimeout (zero: the default)
	taskRun  ring.TaskRun              // the shard ring's task-run mode (empty: the default)
}

// startMetaClusterTB formats dirs and starts one node on each; opts (when not nil) adjusts node id,
// and before runs on each node before it starts.
func startMetaClusterTB(t testing.TB, dirs []string, tick time.Duration, opts func(id uint16) metaNodeOpts,
	before func(*metaNode)) []*metaNode {
	t.Helper()
	var nodes []*metaNode
	for i, dir := range dirs {
		if err := Format(FormatConfig{Dir: dir, Cluster: 42, Node: uint16(i + 1), Replica: uint8(i)}); err != nil {
			t.Fatal(err)
		}
	}
	for i, dir := range dirs {
		var o metaNodeOpts
		if opts != nil {
			o = opts(uint16(i + 1))
		}
		nodes = append(nodes, newMetaNode(t, uint16(i+1), dir, tick, netip.MustParseAddrPort("127.0.0.1:0"), o))
	}
	for _, n := range nodes {
		if before != nil {
			before(n)
		}
		startMetaNode(t, n, nodes)
	}
	t.Cleanup(func() {
		for _, n := range nodes {
			_ = n.node.Stop()
			n.group.Close()
		}
	})
	return nodes
}

// newMetaNode opens node id's metadata replica from dir and puts it on a shard node listening on listen,
// with proposals waking shard 0 (SetWake) as a node wires it.
func newMetaNode(t testing.TB, id uint16, dir string, tick time.Duration, listen netip.AddrPort,
	o metaNodeOpts) *metaNode {
	t.Helper()
	members := []shard.Member{{Index: 0, Node: 1}, {Index: 1, Node: 2}, {Index: 2, Node: 3}}
	vcfg := vsr.DefaultConfig(3, uint8(id-1))
	vcfg.PrepareTimeoutTicks, vcfg.RepairTimeoutTicks, vcfg.ViewChangeTimeoutTicks = 10, 10, 80
	cfg := Config{Dir: dir, Cluster: 42, Node: id, Members: members, VSR: vcfg}
	if o.tune != nil {
		o.tune(&cfg)
	}
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	sc := shard.Config{Node: id, Cluster: 42, Shards: 1, Tick: tick, Schedule: metaTestTicks(),
		Listen: listen, OutboxBytes: 1 << 20, QueueCapacity: 1024, DrainTimeout: o.drain}
	sc.Ring.TaskRun = o.taskRun
	if o.schedule != (heartbeat.Ticks{}) {
		sc.Schedule = o.schedule
	}
	if o.wrap != nil {
		sc.WrapRing = func(_ int, r ring.Ring) ring.Ring { return o.wrap(r) }
	}
	n, err := shard.NewNode(sc)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.AddGroup(g); err != nil {
		t.Fatal(err)
	}
	g.SetWake(func() { n.Wake(0) })
	return &metaNode{id: id, node: n, group: g}
}

// startMetaNode starts n with every other node of nodes as its peers.
func startMetaNode(t testing.TB, n *metaNode, nodes []*metaNode) {
	t.Helper()
	var peers []shard.Peer
	for _, o := range nodes {
		if o.id != n.id {
			peers = append(peers, shard.Peer{Node: o.id, Addr: o.node.Addr()})
		}
	}
	if err := n.node.Start(peers); err != nil {
		t.Fatal(err)
	}
}

// waitFor polls the published status of the live nodes until cond holds (the bound only guards
// against a hang).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitBound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never reached: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func waitForTB(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitBound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never reached: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func primaryOf(nodes []*metaNode, alive map[uint16]bool) *metaNode {
	for _, n := range nodes {
		if alive[n.id] && n.group.Status().Primary {
			return n
		}
	}
	return nil
}

// commitOp proposes op on the current primary until it commits, retrying on another replica when the
// one asked is not (or no longer) the primary.
func commitOp(t testing.TB, nodes []*metaNode, alive map[uint16]bool, client, request uint64, op []byte) ProposeResult {
	t.Helper()
	deadline := time.Now().Add(waitBound)
	for time.Now().Before(deadline) {
		p := primaryOf(nodes, alive)
		if p == nil {
			time.Sleep(5 * time.Millisecond)
			continue
		}
		select {
		case res := <-p.group.Propose(client, request, op):
			if res.Err == nil {
				return res
			}
			t.Logf("propose %d on node %d: %v", request, p.id, res.Err)
		case <-time.After(2 * time.Second):
			for _, n := range nodes {
				t.Logf("node %d: %+v", n.id, n.group.Status())
			}
		}
	}
	t.Fatalf("op %d of client %d never committed", request, client)
	return ProposeResult{}
}

func TestMetaGroup_ThreeNodesOpsSurvivePrimaryKillAndItsRestart(t *testing.T) {
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	nodes := startMetaCluster(t, dirs)
	alive := map[uint16]bool{1: true, 2: true, 3: true}
	waitFor(t, "a primary", func() bool { return primaryOf(nodes, alive) != nil })

	const client = 77
	for req := uint64(1); req <= 5; req++ {
		op := meta.AppendOp(nil, meta.RegisterNode{Node: uint16(100 + req), Address: fmt.Sprintf("10.0.0.%d:7000", req)})
		res := commitOp(t, nodes, alive, client, req, op)
		if r, err := meta.DecodeResult(res.Result); err != nil || !r.OK() {
			t.Fatalf("register node %d: %v %v", 100+req, r, err)
		}
	}
	old := primaryOf(nodes, alive)
	oldView := old.group.Status().View
	committed := old.group.Status().Commit
	t.Logf("node %d is primary of view %d with commit %d; stopping it", old.id, oldView, committed)
	if err := old.node.Stop(); err != nil {
		t.Fatal(err)
	}
	alive[old.id] = false

	waitFor(t, "a new primary", func() bool {
		p := primaryOf(nodes, alive)
		return p != nil && p.group.Status().View > oldView
	})
	var last uint64
	for req := uint64(6); req <= 8; req++ {
		op := meta.AppendOp(nil, meta.RegisterNode{Node: uint16(100 + req), Address: "10.0.1.1:7000"})
		res := commitOp(t, nodes, alive, client, req, op)
		if res.Op <= committed {
			t.Fatalf("op %d committed at %d, at or below the old commit %d", req, res.Op, committed)
		}
		last = res.Op
	}
	waitFor(t, "both survivors at the last op's commit", func() bool {
		for _, n := range nodes {
			if alive[n.id] && n.group.Status().Commit < last {
				return false
			}
		}
		return true
	})

	// The stopped primary comes back on its address from its own files, rejoins as a backup and
	// catches up.
	addr := old.node.Addr()
	old.group.Close()
	back := newMetaNode(t, old.id, dirs[old.id-1], 2*time.Millisecond, addr, metaNodeOpts{})
	if st := back.group.Status(); st.Primary || st.Normal || st.Op < committed {
		t.Fatalf("restarted primary %+v: it must hold its ops and start a view change, not resume as primary", st)
	}
	nodes[old.id-1] = back
	startMetaNode(t, back, nodes)
	alive[old.id] = true
	op9 := meta.AppendOp(nil, meta.RegisterNode{Node: 109, Address: "10.0.1.2:7000"})
	last = commitOp(t, nodes, alive, client, 9, op9).Op
	waitFor(t, "all three at the last op's commit", func() bool {
		for _, n := range nodes {
			if n.group.Status().Commit < last {
				return false
			}
		}
		return true
	})

	for _, n := range nodes {
		if alive[n.id] {
			_ = n.node.Stop()
		}
	}
	var digest uint64
	for _, n := range nodes {
		if !alive[n.id] {
			continue
		}
		st := n.group.State()
		for id := uint16(101); id <= 109; id++ {
			if _, ok := st.Node(id); !ok {
				t.Errorf("node %d: registered node %d lost", n.id, id)
			}
		}
		if digest != 0 && n.group.Digest() != digest {
			t.Errorf("node %d digest differs from another replica's", n.id)
		}
		digest = n.group.Digest()
	}
	// Every replica reopens from its files: the survivors hold every op up to the last one durably
	// (they acknowledged them), the stopped primary the ops it held, and none is ahead of the group.
	for i, n := range nodes {
		n.group.Close()
		g, err := New(Config{Dir: dirs[i], Cluster: 42, Node: n.id, Members: n.group.cfg.Members,
			VSR: n.group.cfg.VSR})
		if err != nil {
			t.Fatalf("reopen node %d: %v", n.id, err)
		}
		st := g.Status()
		g.Close()
		if alive[n.id] && st.Op < last {
			t.Errorf("node %d reopened at op %d, below the acknowledged op %d", n.id, st.Op, last)
		}
		if !alive[n.id] && st.Op < committed {
			t.Errorf("stopped primary reopened at op %d, below its commit %d", st.Op, committed)
		}
		if st.Op > last {
			t.Errorf("node %d reopened at op %d, past the last op %d", n.id, st.Op, last)
		}
	}
}

// With a checkpoint every 8 ops and compaction on every checkpoint, the log files keep only records
// past the latest checkpoint, and every replica reopens with all 40 ops.
func TestMetaGroup_LogCompactedAfterCheckpoints(t *testing.T) {
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	tune := func(uint16) metaNodeOpts {
		return metaNodeOpts{tune: func(c *Config) {
			c.VSR.PipelineOpsMax, c.VSR.CheckpointOps, c.LogCompactBytes = 4, 8, 1
		}}
	}
	nodes := startMetaClusterTB(t, dirs, 2*time.Millisecond, tune, nil)
	alive := map[uint16]bool{1: true, 2: true, 3: true}
	var last uint64
	for req := uint64(1); req <= 40; req++ {
		op := meta.AppendOp(nil, meta.RegisterNode{Node: uint16(200 + req), Address: "10.0.2.1:7000"})
		last = commitOp(t, nodes, alive, 5, req, op).Op
	}
	waitFor(t, "all three at the last commit", func() bool {
		for _, n := range nodes {
			if n.group.Status().Commit < last {
				return false
			}
		}
		return true
	})
	for _, n := range nodes {
		_ = n.node.Stop()
		n.group.Close()
	}
	for i, n := range nodes {
		file, err := os.ReadFile(filepath.Join(dirs[i], metaLogFile))
		if err != nil {
			t.Fatal(err)
		}
		_, log := splitLogFile(file)
		// Checkpoints fell at ops 8, 16, 24, 32 and 40: after compaction no record at or below op 32
		// is left (without it, the file would start at op 1).
		for off := 0; off < len(log); {
			e, size, err := vsr.DecodeLogRecord(log[off:])
			if err != nil {
				t.Fatalf("node %d log record at %d: %v", n.id, off, err)
			}
			if e.Op <= 32 {
				t.Errorf("node %d log still holds op %d: not compacted", n.id, e.Op)
			}
			off += size
		}
		g, err := New(Config{Dir: dirs[i], Cluster: 42, Node: n.id, Members: n.group.cfg.Members,
			VSR: n.group.cfg.VSR})
		if err != nil {
			t.Fatalf("reopen node %d after compaction: %v", n.id, err)
		}
		st, commit := g.State(), g.Status().Commit
		g.Close()
		if commit < 32 {
			t.Errorf("node %d reopened at commit %d, below its checkpoints", n.id, commit)
		}
		for id := uint64(1); id <= commit && id <= 40; id++ {
			if _, ok := st.Node(uint16(200 + id)); !ok {
				t.Errorf("node %d: registered node %d missing after reopen", n.id, 200+id)
			}
		}
	}
}

// storeRing opens a metadata store in a fresh directory and a real ring of entries slots on the
// test's locked thread, as shard 0 would hand it over.
func storeRing(t *testing.T, entries uint32) (*metaStore, ring.Ring, string) {
	t.Helper()
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
	dir := t.TempDir()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	if err := Format(FormatConfig{Dir: dir, Cluster: 1, Node: 1}); err != nil {
		t.Fatal(err)
	}
	s, _, err := openMetaStore(dir, vsr.Identity{Cluster: 1, Node: 1}, 64<<20, logger)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.close)
	rg, err := ring.New(ring.Config{Entries: entries, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rg.Close() })
	return s, rg, dir
}

// testPersist is persist id: a log append of logBytes bytes of id and a superblock copy of id, in the
// area of sequence id.
func testPersist(id uint64, logBytes int) metaPersist {
	p := metaPersist{id: id, copy: bytes.Repeat([]byte{byte(id)}, vsr.SuperblockSize), area: vsr.AreaOf(id)}
	if logBytes > 0 {
		p.log = bytes.Repeat([]byte{byte(id)}, logBytes)
	}
	return p
}

// settle waits for and dispatches every operation on rg, as the shard's loop would.
func settle(t testing.TB, rg ring.Ring) {
	t.Helper()
	for rg.InFlight() > 0 {
		if err := rg.Wait(1); err != nil {
			t.Fatal(err)
		}
		rg.Dispatch()
	}
}

// Persists queue on the shard's ring one chain at a time, in order, and each is durable (done) only
// when its chain completed; before the ring is attached nothing is queued.
func TestMetaStore_PersistsRunOnTheRingOneChainAtATime(t *testing.T) {
	s, rg, dir := storeRing(t, 64)
	s.submit(testPersist(1, 100))
	if done, _ := s.durable(); done != 0 || rg.InFlight() != 0 {
		t.Fatalf("before attach: done %d, in flight %d", done, rg.InFlight())
	}
	s.attach(rg)
	s.kick()
	s.submit(testPersist(2, 50))
	s.submit(testPersist(3, 0))
	if got := rg.InFlight(); got != 2+vsr.SuperblockCopies {
		t.Fatalf("in flight %d, want only persist 1's chain of %d (log write, the copies' writes, one fdatasync)", got,
			2+vsr.SuperblockCopies)
	}
	if done, _ := s.durable(); done != 0 {
		t.Fatalf("done %d before any completion", done)
	}
	ids := []uint64{}
	for rg.InFlight() > 0 {
		if err := rg.Wait(1); err != nil {
			t.Fatal(err)
		}
		rg.Dispatch()
		if done, _ := s.durable(); len(ids) == 0 || ids[len(ids)-1] != done {
			ids = append(ids, done)
		}
	}
	if done, err := s.durable(); done != 3 || err != nil {
		t.Fatalf("durable %d %v, want 3", done, err)
	}
	for i, id := range ids[1:] {
		if id != ids[i]+1 {
			t.Fatalf("persists became durable out of order: %v", ids)
		}
	}
	file, err := os.ReadFile(filepath.Join(dir, metaLogFile))
	if err != nil {
		t.Fatal(err)
	}
	want := append(bytes.Repeat([]byte{1}, 100), bytes.Repeat([]byte{2}, 50)...)
	if !bytes.Equal(file[metaHeaderSize:], want) {
		t.Fatalf("log holds %d bytes, want persist 1's 100 then persist 2's 50", len(file)-metaHeaderSize)
	}
	for slot := 0; slot < vsr.SuperblockSlots; slot++ {
		c := file[slot*vsr.CopySlotSize:]
		want := byte(2) // persists 2 then 3 wrote their areas last
		if slot/vsr.SuperblockCopies == vsr.AreaOf(3) {
			want = 3
		}
		if c[0] != want || c[vsr.SuperblockSize-1] != want {
			t.Fatalf("copy slot %d starts with %d, want persist %d's copy", slot, c[0], want)
		}
	}
}

// With no room on the ring for a whole chain, the persist stays queued, nothing of it is queued, and
// a later kick (the next tick) starts it.
func TestMetaStore_QueueFullRetriesOnALaterKick(t *testing.T) {
	s, rg, _ := storeRing(t, 8)
	s.attach(rg)
	nops := &nopCounter{}
	for i := 0; i < 5; i++ { // 5 of 8 slots taken: no room for a chain of 6
		if err := rg.Nop(nops, uint64(i), 0); err != nil {
			t.Fatal(err)
		}
	}
	s.submit(testPersist(1, 10))
	if got := rg.InFlight(); got != 5 || len(s.queue) != 1 {
		t.Fatalf("in flight %d, queued %d: the persist (a chain of %d) must wait whole", got, len(s.queue),
			2+vsr.SuperblockCopies)
	}
	settle(t, rg)
	if done, _ := s.durable(); done != 0 || nops.n != 5 {
		t.Fatalf("done %d, nops %d", done, nops.n)
	}
	s.kick()
	settle(t, rg)
	if done, err := s.durable(); done != 1 || err != nil {
		t.Fatalf("after the retry: durable %d %v, want 1", done, err)
	}
}

type nopCounter struct{ n int }

func (c *nopCounter) Complete(ring.Completion) { c.n++ }

// A failed write stops the store: the error is reported, the persist is not durable, and nothing
// after it is queued.
func TestMetaStore_FailedWriteStopsEverything(t *testing.T) {
	s, rg, dir := storeRing(t, 64)
	ro, err := unix.Open(filepath.Join(dir, metaLogFile), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	_ = unix.Close(s.logFD)
	s.logFD = ro // the log write fails with EBADF
	s.attach(rg)
	s.submit(testPersist(1, 10))
	s.submit(testPersist(2, 10))
	settle(t, rg)
	done, err := s.durable()
	if done != 0 || !errors.Is(err, ErrStorage) || !errors.Is(err, unix.EBADF) {
		t.Fatalf("durable %d %v, want 0 and a storage error wrapping EBADF", done, err)
	}
	s.submit(testPersist(3, 10))
	s.kick()
	if rg.InFlight() != 0 || len(s.queue) != 0 {
		t.Fatalf("after a failure: in flight %d, queued %d", rg.InFlight(), len(s.queue))
	}
}
