package metahost

import (
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/engine/vsr"
	"github.com/ringstream/ringstream/ring"
)

// p50 records each iteration's duration and reports the median as p50-ns/op beside the mean: under
// load the mean follows the few slowest fdatasyncs, the median less so.
type p50 struct {
	b     *testing.B
	times []time.Duration
	start time.Time
}

func newP50(b *testing.B) *p50 { return &p50{b: b, times: make([]time.Duration, 0, b.N)} }

func (p *p50) begin() { p.start = time.Now() }
func (p *p50) end()   { p.times = append(p.times, time.Since(p.start)) }

func (p *p50) report() {
	if len(p.times) == 0 {
		return
	}
	slices.Sort(p.times)
	p.b.ReportMetric(float64(p.times[len(p.times)/2].Nanoseconds()), "p50-ns/op")
}

// BenchmarkMetaGroupCommit is one metadata op proposed on the primary of three real nodes over
// loopback and committed: the primary sends its prepares at once and persists the op while the two
// backups persist it (each persist one chain on shard 0's ring: log write, the superblock copies'
// writes, one fdatasync) and acknowledge; the op commits once the primary's persist and one backup's
// prepare-ok are in. Proposals wake shard 0 and persists reach the replica in the loop turn they
// complete in, so the tick (1 ms) is not on the path: the target is one fdatasync plus one round trip.
// The three nodes share this machine's disk, so their three fdatasyncs run at once on it
// (BenchmarkFdatasyncThreeFiles). BenchmarkFdatasyncBaseline (one 4 KiB pwrite + fdatasync on the same
// file system) and BenchmarkLoopbackRoundTrip (one 64-byte TCP ping-pong on 127.0.0.1) are the
// baselines, to run in the same invocation.
func BenchmarkMetaGroupCommit(b *testing.B) {
	dirs := []string{b.TempDir(), b.TempDir(), b.TempDir()}
	nodes := startMetaClusterTB(b, dirs, time.Millisecond, nil, nil)
	alive := map[uint16]bool{1: true, 2: true, 3: true}
	for primaryOf(nodes, alive) == nil {
		time.Sleep(time.Millisecond)
	}
	op := meta.AppendOp(nil, meta.RegisterNode{Node: 500, Address: "10.0.0.1:7000"})
	p := newP50(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p.begin()
		commitOp(b, nodes, alive, 9, uint64(i+1), op)
		p.end()
	}
	p.report()
}

// BenchmarkMetaGroupCommitInterleaved runs two three-node clusters in one process, one persisting in
// one fdatasync, the other in two (every persist split: the cost before this layout), and commits one
// op on each per iteration, reporting the medians (one-sync-p50-ns, two-sync-p50-ns): under load the
// ratio of the two holds better than either figure alone.
func BenchmarkMetaGroupCommitInterleaved(b *testing.B) {
	benchInterleaved(b, [2]string{"one-sync-p50-ns", "two-sync-p50-ns"}, nil,
		func(n *metaNode) { n.group.store.twoSync = true })
}

// BenchmarkMetaGroupCommitYield is the same with a cluster whose pump yields after answering a
// proposer against one that does not (the cost before), reporting yield-p50-ns and no-yield-p50-ns.
func BenchmarkMetaGroupCommitYield(b *testing.B) {
	benchInterleaved(b, [2]string{"yield-p50-ns", "no-yield-p50-ns"}, nil,
		func(n *metaNode) { n.group.noYield = true })
}

// BenchmarkMetaGroupCommitPerTurn is the same with a cluster that pumps its replica once per loop turn
// (the default) against one that pumps after every frame (the way before), reporting per-turn-p50-ns
// and per-frame-p50-ns: one op at a time, where batching has nothing to gather, should cost the same.
func BenchmarkMetaGroupCommitPerTurn(b *testing.B) {
	benchInterleaved(b, [2]string{"per-turn-p50-ns", "per-frame-p50-ns"}, nil,
		func(n *metaNode) { n.group.pumpEachFrame = true })
}

// BenchmarkMetaGroupCommitTaskRun is the same with a cluster whose rings run COOP_TASKRUN (the
// default) against one whose rings run DEFER_TASKRUN, reporting coop-p50-ns and defer-p50-ns.
func BenchmarkMetaGroupCommitTaskRun(b *testing.B) {
	benchInterleaved(b, [2]string{"coop-p50-ns", "defer-p50-ns"},
		func(uint16) metaNodeOpts { return metaNodeOpts{taskRun: ring.TaskRunDefer} }, nil)
}

// benchInterleaved runs two three-node clusters in one process, the second with opts and before (each
// may be nil) applied to each of its nodes, commits one op on each per iteration, and reports each
// cluster's median op time under its name.
func benchInterleaved(b *testing.B, names [2]string, opts func(uint16) metaNodeOpts, before func(*metaNode)) {
	var clusters [2][]*metaNode
	for i := range clusters {
		if i == 0 {
			clusters[i] = startMetaClusterTB(b, []string{b.TempDir(), b.TempDir(), b.TempDir()}, time.Millisecond, nil, nil)
		} else {
			clusters[i] = startMetaClusterTB(b, []string{b.TempDir(), b.TempDir(), b.TempDir()}, time.Millisecond, opts, before)
		}
	}
	alive := map[uint16]bool{1: true, 2: true, 3: true}
	for primaryOf(clusters[0], alive) == nil || primaryOf(clusters[1], alive) == nil {
		time.Sleep(time.Millisecond)
	}
	op := meta.AppendOp(nil, meta.RegisterNode{Node: 500, Address: "10.0.0.1:7000"})
	var times [2][]time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for c, nodes := range clusters {
			start := time.Now()
			commitOp(b, nodes, alive, 9, uint64(i+1), op)
			times[c] = append(times[c], time.Since(start))
		}
	}
	b.StopTimer()
	for c, name := range names {
		slices.Sort(times[c])
		b.ReportMetric(float64(times[c][len(times[c])/2].Nanoseconds()), name)
	}
}

func BenchmarkLoopbackRoundTrip(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, 64)
		for {
			if _, err := io.ReadFull(c, buf); err != nil {
				return
			}
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 64)
	p := newP50(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p.begin()
		if _, err := c.Write(buf); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			b.Fatal(err)
		}
		p.end()
	}
	p.report()
}

func BenchmarkFdatasyncBaseline(b *testing.B) {
	fd := baselineFile(b, "baseline")
	buf := make([]byte, 4096)
	p := newP50(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p.begin()
		writeSync(b, fd, buf, i)
		p.end()
	}
	p.report()
}

// BenchmarkFdatasyncThreeFiles is BenchmarkFdatasyncBaseline on three files at once, one goroutine
// each, as the benchmark's three nodes persist one op on one disk: an iteration ends when all three
// are durable. Against the baseline it says how far the disk serializes concurrent fdatasyncs.
func BenchmarkFdatasyncThreeFiles(b *testing.B) {
	fds := []int{baselineFile(b, "a"), baselineFile(b, "b"), baselineFile(b, "c")}
	p := newP50(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p.begin()
		var wg sync.WaitGroup
		for _, fd := range fds {
			wg.Add(1)
			go func() {
				defer wg.Done()
				writeSync(b, fd, make([]byte, 4096), i)
			}()
		}
		wg.Wait()
		p.end()
	}
	p.report()
}

func baselineFile(b *testing.B, name string) int {
	f, err := os.Create(filepath.Join(b.TempDir(), name))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() })
	return int(f.Fd())
}

func writeSync(b *testing.B, fd int, buf []byte, i int) {
	if _, err := unix.Pwrite(fd, buf, int64(i%256)*4096); err != nil {
		b.Error(err)
		return
	}
	if err := unix.Fdatasync(fd); err != nil {
		b.Error(err)
	}
}

// BenchmarkMetaStorePersist is one persist of one op on one replica's store, alone on its ring and
// driven as the shard's loop drives it, interleaved in every iteration with two baselines on the same
// disk: the same persist in two steps (the log append and fdatasync, then the copies and fdatasync:
// the cost before one fdatasync per persist, here forced with the split path) and one plain 4 KiB
// pwrite + fdatasync. It reports the median of each (one-sync-p50-ns, two-sync-p50-ns,
// fdatasync-p50-ns); ns/op is the three together. Interleaving keeps the disk's drift under load out
// of the ratios.
func BenchmarkMetaStorePersist(b *testing.B) {
	dir := b.TempDir()
	if err := Format(FormatConfig{Dir: dir, Cluster: 1, Node: 1}); err != nil {
		b.Fatal(err)
	}
	s, _, err := openMetaStore(dir, vsr.Identity{Cluster: 1, Node: 1}, 1<<40,
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		b.Fatal(err)
	}
	defer s.close()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	rg, err := ring.New(ring.Config{Entries: 64, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	defer rg.Close()
	s.attach(rg)
	fd := baselineFile(b, "baseline")
	page := make([]byte, 4096)
	body := registerOp(500)
	parent, seq := uint64(0), uint64(1)
	var one, two, plain []time.Duration
	persist := func(split bool) time.Duration {
		seq++
		fx, sum := opPersistBody(seq, seq-1, parent, body)
		parent = sum
		p := buildPersist(s.buffer(), &fx, split)
		p.split = split
		start := time.Now()
		s.submit(p)
		settle(b, rg)
		return time.Since(start)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		one = append(one, persist(false))
		two = append(two, persist(true))
		start := time.Now()
		writeSync(b, fd, page, i)
		plain = append(plain, time.Since(start))
	}
	b.StopTimer()
	for _, m := range []struct {
		name string
		d    []time.Duration
	}{{"one-sync-p50-ns", one}, {"two-sync-p50-ns", two}, {"fdatasync-p50-ns", plain}} {
		slices.Sort(m.d)
		b.ReportMetric(float64(m.d[len(m.d)/2].Nanoseconds()), m.name)
	}
	if done, err := s.durable(); done != seq || err != nil {
		b.Fatalf("durable %d %v, want %d", done, err, seq)
	}
}
