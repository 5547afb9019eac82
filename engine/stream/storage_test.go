package stream_test

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"testing"

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
	t     *testing.T
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
			c.ObserveBatch(stream.BatchHeader{BaseOffset: h.BaseOffset, Count: h.RecordCount, Epoch: uint32(h.Epoch),
				ProducerID: h.ProducerID, Sequence: h.ProducerSeq})
			from = h.NextOffset()
		}
	}
	var epochs []wire.LogEpoch
	for _, e := range n.seg.Epochs() {
		epochs = append(epochs, wire.LogEpoch{Epoch: uint32(e.Epoch), RecordStart: e.RecordStart, CursorStart: e.CursorStart})
	}
	n.c = c
	c.OpenDone(stream.OpenState{RecordHead: n.seg.Records().Head(), RecordTail: rec, CursorTail: cur, LogEpochs: epochs})
}

func diskConfig(id uint16) stream.Config {
	cfg := testConfig(id)
	cfg.ReadBytes = 256 << 10
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

// turn carries out the copy's effects on segment, then runs one loop turn.
func (n *diskNode) turn() {
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
		case a.Encoded == nil:
			base, err = n.seg.CommitCursor(n.token, uint64(a.Header.Epoch), string(a.CursorName), a.CursorOffset)
		default:
			base, err = n.seg.AppendCursorEncoded(n.token, a.Encoded)
		}
		if err != nil || base != a.Header.BaseOffset {
			t.Fatalf("node %d: append at %d went to %d: %v", n.id, a.Header.BaseOffset, base, err)
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
		if p.Source == stream.SourceAppends {
			msg.Batches = slices.Concat(encoded[p.AppendFrom:p.AppendTo]...)
		}
		n.out = append(n.out, envelope{from: n.id, to: p.To, frame: wire.AppendStreamPrepare(nil, from, &msg)})
	}
	for _, ok := range fx.PrepareOKs {
		n.out = append(n.out, envelope{from: n.id, to: ok.To, frame: wire.AppendStreamPrepareOK(nil, from, &ok.Msg, ok.Epochs)})
	}
	for _, r := range fx.Replies {
		r.Fetch.Batches = bytes.Clone(r.Fetch.Batches)
		n.reps = append(n.reps, r)
	}
	n.pump()
}

// TestRealStorage_ThreeCopiesFollowerRestart: three copies on segment logs and real rings; producers
// wait for confirms while node 3 is stopped and reopened; every answered batch is read back through
// fetches exactly once, and every copy ends with the same log.
func TestRealStorage_ThreeCopiesFollowerRestart(t *testing.T) {
	ringtest.ForEachBackend(t, func(t *testing.T, b ring.Backend) {
		a := assignment(1, 1, 2, 3)
		nodes := map[uint16]*diskNode{}
		root := t.TempDir()
		for _, id := range []uint16{1, 2, 3} {
			r, err := ring.New(ring.Config{Backend: b, Entries: 256, Logger: ringtest.QuietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = r.Close() })
			n := &diskNode{t: t, id: id, dir: filepath.Join(root, fmt.Sprint(id)), r: r, a: a}
			n.open()
			nodes[id] = n
		}
		run := func(turns int) {
			for range turns {
				for _, id := range []uint16{1, 2, 3} {
					n := nodes[id]
					if n.down {
						continue
					}
					n.c.Tick()
					n.turn()
					for _, e := range n.out {
						to := nodes[e.to]
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
			}
		}
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
		for _, n := range nodes {
			if err := n.seg.CloseSync(); err != nil && !errors.Is(err, segment.ErrClosed) {
				t.Fatal(err)
			}
		}
	})
}

// sameDigest compares two copies' retained record logs byte for byte, by reading both.
func sameDigest(t *testing.T, a, b *diskNode) bool {
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
