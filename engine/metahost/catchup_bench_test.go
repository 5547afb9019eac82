package metahost

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/engine/vsr"
	"github.com/ringstream/ringstream/shard/heartbeat"
)

var catchUpStreams = flag.Int("meta.catchup.streams", 20_000,
	"streams in the metadata state of BenchmarkMetaGroupCatchUp (1000000 for the figures in BENCHMARKS.md)")

// catchUpOpts gives the replicas heartbeat timeouts (60 s) and a failover grace (1 s) far past the
// time a restarted node's links take to come up and past the pauses of a loaded machine (a checkpoint
// of 1,000,000 streams encodes for about a second on shard 0), so the restarted backup follows the
// primary it finds and no view change starts: a view change's messages carry the log above the
// checkpoint in one frame, which at these op sizes (a CreateStreams of 100 names is 2.7 KiB, and the
// log holds up to two checkpoints' worth, 2,048 ops: 5.6 MB) a
// link's outbox cannot take, so it would never end. Checkpoints come every checkpointOps
// (the default 1,024, fewer when the run has fewer than 4,096 ops, so that it still needs a transfer).
func catchUpOpts(checkpointOps uint64) metaNodeOpts {
	return metaNodeOpts{
		tune: func(c *Config) {
			c.VSR.CheckpointOps = checkpointOps
			c.VSR.ViewChangeTimeoutTicks = 120_000
			c.EagerFailoverGraceTicks = 1000
		},
		schedule: heartbeat.Ticks{BroadcastIntervalTicks: 5, HeartbeatTimeoutTicks: 60_000,
			IdleHeartbeatIntervalTicks: 10, IdleHeartbeatTimeoutTicks: 90_000},
	}
}

// catchUpWorkers is how many proposers build the state at once, so the pipeline stays full.
const catchUpWorkers = 8

// BenchmarkMetaGroupCatchUp: three metadata replicas on real shards over loopback TCP; a backup is
// stopped, the other two commit -meta.catchup.streams stream creations (batched CreateStreams ops of
// meta.BatchEntriesMax, three copies each, 14-byte names), then the backup starts again from its
// directory, far behind the primary's checkpoint, and catches up by a state transfer in chunks.
// Reported: catchup-ms, from its start to its commit reaching the primary's (normal status);
// checkpoint-MiB and the chunks in (receiver) and out (sender), transfers restarted; heap-peak-MiB,
// the process's heap growth at its peak during the catch-up over the heap just before (the receiver's
// transfer buffer and restored state, frames in flight, and garbage not yet collected: three replicas
// share this process); and the baseline of the same run, the primary's state encoded (encode-ms) and
// restored into a new state (restore-ms) in process, what BenchmarkState_Scale measures. Run with
// -benchtime 1x.
func BenchmarkMetaGroupCatchUp(b *testing.B) {
	n := *catchUpStreams
	for b.Loop() {
		catchUpOnce(b, n)
	}
}

func catchUpOnce(b *testing.B, streams int) {
	dirs := []string{b.TempDir(), b.TempDir(), b.TempDir()}
	checkpointOps := uint64(min(1024, max(32, streams/meta.BatchEntriesMax/4)))
	nodes := startMetaClusterTB(b, dirs, time.Millisecond, func(uint16) metaNodeOpts { return catchUpOpts(checkpointOps) },
		nil)
	alive := map[uint16]bool{1: true, 2: true, 3: true}
	waitForTB(b, "a primary", func() bool { return primaryOf(nodes, alive) != nil })
	for id := uint16(1); id <= 3; id++ {
		commitOp(b, nodes, alive, 9, uint64(id), meta.AppendOp(nil, meta.RegisterNode{Node: id,
			Address: fmt.Sprintf("10.0.0.%d:7002", id)}))
	}
	p := primaryOf(nodes, alive)
	victim := nodes[p.id%3] // a backup
	addr := victim.node.Addr()
	if err := victim.node.Stop(); err != nil {
		b.Fatal(err)
	}
	victim.group.Close()
	alive[victim.id] = false

	start := time.Now()
	target := createStreams(b, nodes, alive, streams)
	built := time.Since(start)
	waitForTB(b, "the primary's status at the last create", func() bool {
		p = primaryOf(nodes, alive)
		return p != nil && p.group.Status().Commit >= target
	})
	target = p.group.Status().Commit

	runtime.GC()
	before := heapObjects()
	var peak atomic.Uint64
	stop := make(chan struct{})
	var sampled sync.WaitGroup
	sampled.Add(1)
	go func() {
		defer sampled.Done()
		for {
			if h := heapObjects(); h > peak.Load() {
				peak.Store(h)
			}
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	back := newMetaNode(b, victim.id, dirs[victim.id-1], time.Millisecond, addr, catchUpOpts(checkpointOps))
	nodes[victim.id-1] = back
	alive[victim.id] = true
	b.Cleanup(func() {
		_ = back.node.Stop()
		back.group.Close()
	})
	t0 := time.Now()
	startMetaNode(b, back, nodes)
	for {
		st := back.group.Status()
		if st.Normal && st.Commit >= target {
			break
		}
		if time.Since(t0) > 10*time.Minute {
			b.Fatalf("the restarted replica never caught up: %+v", st)
		}
		time.Sleep(time.Millisecond)
	}
	catchUp := time.Since(t0)
	close(stop)
	sampled.Wait()

	recv, send := back.group.Status(), p.group.Status()
	for _, nd := range nodes {
		_ = nd.node.Stop()
	}
	if back.group.Digest() != p.group.Digest() {
		b.Fatalf("the caught-up replica's state differs from the primary's:\n receiver %+v\n primary %+v", recv, send)
	}
	if recv.Transfer.Installed == 0 {
		b.Fatalf("the replica caught up without a state transfer: %+v", recv.Transfer)
	}
	t1 := time.Now()
	snap := p.group.State().AppendSnapshot(nil)
	encode := time.Since(t1)
	restored := meta.NewState()
	t1 = time.Now()
	if err := restored.Restore(snap); err != nil {
		b.Fatal(err)
	}
	restore := time.Since(t1)

	b.ReportMetric(float64(catchUp.Milliseconds()), "catchup-ms")
	b.ReportMetric(float64(recv.CheckpointBytes)/(1<<20), "checkpoint-MiB")
	b.ReportMetric(float64(recv.Transfer.ChunksIn), "chunks-in")
	b.ReportMetric(float64(send.Transfer.ChunksOut), "chunks-out")
	b.ReportMetric(float64(recv.Transfer.Restarted), "restarts")
	b.ReportMetric(float64(peak.Load()-min(before, peak.Load()))/(1<<20), "heap-peak-MiB")
	b.ReportMetric(float64(encode.Milliseconds()), "encode-ms")
	b.ReportMetric(float64(restore.Milliseconds()), "restore-ms")
	b.ReportMetric(built.Seconds(), "build-s")
	b.ReportMetric(0, "ns/op")
	opBytes := len(createOp(0, streams))
	fmt.Fprintf(os.Stderr, "one CreateStreams op of %d names: %d bytes\n", meta.BatchEntriesMax, opBytes)
	fmt.Fprintf(os.Stderr, "catch-up of %d streams: receiver %+v, sender chunks out %d, checkpoint at op %d of %d\n",
		streams, recv.Transfer, send.Transfer.ChunksOut, recv.Commit, target)
}

// createStreams commits streams stream creations on the primary in CreateStreams ops of
// meta.BatchEntriesMax, from catchUpWorkers proposers at once, and returns the highest op they
// committed at.
func createStreams(b *testing.B, nodes []*metaNode, alive map[uint16]bool, streams int) uint64 {
	batches := (streams + meta.BatchEntriesMax - 1) / meta.BatchEntriesMax
	var next atomic.Int64
	var last atomic.Uint64
	var failed atomic.Value
	var wg sync.WaitGroup
	for w := range catchUpWorkers {
		wg.Add(1)
		go func(client uint64) {
			defer wg.Done()
			for req := uint64(1); ; req++ {
				k := int(next.Add(1) - 1)
				if k >= batches {
					return
				}
				body := createOp(k, streams)
				for deadline := time.Now().Add(waitBound); ; {
					p := primaryOf(nodes, alive)
					if p == nil {
						time.Sleep(time.Millisecond)
						continue
					}
					res := <-p.group.Propose(client, req, body)
					if res.Err == nil {
						for op := last.Load(); op < res.Op && !last.CompareAndSwap(op, res.Op); op = last.Load() {
						}
						break
					}
					if time.Now().After(deadline) || !(errors.Is(res.Err, vsr.ErrPipelineFull) ||
						errors.Is(res.Err, vsr.ErrNotPrimary)) {
						failed.Store(fmt.Errorf("batch %d: %w", k, res.Err))
						return
					}
					time.Sleep(200 * time.Microsecond) // the same request again: the client table answers a repeat
				}
			}
		}(uint64(100 + w))
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatalf("creating streams: %v", err)
	}
	return last.Load()
}

// createOp is the k-th CreateStreams op of a run of streams: streams k*100 .. k*100+99, three copies
// each, owners in turn.
func createOp(k, streams int) []byte {
	majority := meta.Policy{Kind: meta.PolicyMajorityDurable}
	var op meta.CreateStreams
	for i := k * meta.BatchEntriesMax; i < min(streams, (k+1)*meta.BatchEntriesMax); i++ {
		owner := uint16(i%3 + 1)
		var followers []uint16
		for f := uint16(1); f <= 3; f++ {
			if f != owner {
				followers = append(followers, f)
			}
		}
		op.Entries = append(op.Entries, meta.CreateStream{Name: fmt.Sprintf("orders-%07d", i), Copies: 3,
			Policy: majority, Owner: owner, Followers: followers, Stamped: majority})
	}
	return meta.AppendOp(nil, op)
}

// heapObjects is the heap's live and not yet swept object bytes now (no stop of the world).
func heapObjects() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}
