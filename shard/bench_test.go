package shard_test

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/ringstream/ringstream/shard"
	"github.com/ringstream/ringstream/shard/shardtest"
	"github.com/ringstream/ringstream/wire"
)

// BenchmarkTraffic5s runs the traffic of the issue-5 traffic test over real time: three nodes in one
// process over loopback, two shards each, tick_ms = 10, and measures one 5 s window (500 ticks) of
// Commit and CommitReply traffic beside the unbatched baseline, one 256-byte frame per entry computed
// from the same entry counts. Idle windows start after every group turned idle; busy groups commit an
// op every 10 ticks (100 ms). Run it with -benchtime=1x: one iteration is one whole cluster run.
//
//	nice go test -run '^$' -bench Traffic5s -benchtime=1x ./shard/
func BenchmarkTraffic5s(b *testing.B) {
	for _, groups := range []int{500, 1000} {
		for _, busy := range []bool{false, true} {
			name := fmt.Sprintf("groups=%d/%s", groups, map[bool]string{false: "idle", true: "busy"}[busy])
			b.Run(name, func(b *testing.B) {
				spec := clusterSpec{shards: []int{2, 2, 2}, groups: groups, window: 700, limit: 1200,
					tick: 10 * time.Millisecond}
				if busy {
					spec.commitEvery, spec.window, spec.limit = 10, 100, 600
				}
				for range b.N {
					run := runCluster(b, spec)
					w := run.windowCounters()
					frames := w.commitFrames + w.replyFrames
					unbatchedFrames := w.commitEntries + w.replyEntries
					unbatchedBytes := unbatchedFrames * wire.HeaderSize
					b.ReportMetric(float64(w.commitFrames), "commit_frames/5s")
					b.ReportMetric(float64(w.replyFrames), "reply_frames/5s")
					b.ReportMetric(float64(w.commitEntries), "commit_entries/5s")
					b.ReportMetric(float64(w.replyEntries), "reply_entries/5s")
					b.ReportMetric(float64(w.bytesSent), "bytes/5s")
					b.ReportMetric(float64(unbatchedFrames), "unbatched_frames/5s")
					b.ReportMetric(float64(unbatchedBytes), "unbatched_bytes/5s")
					b.ReportMetric(float64(unbatchedFrames)/float64(max(frames, 1)), "frame_ratio")
					b.ReportMetric(float64(unbatchedBytes)/float64(max(w.bytesSent, 1)), "byte_ratio")
				}
			})
		}
	}
}

// BenchmarkTickBatching measures one tick of a shard leading 1000 busy groups with members on two
// peers (2000 Commit entries encoded in place into two outboxes), beside the unbatched baseline: the
// same 2000 entries each encoded as its own 256-byte frame with both checksums. One op is one tick.
//
//	nice go test -run '^$' -bench TickBatching -benchmem ./shard/
func BenchmarkTickBatching(b *testing.B) {
	b.Run("batched", func(b *testing.B) {
		var groups []*shardtest.Group
		for id := uint64(1); id <= 1000; id++ {
			g := newGroup(id, []uint16{1, 2, 3}, 1, 1)
			g.CommitEvery = 1
			groups = append(groups, g)
		}
		n := offlineNode(b, 1, 1, []uint16{2, 3}, groups...)
		s := n.Shards()[0]
		runTicks(n, 10)
		s.DiscardOutboxes()
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			s.RunTick((s.Tick() + 1) * 1000)
			s.DiscardOutboxes()
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/2000, "ns/entry")
	})
	b.Run("unbatched", func(b *testing.B) {
		out := make([]byte, 0, 2000*wire.HeaderSize)
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			out = out[:0]
			for id := uint64(1); id <= 2000; id++ {
				start := len(out)
				h := wire.Header{Cluster: testCluster, Sender: 1, Command: wire.CommandCommit}
				out = wire.BeginFrame(out, &h)
				binary.LittleEndian.PutUint64(out[start+wire.AreaOffset:], id)
				binary.LittleEndian.PutUint64(out[start+wire.AreaOffset+8:], uint64(i))
				wire.EndFrame(out[start:], 1)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/2000, "ns/entry")
	})
}

// BenchmarkReceiveRouting feeds Commit batches of 400 entries from one peer through a connection's
// receive side on shard 0 of two, in reads of 4000 bytes: each frame is reassembled, both checksums
// checked, every entry decoded, half of them routed to shard 1 through its queue, and all accepted by
// their backups. One op is one frame. Frames past the 4096 built ones repeat a timestamp (their
// entries are then ignored as not newer), so run it with a fixed count:
//
//	nice go test -run '^$' -bench ReceiveRouting -benchtime=4000x -benchmem ./shard/
func BenchmarkReceiveRouting(b *testing.B) {
	ids := idRange(1, 401)
	groups := backups(ids)
	for _, g := range groups {
		g.DiscardReceived = true
	}
	n := offlineNode(b, 2, 2, []uint16{1}, groups...)
	s0, s1 := n.Shards()[0], n.Shards()[1]
	frames := make([][]byte, 4096)
	for i := range frames {
		frames[i] = commitBatch(ids, uint64(100+i))
	}
	var r shard.TestReceiver
	b.SetBytes(int64(len(frames[0])))
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		frame := frames[i%len(frames)]
		for off := 0; off < len(frame); off += 4000 {
			if _, err := s0.Feed(&r, 1, frame[off:min(off+4000, len(frame))]); err != nil {
				b.Fatal(err)
			}
		}
		s1.DrainInbox()
		s0.DiscardOutboxes()
		s1.DiscardOutboxes()
	}
	b.StopTimer()
	var accepted uint64
	for _, s := range n.Shards() {
		accepted += s.Stats().CommitEntriesAccepted.Load()
	}
	if b.N <= len(frames) && accepted != uint64(len(ids)*b.N) {
		b.Fatalf("accepted %d entries, want %d", accepted, len(ids)*b.N)
	}
}
