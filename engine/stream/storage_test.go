package stream_test

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/engine/stream"
	"github.com/ringstream/ringstream/ring"
	"github.com/ringstream/ringstream/ring/ringtest"
	"github.com/ringstream/ringstream/segment"
	"github.com/ringstream/ringstream/wire"
)

// diskNode is a copy whose host is real: segment logs in a directory, on a real ring, driven as a
// shard loop drives them (effects, then Flush, Wait and Dispatch). It shows the Effects contract
// carried out on segment; the shard's own host is another package's.
type diskNode struct {
	t     tb
	id    uint16
	dir   string
	r     ring.Ring
	seg   *segment.Copy
	c     *stream.Copy
	a     meta.Assignment
	out   []envelope
	reps  []stream.Reply
	scan  [][]byte // data of reads made while reopening (no copy attached yet)
	down  bool
	token uint64
	held  [][]byte // encoded record batches appended and not yet durable, in order
}

func kindOf(l segment.LogKind) wire.LogKind {
	if l == segment.CursorLog {
		return wire.LogCursors
	}
	return wire.LogRecords
}

// Events, called by segment from the ring's completions.
func (n *diskNode) AppendDone(log segment.LogKind, _ uint64, end uint64, err error) {
	if err != nil {
		n.c.LogFailed(kindOf(log))
		return
	}
	for log == segment.RecordLog && len(n.held) > 0 {
		h, _, _, _ := segment.DecodeBatch(n.held[0])
		if h.NextOffset() > end {
			break
		}
		n.held = n.held[1:]
	}
	n.c.AppendDone(kindOf(log), end)
}

func (n *diskNode) ReadDone(_ segment.LogKind, tag uint64, data []byte, err error) {
	if n.c == nil {
		n.scan = append(n.scan, bytes.Clone(data))
		return
	}
	n.c.ReadDone(tag, data, err)
}

func (n *diskNode) SealDone(uint64, segment.Seal, error) {}
func (n *diskNode) Done(segment.Result)                  {}

// open opens the copy's storage and its state machine: the retained batch headers are read from the
// log and fed to the copy (producer table, record epochs), then its tails and log epochs.
func (n *diskNode) open() {
	t := n.t
	var err error
	n.seg, _, err = segment.OpenSync(n.r, n.dir, segment.Config{SegmentBytes: 256 << 10, Logger: ringtest.QuietLogger()}, n)
	if err != nil {
		t.Fatal(err)
	}
	n.c = nil
	c, err := stream.New(diskConfig(n.id), n.a, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec, cur := n.seg.Tails()
	for from := n.seg.Records().Head(); from < rec; {
		n.scan = nil
		if err := n.seg.Records().Read(1, from, make([]byte, 1<<20)); err != nil {
			t.Fatal(err)
		}
		for len(n.scan) == 0 {
			n.pump()
		}
		it := segment.NewBatchIter(n.scan[0], from)
		for h, _, ok := it.Next(); ok; h, _, ok = it.Next() {
			err := c.ObserveBatch(stream.BatchHeader{BaseOffset: h.BaseOffset, Count: h.RecordCount, Epoch: uint32(h.Epoch),
				ProducerID: h.ProducerID, Sequence: h.ProducerSeq})
			if err != nil {
				t.Fatal(err)
			}
			from = h.NextOffset()
		}
	}
	var epochs []wire.LogEpoch
	for _, e := range n.seg.Epochs() {
		epochs = append(epochs, wire.LogEpoch{Epoch: uint32(e.Epoch), RecordStart: e.RecordStart, CursorStart: e.CursorStart})
	}
	n.seg.EachCursor(func(name string, off uint64) { c.ObserveCursor([]byte(name), off) })
	n.c = c
	c.OpenDone(stream.OpenState{RecordHead: n.seg.Records().Head(), RecordTail: rec, CursorTail: cur, LogEpochs: epochs})
}

func diskConfig(id uint16) stream.Config {
	cfg := testConfig(id)
	cfg.ReadBytes = 256 << 10
	cfg.ResendTicks = 200 // ticks are loop turns here: no probes while a group commit is in flight
	cfg.InflightPreparesMax = 1024
	return cfg
}

// pump runs one loop turn of the node's ring: Flush, then Wait for one completion and Dispatch.
func (n *diskNode) pump() {
	n.seg.Flush()
	if n.r.InFlight() == 0 {
		return
	}
	if err := n.r.Wait(1); err != nil {
		n.t.Fatal(err)
	}
	n.r.Dispatch()
}

// poll is a loop turn that does not block: Flush, submit, and run what completed.
func (n *diskNode) poll() int {
	n.seg.Flush()
	if err := n.r.Wait(0); err != nil { // submits, and posts what completed (DEFER_TASKRUN)
		n.t.Fatal(err)
	}
	return n.r.Dispatch()
}

// turn carries out the copy's effects on segment, then runs one loop turn.
func (n *diskNode) turn() {
	n.effects()
	n.pump()
}

// effects carries out the copy's effects on segment.
func (n *diskNode) effects() {
	n.c.CheckInvariants()
	fx := n.c.Ready()
	t := n.t
	for _, e := range fx.Epochs {
		err := n.seg.AppendEpochSync(segment.EpochEntry{Epoch: uint64(e.Epoch), RecordStart: e.RecordStart, CursorStart: e.CursorStart})
		n.c.EpochDone(e.Epoch, err)
	}
	encoded := make([][]byte, len(fx.Appends))
	for i, a := range fx.Appends {
		n.token++
		sh := segment.BatchHeader{BaseOffset: a.Header.BaseOffset, RecordCount: a.Header.Count, Epoch: uint64(a.Header.Epoch),
			ProducerID: a.Header.ProducerID, ProducerSeq: a.Header.Sequence, Codec: a.Header.Codec}
		var base uint64
		var err error
		switch {
		case a.Log == wire.LogRecords && a.Encoded == nil:
			encoded[i] = segment.AppendBatch(nil, &sh, a.Payload) // what Append writes, for the sends
			base, err = n.seg.Append(n.token, &sh, a.Payload)
		case a.Log == wire.LogRecords:
			encoded[i] = a.Encoded
			base, err = n.seg.AppendEncoded(n.token, a.Encoded)
		case a.Encoded == nil && a.CursorDelete:
			base, err = n.seg.DeleteCursor(n.token, uint64(a.Header.Epoch), string(a.CursorName))
		case a.Encoded == nil:
			base, err = n.seg.CommitCursor(n.token, uint64(a.Header.Epoch), string(a.CursorName), a.CursorOffset)
		default:
			base, err = n.seg.AppendCursorEncoded(n.token, a.Encoded)
		}
		if err != nil || base != a.Header.BaseOffset {
			t.Fatalf("node %d: append at %d went to %d: %v", n.id, a.Header.BaseOffset, base, err)
		}
		if a.Log == wire.LogRecords {
			n.held = append(n.held, encoded[i])
		}
	}
	if fx.SyncCursors {
		n.seg.SyncCursors()
	}
	for _, rd := range fx.Reads {
		log := n.seg.Records()
		if rd.Log == wire.LogCursors {
			log = n.seg.Cursors()
		}
		if err := log.Read(rd.Tag, rd.From, make([]byte, rd.BytesMax+4<<10)); err != nil {
			n.c.ReadDone(rd.Tag, nil, err)
		}
	}
	from := wire.From{Cluster: 1, Node: n.id}
	for _, p := range fx.Prepares {
		msg := p.Msg
		switch p.Source {
		case stream.SourceAppends:
			msg.Batches = slices.Concat(encoded[p.AppendFrom:p.AppendTo]...)
		case stream.SourceUnsynced:
			msg.Batches = slices.Concat(n.held...) // the log's groups waiting for commit
			if h, _, _, err := segment.DecodeBatch(msg.Batches); err != nil || h.BaseOffset != msg.BaseOffset {
				t.Fatalf("node %d: unsynced send from %d, held from %d: %v", n.id, msg.BaseOffset, h.BaseOffset, err)
			}
		}
		n.out = append(n.out, envelope{from: n.id, to: p.To, frame: wire.AppendStreamPrepare(nil, from, &msg)})
	}
	for _, ok := range fx.PrepareOKs {
		n.out = append(n.out, envelope{from: n.id, to: ok.To, frame: wire.AppendStreamPrepareOK(nil, from, &ok.Msg, ok.Epochs)})
	}
	for _, r := range fx.Replies {
		r.Fetch.Batches = bytes.Clone(r.Fetch.Batches)
		r.Cursors = slices.Clone(r.Cursors)
		for i := range r.Cursors {
			r.Cursors[i].Consumer = bytes.Clone(r.Cursors[i].Consumer)
		}
		n.reps = append(n.reps, r)
	}
}

// TestRealStorage_ThreeCopiesFollowerRestart: three copies on segment logs and real rings; producers
// wait for confirms while node 3 is stopped and reopened; every answered batch is read back through
// fetches exactly once, and every copy ends with the same log.
func TestRealStorage_ThreeCopiesFollowerRestart(t *testing.T) {
	ringtest.ForEachBackend(t, func(t *testing.T, b ring.Backend) {
		dc := newDiskCluster(t, b, t.TempDir(), assignment(1, 1, 2, 3))
		nodes, run := dc.nodes, dc.run
		owner := nodes[1]
		const batches = 300
		produced := 0
		produce := func(k int) {
			for range k {
				m := stream.Message{Kind: stream.KindProduce, Client: 1}
				m.Produce = wire.Produce{RequestID: uint64(produced), Stream: testStream, ProducerID: 5,
					Sequence: uint64(produced), Count: 10, Batch: payload(produced, 1000)}
				owner.c.Step(&m)
				produced++
			}
		}
		run(5)
		produce(100)
		run(20)
		nodes[3].down = true
		if err := nodes[3].seg.CloseSync(); err != nil {
			t.Fatal(err)
		}
		produce(100)
		run(20)
		nodes[3].down = false
		nodes[3].open()
		produce(batches - 200)
		run(200)
		acked := map[uint64]bool{}
		for _, r := range owner.reps {
			if r.Kind != stream.ReplyProduce || acked[r.Produce.RequestID] || r.Produce.BaseOffset != 10*r.Produce.RequestID {
				t.Fatalf("reply %+v", r)
			}
			acked[r.Produce.RequestID] = true
		}
		if len(acked) != batches || owner.c.Confirmed() != 10*batches {
			t.Fatalf("%d of %d batches answered, confirmed %d", len(acked), batches, owner.c.Confirmed())
		}
		owner.reps = nil
		// Read everything back through fetches: each batch once, in order.
		var next uint64
		for next < 10*batches {
			m := stream.Message{Kind: stream.KindFetch, Client: 2}
			m.Fetch = wire.Fetch{RequestID: next, Stream: testStream, Offset: next, BytesMax: 64 << 10}
			owner.c.Step(&m)
			for i := 0; len(owner.reps) == 0; i++ {
				if i > 1000 {
					t.Fatal("fetch never answered")
				}
				owner.turn()
			}
			r := owner.reps[0]
			owner.reps = owner.reps[1:]
			if r.Kind != stream.ReplyFetch || r.Fetch.BaseOffset != next || r.Fetch.Count == 0 {
				t.Fatalf("fetch at %d answered %+v", next, r)
			}
			it := segment.NewBatchIter(r.Fetch.Batches, next)
			for h, p, ok := it.Next(); ok; h, p, ok = it.Next() {
				if h.BaseOffset != next || !bytes.Equal(p, payload(int(next/10), 1000)) {
					t.Fatalf("record batch at %d: base %d", next, h.BaseOffset)
				}
				next = h.NextOffset()
			}
		}
		for _, id := range []uint16{2, 3} {
			if rec, _ := nodes[id].seg.Tails(); rec != 10*batches {
				t.Fatalf("node %d durable at %d", id, rec)
			}
			if !sameDigest(t, nodes[1], nodes[id]) {
				t.Fatalf("node %d's log differs from the owner's", id)
			}
		}
		dc.close()
	})
}

// diskCluster is copies on diskNodes joined in memory (frames encoded and decoded), one thread.
type diskCluster struct {
	t     tb
	ids   []uint16
	nodes map[uint16]*diskNode
	spin  bool // never block in Wait: poll every ring until one completes (latency benchmarks)
}

func newDiskCluster(t tb, b ring.Backend, root string, a meta.Assignment) *diskCluster {
	dc := &diskCluster{t: t, ids: append([]uint16{a.Owner}, a.Followers...), nodes: map[uint16]*diskNode{}}
	for _, id := range dc.ids {
		r, err := ring.New(ring.Config{Backend: b, Entries: 256, Logger: ringtest.QuietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		n := &diskNode{t: t, id: id, dir: filepath.Join(root, fmt.Sprint(id)), r: r, a: a}
		n.open()
		dc.nodes[id] = n
	}
	return dc
}

func (dc *diskCluster) close() {
	for _, id := range dc.ids {
		n := dc.nodes[id]
		if err := n.seg.CloseSync(); err != nil && !errors.Is(err, segment.ErrClosed) {
			dc.t.Fatal(err)
		}
		_ = n.r.Close()
	}
}

// run turns every node turns times, delivering what each sent. The nodes' rings work in parallel:
// a turn blocks (on the first node with operations in flight) only when no ring had a completion.
func (dc *diskCluster) run(turns int) {
	t := dc.t
	for range turns {
		progress := 0
		for _, id := range dc.ids {
			n := dc.nodes[id]
			if n.down {
				continue
			}
			if !dc.spin { // a spinning round is far shorter than a tick
				n.c.Tick()
			}
			n.effects()
			progress += n.poll()
			for _, e := range n.out {
				to := dc.nodes[e.to]
				if to.down {
					continue
				}
				h, body, err := wire.ParseFrame(e.frame)
				if err != nil {
					t.Fatal(err)
				}
				m := stream.Message{From: e.from}
				if h.Command == wire.CommandStreamPrepare {
					m.Kind = stream.KindPrepare
					m.Prepare, err = wire.DecodeStreamPrepare(&h, body)
				} else {
					m.Kind = stream.KindPrepareOK
					m.PrepareOK, m.Epochs, err = wire.DecodeStreamPrepareOK(&h, body)
				}
				if err != nil {
					t.Fatal(err)
				}
				to.c.Step(&m)
			}
			n.out = nil
		}
		if progress > 0 || dc.spin {
			continue
		}
		for _, id := range dc.ids {
			if n := dc.nodes[id]; !n.down && n.r.InFlight() > 0 {
				if err := n.r.Wait(1); err != nil {
					t.Fatal(err)
				}
				n.r.Dispatch()
				break
			}
		}
	}
}

// sameDigest compares two copies' retained record logs byte for byte, by reading both.
func sameDigest(t tb, a, b *diskNode) bool {
	read := func(n *diskNode) []byte {
		var all []byte
		rec, _ := n.seg.Tails()
		c := n.c
		n.c = nil
		defer func() { n.c = c }()
		for from := uint64(0); from < rec; {
			n.scan = nil
			if err := n.seg.Records().Read(1, from, make([]byte, 1<<20)); err != nil {
				t.Fatal(err)
			}
			for len(n.scan) == 0 {
				n.pump()
			}
			it := segment.NewBatchIter(n.scan[0], from)
			for h, _, ok := it.Next(); ok; h, _, ok = it.Next() {
				all = append(all, it.Raw()...)
				from = h.NextOffset()
			}
		}
		return all
	}
	return bytes.Equal(read(a), read(b))
}

// produceWindow is how many produces the benchmarks keep waiting for confirmation.
const produceWindow = 256

// benchProduce produces b.N records of 1 KiB, one per batch, to dc's owner with produceWindow in
// flight, and reports records/s.
func benchProduce(b *testing.B, dc *diskCluster) {
	owner := dc.nodes[dc.ids[0]]
	body := payload(0, 1024)
	answered, sent := 0, 0
	b.SetBytes(1024)
	b.ResetTimer()
	for answered < b.N {
		for sent < b.N && sent-answered < produceWindow {
			m := stream.Message{Kind: stream.KindProduce, Client: 1}
			m.Produce = wire.Produce{RequestID: uint64(sent), Stream: testStream, Count: 1, Batch: body}
			owner.c.Step(&m)
			sent++
		}
		dc.run(1)
		for _, r := range owner.reps {
			if r.Kind != stream.ReplyProduce {
				b.Fatalf("reply %+v", r)
			}
			answered++
		}
		owner.reps = owner.reps[:0]
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

func ioUring(b *testing.B) {
	if ok, why := ringtest.Available(); !ok {
		b.Skip("io_uring unavailable: " + why)
	}
	runtime.LockOSThread()
	b.Cleanup(runtime.UnlockOSThread)
}

// BenchmarkRealStorage_Produce3Copies: produce with confirm on a 3-copy majority_durable stream,
// three segment logs on one disk and three rings driven by one thread, frames encoded and decoded
// in memory (no sockets). Compare with BenchmarkRealStorage_RawAppend in the same run.
func BenchmarkRealStorage_Produce3Copies(b *testing.B) {
	ioUring(b)
	dc := newDiskCluster(b, ring.BackendIOUring, b.TempDir(), assignment(1, 1, 2, 3))
	defer dc.close()
	dc.run(5)
	benchProduce(b, dc)
}

// BenchmarkRealStorage_Produce1Copy: the same with one copy.
func BenchmarkRealStorage_Produce1Copy(b *testing.B) {
	ioUring(b)
	dc := newDiskCluster(b, ring.BackendIOUring, b.TempDir(), assignment(1, 1))
	defer dc.close()
	dc.run(5)
	benchProduce(b, dc)
}

// rawEvents counts appends made durable.
type rawEvents struct{ done int }

func (e *rawEvents) AppendDone(segment.LogKind, uint64, uint64, error) { e.done++ }
func (e *rawEvents) ReadDone(segment.LogKind, uint64, []byte, error)   {}
func (e *rawEvents) SealDone(uint64, segment.Seal, error)              {}
func (e *rawEvents) Done(segment.Result)                               {}

// BenchmarkRealStorage_RawAppend: the baseline, one segment log's group-committed appends of the
// same 1 KiB batches with the same window, no protocol.
func BenchmarkRealStorage_RawAppend(b *testing.B) {
	ioUring(b)
	r, err := ring.New(ring.Config{Backend: ring.BackendIOUring, Entries: 256, Logger: ringtest.QuietLogger()})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	ev := &rawEvents{}
	seg, _, err := segment.OpenSync(r, filepath.Join(b.TempDir(), "raw"), segment.Config{SegmentBytes: 256 << 10, Logger: ringtest.QuietLogger()}, ev)
	if err != nil {
		b.Fatal(err)
	}
	defer seg.CloseSync()
	body := payload(0, 1024)
	sent := 0
	b.SetBytes(1024)
	b.ResetTimer()
	for ev.done < b.N {
		for sent < b.N && sent-ev.done < produceWindow {
			h := segment.BatchHeader{RecordCount: 1, Epoch: 1}
			if _, err := seg.Append(uint64(sent), &h, body); err != nil {
				b.Fatal(err)
			}
			sent++
		}
		seg.Flush() // the same loop turn as diskCluster.run: poll, and block only without progress
		if err := r.Wait(0); err != nil {
			b.Fatal(err)
		}
		if r.Dispatch() > 0 {
			continue
		}
		if err := r.Wait(1); err != nil {
			b.Fatal(err)
		}
		r.Dispatch()
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkRealStorage_ConfirmLatency: one produce at a time on a 3-copy stream (the low-load end),
// produce to confirm, against one raw append + fdatasync of the same batch on the same kind of log,
// measured in the same run. Reports p50 and p99 of both.
func BenchmarkRealStorage_ConfirmLatency(b *testing.B) {
	ioUring(b)
	dc := newDiskCluster(b, ring.BackendIOUring, b.TempDir(), assignment(1, 1, 2, 3))
	defer dc.close()
	dc.run(5)
	dc.spin = true // the three rings' fsyncs overlap as on three nodes; no ring waits on another's
	owner := dc.nodes[1]
	r, err := ring.New(ring.Config{Backend: ring.BackendIOUring, Entries: 256, Logger: ringtest.QuietLogger()})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	ev := &rawEvents{}
	raw, _, err := segment.OpenSync(r, filepath.Join(b.TempDir(), "raw"), segment.Config{SegmentBytes: 256 << 10, Logger: ringtest.QuietLogger()}, ev)
	if err != nil {
		b.Fatal(err)
	}
	defer raw.CloseSync()
	body := payload(0, 1024)
	confirm := make([]time.Duration, 0, b.N)
	fsync := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		m := stream.Message{Kind: stream.KindProduce, Client: 1}
		m.Produce = wire.Produce{RequestID: uint64(i), Stream: testStream, Count: 1, Batch: body}
		owner.c.Step(&m)
		for len(owner.reps) == 0 {
			dc.run(1)
		}
		owner.reps = owner.reps[:0]
		confirm = append(confirm, time.Since(start))

		start = time.Now()
		h := segment.BatchHeader{RecordCount: 1, Epoch: 1}
		if _, err := raw.Append(uint64(i), &h, body); err != nil {
			b.Fatal(err)
		}
		for done := ev.done; ev.done == done; { // polled too, as the cluster is
			raw.Flush()
			if err := r.Wait(0); err != nil {
				b.Fatal(err)
			}
			r.Dispatch()
		}
		fsync = append(fsync, time.Since(start))
	}
	b.StopTimer()
	pct := func(d []time.Duration, p float64) float64 {
		slices.Sort(d)
		return float64(d[int(p*float64(len(d)-1))].Microseconds())
	}
	b.ReportMetric(pct(confirm, 0.5), "confirm-p50-µs")
	b.ReportMetric(pct(confirm, 0.99), "confirm-p99-µs")
	b.ReportMetric(pct(fsync, 0.5), "fsync-p50-µs")
	b.ReportMetric(pct(fsync, 0.99), "fsync-p99-µs")
	if st := owner.c.Stats(); st.Resets+st.Catchups > 0 {
		b.Fatalf("followers fell behind in a latency run: %+v", st)
	}
}
