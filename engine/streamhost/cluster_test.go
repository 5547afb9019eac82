package streamhost_test

import (
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/engine/stream"
	"github.com/ringstream/ringstream/engine/streamhost"
	"github.com/ringstream/ringstream/ring"
	"github.com/ringstream/ringstream/segment"
	"github.com/ringstream/ringstream/shard"
	"github.com/ringstream/ringstream/wire"
)

var fullCount = flag.Bool("streamhost.full", false, "full counts: 1,000,000 records in TestCluster_ProduceConfirmFollowerRestart, 1,000 copies in TestCopies_OpenManyAtBoot")

// taskRun sets every ring of the tests and benchmarks (the nodes' and the raw baselines'), so the two
// io_uring task-run modes can be measured in turn with one binary.
var taskRun = flag.String("streamhost.taskrun", "", "io_uring task-run mode of every ring: coop (the default) or defer")

const (
	testStream      = 77
	testIncarnation = 1
	recordBytes     = 1024
	recordsPerBatch = 8
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// testNode is one real node: a shard.Node on loopback and its stream host over a directory.
type testNode struct {
	id     uint16
	dir    string
	listen netip.AddrPort
	node   *shard.Node
	host   *streamhost.Host
	sink   *sink
	shards int
}

// sink collects a node's client replies (on its shard goroutine) for the test goroutine.
type sink struct {
	produced func(r *stream.Reply) // when set, takes produce replies instead of acks (benchmarks)
	acks     chan stream.Reply
	fetches  chan stream.Reply
	opened   chan error
	sealed   chan wire.StreamSealReply // seal replies reaching the node (Config.SealReplies)
}

func newSink() *sink {
	return &sink{acks: make(chan stream.Reply, 1<<16), fetches: make(chan stream.Reply, 16), opened: make(chan error, 16),
		sealed: make(chan wire.StreamSealReply, 16)}
}

func (s *sink) reply(_ uint64, r *stream.Reply) {
	switch r.Kind {
	case stream.ReplyFetch:
		c := *r
		c.Fetch.Batches = append([]byte(nil), r.Fetch.Batches...)
		s.fetches <- c
	case stream.ReplyProduce:
		if s.produced != nil {
			s.produced(r)
			return
		}
		s.acks <- *r
	default:
		c := *r
		c.Error.Message = append([]byte(nil), r.Error.Message...)
		s.acks <- c
	}
}

func streamConfig() stream.Config {
	return stream.Config{ResendTicks: 100, InflightPreparesMax: 1024} // 200 ms at the 2 ms test tick
}

// newTestNode makes node id's shard.Node and host (not started).
func newTestNode(t testing.TB, id uint16, dir string, listen netip.AddrPort, tune ...func(*streamhost.Config)) *testNode {
	t.Helper()
	return newTestNodeOn(t, id, dir, listen, nil, tune...)
}

// newTestNodeOn is newTestNode with every shard's ring wrapped by wrap (a storage fault model), when
// set.
func newTestNodeOn(t testing.TB, id uint16, dir string, listen netip.AddrPort, wrap func(ring.Ring) ring.Ring,
	tune ...func(*streamhost.Config)) *testNode {
	t.Helper()
	return newTestNodeTick(t, id, dir, listen, wrap, 2*time.Millisecond, tune...)
}

// newTestNodeTick is newTestNodeOn with the shard's tick set.
func newTestNodeTick(t testing.TB, id uint16, dir string, listen netip.AddrPort, wrap func(ring.Ring) ring.Ring,
	tick time.Duration, tune ...func(*streamhost.Config)) *testNode {
	t.Helper()
	tn := &testNode{id: id, dir: dir, listen: listen, sink: newSink()}
	cfg := streamhost.Config{Dir: dir, Cluster: 42, Node: id, Shards: 1,
		Segment: segment.Config{SegmentBytes: 8 << 20, Logger: quiet()}, Stream: streamConfig(),
		Replies: tn.sink.reply, Opened: func(_ uint64, err error) { tn.sink.opened <- err }, Logger: quiet(),
		SealReplies: func(_ uint16, m wire.StreamSealReply) { tn.sink.sealed <- m }}
	for _, f := range tune {
		f(&cfg)
	}
	sc := shard.Config{Node: id, Cluster: 42, Shards: cfg.Shards, Tick: tick, Listen: listen,
		ReconnectBaseTicks: 5, ReconnectMaxTicks: 50, Logger: quiet(), Ring: ring.Config{TaskRun: ring.TaskRun(*taskRun)}}
	if wrap != nil {
		sc.WrapRing = func(_ int, r ring.Ring) ring.Ring { return wrap(r) }
	}
	n, err := shard.NewNode(sc)
	if err != nil {
		t.Fatal(err)
	}
	tn.node, tn.shards = n, cfg.Shards
	tn.host, err = streamhost.New(n, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.SetNodeHandler(unrouted{tn.host}); err != nil {
		t.Fatal(err)
	}
	return tn
}

// unrouted hands the frames for streams a node holds no copy of to its host, as engine.Node does.
type unrouted struct{ h *streamhost.Host }

func (unrouted) OnNodeFrame(*shard.Shard, uint16, *wire.Header, []byte) {}

func (u unrouted) OnUnroutedFrame(s *shard.Shard, from uint16, h *wire.Header, body []byte) bool {
	return u.h.OnUnroutedFrame(s, from, h, body)
}

// cluster is three real nodes holding one 3-copy majority_durable stream owned by node 1.
type cluster struct {
	t     testing.TB
	nodes map[uint16]*testNode
	asg   meta.Assignment
	root  string
	tune  []func(*streamhost.Config)
}

func newCluster(t testing.TB, asg meta.Assignment, tune ...func(*streamhost.Config)) *cluster {
	return newClusterWith(t, asg, nil, tune...)
}

// newClusterWith is newCluster with more nodes, extra, that hold no copy.
func newClusterWith(t testing.TB, asg meta.Assignment, extra []uint16, tune ...func(*streamhost.Config)) *cluster {
	return newClusterOn(t, t.TempDir(), asg, extra, nil, tune...)
}

// newClusterOn is newClusterWith with the node directories under root (root/<id>) and the rings of
// the nodes in wraps wrapped (a storage fault model).
func newClusterOn(t testing.TB, root string, asg meta.Assignment, extra []uint16, wraps map[uint16]func(ring.Ring) ring.Ring,
	tune ...func(*streamhost.Config)) *cluster {
	return newClusterTick(t, root, asg, extra, wraps, 2*time.Millisecond, tune...)
}

// newClusterTick is newClusterOn with every shard's tick set.
func newClusterTick(t testing.TB, root string, asg meta.Assignment, extra []uint16, wraps map[uint16]func(ring.Ring) ring.Ring,
	tick time.Duration, tune ...func(*streamhost.Config)) *cluster {
	c := &cluster{t: t, nodes: map[uint16]*testNode{}, asg: asg, root: root, tune: tune}
	ids := append(append([]uint16{asg.Owner}, asg.Followers...), extra...)
	for _, id := range ids {
		c.nodes[id] = newTestNodeTick(t, id, filepath.Join(c.root, fmt.Sprint(id)), netip.MustParseAddrPort("127.0.0.1:0"),
			wraps[id], tick, tune...)
	}
	for _, id := range ids {
		c.start(id)
	}
	t.Cleanup(c.stop)
	return c
}

func (c *cluster) spec() streamhost.Spec {
	return streamhost.Spec{Stream: testStream, Incarnation: testIncarnation, Assignment: c.asg}
}

// start starts node id with the others as peers and opens its copy (if it holds one), waiting for
// the open.
func (c *cluster) start(id uint16) {
	t := c.t
	n := c.nodes[id]
	var peers []shard.Peer
	for oid, o := range c.nodes {
		if oid != id {
			peers = append(peers, shard.Peer{Node: oid, Addr: o.node.Addr()})
		}
	}
	if err := n.node.Start(peers); err != nil {
		t.Fatal(err)
	}
	if !c.asg.Includes(id) {
		return
	}
	if err := n.host.Open(c.spec()); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-n.sink.opened:
		if err != nil {
			t.Fatalf("node %d: open: %v", id, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("node %d: open never ended", id)
	}
}

func (c *cluster) stop() {
	for _, n := range c.nodes {
		_ = n.node.Stop()
	}
}

// run runs f on the shard of the stream's copy on node id and waits for it.
func (c *cluster) run(id uint16, f func(s *shard.Shard)) {
	done := make(chan struct{})
	err := c.nodes[id].node.Run(shard.ShardOf(testStream, c.nodes[id].shards), func(s *shard.Shard) { f(s); close(done) })
	if err != nil {
		c.t.Fatal(err)
	}
	<-done
}

// recordBatch is batch seq's payload: recordsPerBatch records of recordBytes, each starting with its
// record id.
func recordBatch(seq uint64, buf []byte) []byte {
	buf = buf[:0]
	for j := range uint64(recordsPerBatch) {
		rec := make([]byte, recordBytes)
		binary.LittleEndian.PutUint64(rec, seq*recordsPerBatch+j)
		for k := 8; k < recordBytes; k++ {
			rec[k] = byte(seq + j + uint64(k))
		}
		buf = append(buf, rec...)
	}
	return buf
}

// TestCluster_ProduceConfirmFollowerRestart: three real nodes over loopback with real disks; records
// of 1 KiB produced with confirm on a 3-copy majority_durable stream, follower 3 stopped at half and
// restarted later (it catches up from its own log); every confirmed record is read back exactly once
// at the offset its produce was answered with, and every copy ends with the owner's tail.
func TestCluster_ProduceConfirmFollowerRestart(t *testing.T) {
	records := 50_000
	if *fullCount {
		records = 1_000_000
	}
	if testing.Short() {
		records = 5_000
	}
	c := newCluster(t, majority(1, 2, 3))
	produceConfirmRestart(t, c, uint64(records/recordsPerBatch))
}

// TestCluster_TwoShards: the same on nodes of two shards, where the stream lives on shard 1 (its
// frames leave and arrive there, beside shard 0's host group).
func TestCluster_TwoShards(t *testing.T) {
	records := 16_000
	if testing.Short() {
		records = 4_000
	}
	if shard.ShardOf(testStream, 2) != 1 {
		t.Fatal("the test stream should live on shard 1 of 2")
	}
	c := newCluster(t, majority(1, 2, 3), func(cfg *streamhost.Config) { cfg.Shards = 2 })
	produceConfirmRestart(t, c, uint64(records/recordsPerBatch))
}

// produceConfirmRestart produces batches of recordsPerBatch records with confirm on c's stream,
// stops follower 3 at half and restarts it at six tenths, then reads everything back.
func produceConfirmRestart(t *testing.T, c *cluster, batches uint64) {
	owner := c.nodes[1]
	start := time.Now()
	const window = 64
	base := make([]uint64, batches)
	var next, acked uint64
	stopAt, reopenAt := batches/2, batches*6/10
	stopped := false
	for acked < batches {
		if !stopped && acked >= stopAt {
			if err := c.nodes[3].node.Stop(); err != nil {
				t.Fatal(err)
			}
			stopped = true
		}
		if stopped && acked >= reopenAt {
			old := c.nodes[3]
			c.nodes[3] = newTestNode(t, 3, old.dir, old.node.Addr(), c.tune...)
			c.start(3)
			reopenAt = batches + 1
		}
		if n := min(batches, acked+window) - next; n > 0 && next < batches {
			from := next
			next += n
			c.run(1, func(s *shard.Shard) {
				var buf []byte
				for seq := from; seq < from+n; seq++ {
					buf = recordBatch(seq, buf)
					m := stream.Message{Kind: stream.KindProduce, Client: 1}
					m.Produce = wire.Produce{RequestID: seq, Stream: testStream, Incarnation: testIncarnation,
						ProducerID: 9, Sequence: seq, Count: recordsPerBatch, Batch: buf}
					if err := owner.host.Step(s, testStream, &m); err != nil {
						t.Error(err)
					}
				}
			})
		}
		select {
		case r := <-owner.sink.acks:
			if r.Kind != stream.ReplyProduce || r.Produce.Duplicate || r.Produce.Count != recordsPerBatch {
				t.Fatalf("produce %d answered %+v (%s)", r.Produce.RequestID, r, r.Error.Message)
			}
			base[r.Produce.RequestID] = r.Produce.BaseOffset + 1
			acked++
		case <-time.After(30 * time.Second):
			t.Fatalf("no confirm for 30 s: %d of %d answered", acked, batches)
		}
	}
	produced := time.Since(start)
	total := batches * recordsPerBatch
	c.waitTails(total)
	var st streamhost.CopyState
	var hs streamhost.Stats
	c.run(1, func(s *shard.Shard) { st, hs = owner.host.State(s, testStream), owner.host.Stats(s) })
	if hs.AppendBytes < total*recordBytes {
		t.Fatalf("%d bytes sent to followers as appended, for %d records: prepares do not leave from the appends", hs.AppendBytes, total)
	}
	t.Logf("%d records of %d bytes confirmed in %v (%.0f records/s), follower 3 restarted at half; owner %+v",
		total, recordBytes, produced, float64(total)/produced.Seconds(), st.Stats)
	if st.Stats.Catchups > batches/10 {
		t.Fatalf("followers were read for %d times for %d batches: prepares do not reach them as appended", st.Stats.Catchups, batches)
	}
	c.readBack(base, total)
}

// waitTails waits until every copy's log is durable at total and the owner confirmed it.
func (c *cluster) waitTails(total uint64) {
	deadline := time.Now().Add(60 * time.Second)
	for _, id := range []uint16{1, 2, 3} {
		for {
			var st streamhost.CopyState
			c.run(id, func(s *shard.Shard) { st = c.nodes[id].host.State(s, testStream) })
			if st.Durable == total && (id != 1 || st.Confirmed == total) {
				break
			}
			if time.Now().After(deadline) {
				c.t.Fatalf("node %d: %+v, want durable %d", id, st, total)
			}
			time.Sleep(5 * time.Millisecond) // waits on other nodes' progress; no event to wait on here
		}
	}
}

// readBack fetches every record from the owner: each answered batch is at its answered offset, and
// each record id appears exactly once.
func (c *cluster) readBack(base []uint64, total uint64) {
	t := c.t
	owner := c.nodes[1]
	seen := make([]bool, total)
	batchAt := map[uint64]uint64{}
	for seq, b := range base {
		batchAt[b-1] = uint64(seq)
	}
	for off := uint64(0); off < total; {
		c.run(1, func(s *shard.Shard) {
			m := stream.Message{Kind: stream.KindFetch, Client: 2}
			m.Fetch = wire.Fetch{RequestID: off, Stream: testStream, Incarnation: testIncarnation, Offset: off, BytesMax: 1 << 20}
			if err := owner.host.Step(s, testStream, &m); err != nil {
				t.Error(err)
			}
		})
		var r stream.Reply
		select {
		case r = <-owner.sink.fetches:
		case <-time.After(10 * time.Second):
			t.Fatalf("fetch at %d never answered", off)
		}
		if r.Fetch.BaseOffset != off || r.Fetch.Count == 0 {
			t.Fatalf("fetch at %d answered at %d with %d records", off, r.Fetch.BaseOffset, r.Fetch.Count)
		}
		it := segment.NewBatchIter(r.Fetch.Batches, off)
		for h, p, ok := it.Next(); ok; h, p, ok = it.Next() {
			seq, known := batchAt[h.BaseOffset]
			if h.BaseOffset != off || !known || h.ProducerSeq != seq || h.RecordCount != recordsPerBatch {
				t.Fatalf("batch at %d (seq %d), want offset %d of an answered produce", h.BaseOffset, h.ProducerSeq, off)
			}
			for j := range recordsPerBatch {
				id := binary.LittleEndian.Uint64(p[j*recordBytes:])
				if id >= total || seen[id] || id != seq*recordsPerBatch+uint64(j) {
					t.Fatalf("record %d at offset %d read twice or out of place", id, off+uint64(j))
				}
				seen[id] = true
			}
			off = h.NextOffset()
		}
		if err := it.Err(); err != nil {
			t.Fatal(err)
		}
	}
	for id, ok := range seen {
		if !ok {
			t.Fatalf("record %d never read back", id)
		}
	}
}
