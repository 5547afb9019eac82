package streamhost_test

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/engine/stream"
	"github.com/ringstream/ringstream/engine/streamhost"
	"github.com/ringstream/ringstream/internal/fds"
	"github.com/ringstream/ringstream/ring"
	"github.com/ringstream/ringstream/segment"
	"github.com/ringstream/ringstream/shard"
	"github.com/ringstream/ringstream/wire"
)

// benchWindow is how many produces the throughput benchmarks keep waiting for confirmation, as
// BenchmarkRawAppend keeps appends waiting for their group commit.
const benchWindow = 256

func majority(owner uint16, followers ...uint16) meta.Assignment {
	return meta.Assignment{Epoch: 1, Owner: owner, Followers: followers, Policy: meta.Policy{Kind: meta.PolicyMajorityDurable}}
}

// loadGen produces 1 KiB records, one per batch, to the owner of a cluster: requests reach the
// owner's shard through Node.Run (as client requests from outside would), answers are counted in
// the owner's reply sink.
type loadGen struct {
	c      *cluster
	owner  *testNode
	body   []byte
	acked  atomic.Int64
	wake   chan struct{}
	msgs   []stream.Message // requests of one Run (owner's shard goroutine)
	sentAt []time.Time      // pacing: when each request was sent (written before its Run)
	lat    []time.Duration  // pacing: produce to confirm, by request (written on the shard)
}

func newLoadGen(c *cluster) *loadGen {
	g := &loadGen{c: c, owner: c.nodes[c.asg.Owner], body: make([]byte, recordBytes), wake: make(chan struct{}, 1)}
	g.owner.sink.produced = func(r *stream.Reply) {
		if r.Kind != stream.ReplyProduce {
			panic(fmt.Sprintf("produce answered %+v", r))
		}
		if g.lat != nil {
			g.lat[r.Produce.RequestID] = time.Since(g.sentAt[r.Produce.RequestID])
		}
		g.acked.Add(1)
		select {
		case g.wake <- struct{}{}:
		default:
		}
	}
	return g
}

// send queues produces [from, to) on the owner's shard without waiting.
func (g *loadGen) send(from, to int) {
	err := g.owner.node.Run(shard.ShardOf(testStream, g.owner.shards), func(s *shard.Shard) {
		g.msgs = g.msgs[:0]
		for i := from; i < to; i++ {
			m := stream.Message{Kind: stream.KindProduce, Client: 1}
			m.Produce = wire.Produce{RequestID: uint64(i), Stream: testStream, Incarnation: testIncarnation, Count: 1, Batch: g.body}
			g.msgs = append(g.msgs, m)
		}
		if err := g.owner.host.StepAll(s, testStream, g.msgs); err != nil {
			panic(err)
		}
	})
	if err != nil {
		panic(err)
	}
}

// run produces n records with benchWindow waiting, counting from base, and waits for every answer.
func (g *loadGen) run(tb testing.TB, base, n int) {
	sent := base
	stall := time.NewTimer(30 * time.Second)
	defer stall.Stop()
	for int(g.acked.Load()) < base+n {
		if a := int(g.acked.Load()); sent < base+n && sent-a <= benchWindow/2 {
			to := min(base+n, a+benchWindow)
			g.send(sent, to)
			sent = to
		}
		select {
		case <-g.wake:
			stall.Reset(30 * time.Second)
		case <-stall.C:
			tb.Fatalf("no answer for 30 s: %d of %d", g.acked.Load()-int64(base), n)
		}
	}
}

// benchProduce reports records/s and process-wide allocations per record of a cluster under load.
func benchProduce(b *testing.B, asg meta.Assignment) {
	c := newCluster(b, asg)
	g := newLoadGen(c)
	g.run(b, 0, 2000) // warm the pools and the links
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	cpuBefore := processCPU(b)
	b.SetBytes(recordBytes)
	b.ResetTimer()
	g.run(b, 2000, b.N)
	b.StopTimer()
	cpu := processCPU(b) - cpuBefore
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/float64(b.N), "allocs/record")
	// The three nodes and the load generator share this process: its CPU time (user and system,
	// every thread) per record is the cluster's, whatever else the machine runs.
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-us/record")
	g.logStats(b)
}

// logStats logs the owner copy's and the owner host's counters (resets and catch-ups explain slow
// runs).
func (g *loadGen) logStats(b *testing.B) {
	for _, id := range append([]uint16{g.c.asg.Owner}, g.c.asg.Followers...) {
		var st streamhost.CopyState
		var hs streamhost.Stats
		n := g.c.nodes[id]
		var ss string
		g.c.run(id, func(s *shard.Shard) {
			st, hs = n.host.State(s, testStream), n.host.Stats(s)
			x := s.Stats()
			ss = fmt.Sprintf("dropped %d unroutable %d linkdown %d datadropped %d linkfail %d routed %d",
				x.FramesDropped.Load(), x.FramesUnroutable.Load(), x.FramesDroppedLinkDown.Load(),
				x.DataFramesDropped.Load(), x.LinkFailures.Load(), x.FramesRouted.Load())
		})
		b.Logf("node %d: copy %+v; host %+v; shard %s", id, st.Stats, hs, ss)
	}
}

// BenchmarkProduce3Copies: (a) a 3-copy majority_durable stream on three real nodes (loopback,
// one disk), 1 KiB records with confirm. Compare with BenchmarkRawAppend in the same run.
// allocs/record counts every allocation of the process: the three nodes and the load generator.
func BenchmarkProduce3Copies(b *testing.B) { benchProduce(b, majority(1, 2, 3)) }

// BenchmarkProduce1Copy: (d) the same with one copy.
func BenchmarkProduce1Copy(b *testing.B) { benchProduce(b, majority(1)) }

// rawEvents counts appends made durable.
type rawEvents struct{ done int }

func (e *rawEvents) AppendDone(segment.LogKind, uint64, uint64, error) { e.done++ }
func (e *rawEvents) ReadDone(segment.LogKind, uint64, []byte, error)   {}
func (e *rawEvents) SealDone(uint64, segment.Seal, error)              {}
func (e *rawEvents) Done(segment.Result)                               {}

// rawLog is one segment log on its own io_uring ring, driven by the calling goroutine.
type rawLog struct {
	r   ring.Ring
	seg *segment.Copy
	ev  rawEvents
}

func newRawLog(b *testing.B) *rawLog {
	runtime.LockOSThread()
	b.Cleanup(runtime.UnlockOSThread)
	r, err := ring.New(ring.Config{Backend: ring.BackendIOUring, Entries: 256, Logger: quiet(), TaskRun: ring.TaskRun(*taskRun)})
	if err != nil {
		b.Skip("io_uring unavailable: ", err)
	}
	rl := &rawLog{r: r}
	rl.seg, _, err = segment.OpenSync(r, filepath.Join(b.TempDir(), "raw"), segment.Config{SegmentBytes: 8 << 20, Logger: quiet()}, &rl.ev)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = rl.seg.CloseSync(); _ = r.Close() })
	return rl
}

// turn flushes, submits and runs completions, blocking only when none arrived.
func (rl *rawLog) turn(b *testing.B) {
	rl.seg.Flush()
	if err := rl.r.Wait(0); err != nil {
		b.Fatal(err)
	}
	if rl.r.Dispatch() > 0 {
		return
	}
	if err := rl.r.Wait(1); err != nil {
		b.Fatal(err)
	}
	rl.r.Dispatch()
}

// BenchmarkRawAppend: the baseline of (a): one segment log's group-committed appends of the same
// 1 KiB batches with the same window, no protocol and no network.
func BenchmarkRawAppend(b *testing.B) {
	rl := newRawLog(b)
	body := make([]byte, recordBytes)
	sent := 0
	b.SetBytes(recordBytes)
	b.ResetTimer()
	for rl.ev.done < b.N {
		for sent < b.N && sent-rl.ev.done < benchWindow {
			h := segment.BatchHeader{RecordCount: 1, Epoch: 1}
			if _, err := rl.seg.Append(uint64(sent), &h, body); err != nil {
				b.Fatal(err)
			}
			sent++
		}
		rl.turn(b)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkConfirmLatency: (b) produce-to-confirm latency on a 3-copy stream at about a tenth of
// the load the stream sustains (measured first, in the same run), against one append + fdatasync
// on a raw segment log, one at a time (fsync), and against three such logs committing at once
// (fsync3: the floor when the three copies share one disk, as here).
func BenchmarkConfirmLatency(b *testing.B) { benchLatency(b, majority(1, 2, 3)) }

// BenchmarkConfirmLatency1Copy: the same on a 1-copy stream (the host's own share of the latency).
func BenchmarkConfirmLatency1Copy(b *testing.B) { benchLatency(b, majority(1)) }

func benchLatency(b *testing.B, asg meta.Assignment) {
	c := newCluster(b, asg)
	g := newLoadGen(c)
	start := time.Now()
	g.run(b, 0, 5000)
	rate := 5000 / time.Since(start).Seconds()
	interval := time.Duration(float64(time.Second) * 10 / rate)
	g.sentAt, g.lat = make([]time.Time, 5000+b.N), make([]time.Duration, 5000+b.N)
	b.ResetTimer()
	next := time.Now()
	for i := range b.N {
		time.Sleep(time.Until(next)) // pacing the load, not waiting for an event
		next = next.Add(interval)
		g.sentAt[5000+i] = time.Now()
		g.send(5000+i, 5000+i+1)
	}
	for g.acked.Load() < int64(5000+b.N) {
		<-g.wake
	}
	b.StopTimer()
	lat := slices.Clone(g.lat[5000:])

	body := make([]byte, recordBytes)
	fsync := commitTimes(b, []*rawLog{newRawLog(b)}, body)
	// The floor of three copies on one disk: three logs appending one record each and committing at
	// once, each on its own ring, as the three nodes do.
	fsync3 := commitTimes(b, []*rawLog{newRawLog(b), newRawLog(b), newRawLog(b)}, body)
	pct := func(d []time.Duration, p float64) float64 {
		slices.Sort(d)
		return float64(d[int(p*float64(len(d)-1))].Microseconds())
	}
	g.logStats(b)
	b.ReportMetric(rate/10, "offered-records/s")
	b.ReportMetric(pct(lat, 0.5), "confirm-p50-µs")
	b.ReportMetric(pct(lat, 0.9), "confirm-p90-µs")
	b.ReportMetric(pct(lat, 0.99), "confirm-p99-µs")
	b.ReportMetric(pct(fsync, 0.5), "fsync-p50-µs")
	b.ReportMetric(pct(fsync, 0.99), "fsync-p99-µs")
	b.ReportMetric(pct(fsync3, 0.5), "fsync3-p50-µs")
}

// commitTimes appends one record of body to every log b.N times, committing them all at once, and
// returns how long each round took until every log had made its record durable.
func commitTimes(b *testing.B, logs []*rawLog, body []byte) []time.Duration {
	times := make([]time.Duration, 0, b.N)
	done := make([]int, len(logs))
	for i := range b.N {
		t0 := time.Now()
		for j, rl := range logs {
			h := segment.BatchHeader{RecordCount: 1, Epoch: 1}
			if _, err := rl.seg.Append(uint64(i), &h, body); err != nil {
				b.Fatal(err)
			}
			done[j] = rl.ev.done
			rl.seg.Flush()
			if _, err := rl.r.Submit(); err != nil {
				b.Fatal(err)
			}
		}
		for j, rl := range logs {
			for rl.ev.done == done[j] {
				rl.turn(b)
			}
		}
		times = append(times, time.Since(t0))
	}
	return times
}

// procStatus reads a field of /proc/self/status in kB.
func procStatus(tb testing.TB, field string) int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		tb.Fatal(err)
	}
	for line := range strings.Lines(string(data)) {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			v, err := strconv.ParseInt(strings.Fields(rest)[0], 10, 64)
			if err != nil {
				tb.Fatal(err)
			}
			return v
		}
	}
	tb.Fatalf("no %s in /proc/self/status", field)
	return 0
}

// processCPU is this process's user plus system CPU time.
func processCPU(tb testing.TB) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func openFDs(tb testing.TB) int {
	n, err := fds.Count()
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

// idleCopies is the copy count of the idle-copy benchmarks: 10,000, or STREAMHOST_IDLE_COPIES.
func idleCopies() int {
	if v, err := strconv.Atoi(os.Getenv("STREAMHOST_IDLE_COPIES")); err == nil && v > 0 {
		return v
	}
	return 10000
}

// raiseFileLimit lifts this process's soft descriptor limit (RLIMIT_NOFILE) to its hard limit: the
// copies park right after their open (segment.Copy.Park) and hold none, but a shard opening 128 at
// once holds a few each.
func raiseFileLimit(b *testing.B) {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		b.Fatal(err)
	}
	if lim.Cur < lim.Max {
		lim.Cur = lim.Max
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
			b.Fatal(err)
		}
	}
}

// keepOpen turns parking off when STREAMHOST_IDLE_KEEP_OPEN=1 (the idle-copy benchmarks' baseline).
func keepOpen() []func(*streamhost.Config) {
	if os.Getenv("STREAMHOST_IDLE_KEEP_OPEN") != "1" {
		return nil
	}
	return []func(*streamhost.Config){func(c *streamhost.Config) { c.IdleCloseTicks = -1 }}
}

// BenchmarkIdleCopies: (e) idle copies open on one node (default 10,000; STREAMHOST_IDLE_COPIES
// sets another count): resident memory and open file descriptors per copy, after a GC, against the
// node before they opened. Idle copies are parked (segment.Copy.Park: no descriptor held); an
// unparked copy would hold four, its two log directories and two active segments.
//
// STREAMHOST_IDLE_KEEP_OPEN=1 turns parking off (IdleCloseTicks -1), the baseline a node had before
// parking: at four descriptors per copy, 4,500 copies are the most this machine's limit holds.
func BenchmarkIdleCopies(b *testing.B) {
	copies := idleCopies()
	raiseFileLimit(b)
	n := soloNode(b, b.TempDir(), keepOpen()...)
	settle := func() {
		runtime.GC()
		debug.FreeOSMemory()
	}
	settle()
	rss0, fd0 := procStatus(b, "VmRSS"), openFDs(b)
	specs := make([]streamhost.Spec, copies)
	for i := range specs {
		specs[i] = soloSpec(uint64(1000 + i))
	}
	b.ResetTimer()
	took, errs := openAll(b, n, specs)
	b.StopTimer()
	if len(errs) > 0 {
		b.Fatal(errs[0])
	}
	// Idle means idle (R20): a copy's owner is busy for commit_heartbeat_timeout after its open, and
	// the shard polls busy groups on every tick.
	deadline := time.Now().Add(30 * time.Second)
	for busyGroups(n) > 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // a few ticks of the idle copies
	settle()
	rss1, fd1 := procStatus(b, "VmRSS"), openFDs(b)
	cpu0, wall0 := processCPU(b), time.Now()
	time.Sleep(2 * time.Second) // the idle copies' own cost: ticks, heartbeats, per-turn polls
	idleCPU := (processCPU(b) - cpu0).Seconds() / time.Since(wall0).Seconds()
	b.ReportMetric(float64(rss1-rss0)/float64(copies), "KiB/copy")
	b.ReportMetric(float64(fd1-fd0)/float64(copies), "fds/copy")
	b.ReportMetric(float64(hostStats(b, n).Parked), "parked")
	b.ReportMetric(idleCPU*1000, "idle-CPU-ms/s")
	b.ReportMetric(float64(sleepingGroups(n)), "sleeping")
	b.ReportMetric(took.Seconds(), "s-to-create")
}

// shardSum sums f over the stats of n's shards.
func shardSum(n *testNode, f func(*shard.Stats) int64) int64 {
	var sum int64
	for _, s := range n.node.Shards() {
		sum += f(s.Stats())
	}
	return sum
}

// busyGroups is how many groups the node's shards lead in the busy state.
func busyGroups(n *testNode) int64 {
	return shardSum(n, func(s *shard.Stats) int64 { return s.GroupsBusy.Load() })
}

// sleepingGroups is how many groups the node's shards have asleep (shard.Sleeper).
func sleepingGroups(n *testNode) int64 {
	return shardSum(n, func(s *shard.Stats) int64 { return s.GroupsSleeping.Load() })
}

// BenchmarkBootCopies: idle copies (default 10,000; STREAMHOST_IDLE_COPIES) created on one node,
// the node stopped, and all of them opened again at the boot of a new node on the same directory,
// each at the next assignment epoch (one log-epoch entry written and fdatasynced per copy), all at
// once on the shard's ring. s-to-boot is the time from Host.Open to the last copy serving.
// STREAMHOST_IDLE_KEEP_OPEN=1: parking off, as BenchmarkIdleCopies.
func BenchmarkBootCopies(b *testing.B) {
	copies := idleCopies()
	raiseFileLimit(b)
	dir := b.TempDir()
	specs := make([]streamhost.Spec, copies)
	for i := range specs {
		specs[i] = soloSpec(uint64(1000 + i))
	}
	tune := keepOpen()
	n := soloNode(b, dir, tune...)
	created, errs := openAll(b, n, specs)
	if len(errs) > 0 {
		b.Fatal(errs[0])
	}
	if err := n.node.Stop(); err != nil {
		b.Fatal(err)
	}
	var booted time.Duration
	for range b.N {
		n = soloNode(b, dir, tune...)
		specs = nextEpoch(specs)
		b.ResetTimer()
		took, errs := openAll(b, n, specs)
		b.StopTimer()
		if len(errs) > 0 {
			b.Fatal(errs[0])
		}
		booted += took
		if err := n.node.Stop(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(created.Seconds(), "s-to-create")
	b.ReportMetric(booted.Seconds()/float64(b.N), "s-to-boot")
}

// countDone counts completions and keeps the first failure.
type countDone struct {
	n   int
	err error
}

func (h *countDone) Complete(c ring.Completion) {
	h.n++
	if err := c.Err(); err != nil && h.err == nil {
		h.err = err
	}
}

// BenchmarkConcurrentFdatasync: the disk's floor for copies that share it. Each op is one round:
// a 1 KiB write linked to an fdatasync on each of files different files of one ext4 directory,
// queued together on one io_uring ring, then waited for. files=1 is one append + fdatasync; 2 and
// 3 are the owner and followers of a 3-copy stream on one disk; the larger counts are a node's
// boot, where every copy writes and fdatasyncs its own log-epochs file.
func BenchmarkConcurrentFdatasync(b *testing.B) {
	for _, files := range []int{1, 2, 3, 16, 256} {
		b.Run(fmt.Sprintf("files=%d", files), func(b *testing.B) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			r, err := ring.New(ring.Config{Backend: ring.BackendIOUring, Entries: 1024, Logger: quiet(), TaskRun: ring.TaskRun(*taskRun)})
			if err != nil {
				b.Skip("io_uring unavailable: ", err)
			}
			defer r.Close()
			dir := b.TempDir()
			fds := make([]int, files)
			for i := range fds {
				if fds[i], err = unix.Open(filepath.Join(dir, strconv.Itoa(i)), unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC, 0o644); err != nil {
					b.Fatal(err)
				}
				defer unix.Close(fds[i])
			}
			buf := make([]byte, 1024)
			h := &countDone{}
			b.ResetTimer()
			for i := range b.N {
				want := h.n + 2*files
				for _, fd := range fds {
					if err := r.Write(h, 0, fd, buf, int64(i%4096)*1024, ring.Link); err != nil {
						b.Fatal(err)
					}
					if err := r.Fsync(h, 0, fd, true, 0); err != nil {
						b.Fatal(err)
					}
				}
				for h.n < want {
					if err := r.Wait(1); err != nil {
						b.Fatal(err)
					}
					r.Dispatch()
				}
			}
			b.StopTimer()
			if h.err != nil {
				b.Fatal(h.err)
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "us/round")
			b.ReportMetric(float64(b.N*files)/b.Elapsed().Seconds(), "fdatasyncs/s")
		})
	}
}
