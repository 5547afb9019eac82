package stream_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/engine/stream"
	"github.com/ringstream/ringstream/segment"
	"github.com/ringstream/ringstream/wire"
)

const (
	testStream      = 7
	testIncarnation = 3
)

// decode is the host's adapter over segment's batch format: the same one engine wires in.
func decode(b []byte) (stream.BatchHeader, int, error) {
	h, _, n, err := segment.DecodeBatch(b)
	if err != nil {
		return stream.BatchHeader{}, 0, err
	}
	if h.Epoch > math.MaxUint32 {
		return stream.BatchHeader{}, 0, errors.New("batch epoch above 32 bits")
	}
	return stream.BatchHeader{BaseOffset: h.BaseOffset, Count: h.RecordCount, PayloadLen: h.PayloadLen,
		Epoch: uint32(h.Epoch), ProducerID: h.ProducerID, Sequence: h.ProducerSeq, Codec: h.Codec}, n, nil
}

// encode is the host's encoding of an owner append (segment.Copy.Append does the same).
func encode(h stream.BatchHeader, payload []byte) []byte {
	sh := segment.BatchHeader{BaseOffset: h.BaseOffset, RecordCount: h.Count, Epoch: uint64(h.Epoch),
		ProducerID: h.ProducerID, ProducerSeq: h.Sequence, Codec: h.Codec}
	return segment.AppendBatch(nil, &sh, payload)
}

// tb is what the helpers need of a *testing.T; randomized runs that hunt a broken variant pass one
// that stops the run instead of failing the test.
type tb interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	Logf(format string, args ...any)
}

func testConfig(self uint16) stream.Config {
	return stream.Config{Self: self, Stream: testStream, Incarnation: testIncarnation, Decode: decode,
		BatchHeaderBytes: segment.BatchHeaderSize, BatchBytesMax: 64 << 10, PendingBytesMax: 1 << 20,
		InflightBytesMax: 256 << 10, InflightPreparesMax: 64, ReadBytes: 128 << 10, ResendTicks: 5, CursorSyncTicks: 4}
}

func assignment(epoch uint32, owner uint16, followers ...uint16) meta.Assignment {
	return meta.Assignment{Epoch: epoch, Owner: owner, Followers: followers, Policy: meta.Policy{Kind: meta.PolicyMajorityDurable}}
}

// node is one copy and the storage and network its host gives it, in memory: the logs hold encoded
// batches, durable up to a count the test moves.
type node struct {
	id        uint16
	c         *stream.Copy
	rec, cur  [][]byte // encoded batches
	recSync   int      // batches of rec durable
	curSync   int
	epochs    []wire.LogEpoch
	reads     []stream.Read
	replies   []stream.Reply
	sent      []envelope
	prevConf  uint64
	prevEpoch uint32           // the epoch prevConf was seen at
	hb        stream.Heartbeat // of the last Ready, Holders copied
	autoSync  bool
	down      bool
	failRead  int // reads the host refuses before it serves any
}

type envelope struct {
	from, to uint16
	frame    []byte
}

func tailOf(log [][]byte, n int) uint64 {
	if n == 0 {
		return 0
	}
	h, _, err := decode(log[n-1])
	if err != nil {
		panic(err)
	}
	return h.End()
}

// newNode opens a copy over the given durable logs (nil for an empty copy).
func newNode(t tb, cfg stream.Config, a meta.Assignment, rec, cur [][]byte, epochs []wire.LogEpoch) *node {
	t.Helper()
	c, err := stream.New(cfg, a, nil)
	if err != nil {
		t.Fatal(err)
	}
	n := &node{id: cfg.Self, c: c, rec: rec, cur: cur, recSync: len(rec), curSync: len(cur), epochs: epochs, autoSync: true}
	for _, b := range rec {
		h, _, err := decode(b)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.ObserveBatch(h); err != nil {
			t.Fatal(err)
		}
	}
	c.OpenDone(stream.OpenState{RecordTail: tailOf(rec, len(rec)), CursorTail: tailOf(cur, len(cur)), LogEpochs: epochs})
	n.ready(t)
	return n
}

func (n *node) recTail() uint64 { return tailOf(n.rec, n.recSync) }
func (n *node) curTail() uint64 { return tailOf(n.cur, n.curSync) }

// ready carries out the copy's effects as a host does, checking the contract as it goes.
func (n *node) ready(t tb) {
	t.Helper()
	for round := 0; ; round++ {
		if round > 1000 {
			t.Fatal("effects never settle")
		}
		n.c.CheckInvariants()
		fx := n.c.Ready()
		n.hb = fx.Heartbeat
		n.hb.Holders = slices.Clone(fx.Heartbeat.Holders)
		if e := n.c.Assignment().Epoch; e != n.prevEpoch {
			// A new assignment's owner counts its confirmed tail again from the copies it hears in its
			// epoch; it serves no read below its predecessor's (the scripts check the replies).
			n.prevEpoch, n.prevConf = e, 0
		}
		if conf := n.c.Confirmed(); n.c.Role() == stream.RoleOwner {
			if conf < n.prevConf {
				t.Fatalf("node %d: confirmed tail went back from %d to %d", n.id, n.prevConf, conf)
			}
			n.prevConf = conf
		}
		busy := n.apply(t, fx)
		if n.autoSync && (len(n.rec) > n.recSync || len(n.cur) > n.curSync) {
			n.sync(t)
			busy = true
		}
		if !busy {
			return
		}
	}
}

func (n *node) apply(t tb, fx *stream.Effects) bool {
	t.Helper()
	busy := false
	for _, e := range fx.Epochs {
		n.epochs = append(n.epochs, e)
		defer n.c.EpochDone(e.Epoch, nil)
		busy = true
	}
	encoded := make([][]byte, len(fx.Appends))
	for i, a := range fx.Appends {
		var raw []byte
		switch {
		case a.Encoded != nil:
			raw = bytes.Clone(a.Encoded)
		case a.Log == wire.LogCursors:
			raw = encode(a.Header, cursorEvent(a))
		default:
			raw = encode(a.Header, a.Payload)
		}
		h, _, err := decode(raw)
		if err != nil {
			t.Fatalf("node %d: append %d does not decode: %v", n.id, i, err)
		}
		log := &n.rec
		if a.Log == wire.LogCursors {
			log = &n.cur
		}
		if want := tailOf(*log, len(*log)); h.BaseOffset != want {
			t.Fatalf("node %d: append at %d, log tail %d", n.id, h.BaseOffset, want)
		}
		*log = append(*log, raw)
		encoded[i] = raw
		busy = true
	}
	if fx.SyncCursors && len(n.cur) > n.curSync {
		n.curSync = len(n.cur)
		defer n.c.AppendDone(wire.LogCursors, n.curTail())
		busy = true
	}
	n.reads = append(n.reads, fx.Reads...)
	for _, p := range fx.Prepares {
		msg := p.Msg
		switch p.Source {
		case stream.SourceAppends:
			msg.Batches = slices.Concat(encoded[p.AppendFrom:p.AppendTo]...)
		case stream.SourceUnsynced:
			msg.Batches = n.unsynced(t, msg.BaseOffset, msg.Count)
		}
		n.sent = append(n.sent, envelope{from: n.id, to: p.To, frame: wire.AppendStreamPrepare(nil, wire.From{Cluster: 1, Node: n.id}, &msg)})
	}
	for _, ok := range fx.PrepareOKs {
		if ok.Msg.Status == wire.PrepareAppended && ok.Msg.RecordTail > n.recTail() {
			t.Fatalf("node %d acknowledges %d past its durable tail %d", n.id, ok.Msg.RecordTail, n.recTail())
		}
		n.sent = append(n.sent, envelope{from: n.id, to: ok.To, frame: wire.AppendStreamPrepareOK(nil, wire.From{Cluster: 1, Node: n.id}, &ok.Msg, ok.Epochs)})
	}
	for _, r := range fx.Replies {
		r.Fetch.Batches = bytes.Clone(r.Fetch.Batches)
		r.Error.Message = bytes.Clone(r.Error.Message)
		r.Cursors = slices.Clone(r.Cursors)
		for i := range r.Cursors {
			r.Cursors[i].Consumer = bytes.Clone(r.Cursors[i].Consumer)
		}
		n.replies = append(n.replies, r)
	}
	if len(fx.Reads) > 0 {
		busy = true
	}
	return busy || len(fx.Epochs) > 0
}

// unsynced is what the host's log holds past its durable tail for a SourceUnsynced prepare: every
// batch from base on, count records, none of them durable.
func (n *node) unsynced(t tb, base uint64, count uint32) []byte {
	t.Helper()
	if base != n.recTail() {
		t.Fatalf("node %d: unsynced send from %d, durable tail %d", n.id, base, n.recTail())
	}
	out := slices.Concat(n.rec[n.recSync:]...)
	if uint64(count) != tailOf(n.rec, len(n.rec))-base {
		t.Fatalf("node %d: unsynced send of %d records, %d held", n.id, count, tailOf(n.rec, len(n.rec))-base)
	}
	return out
}

// sync makes every queued append durable and reports it.
func (n *node) sync(t tb) {
	if len(n.rec) > n.recSync {
		n.recSync = len(n.rec)
		n.c.AppendDone(wire.LogRecords, n.recTail())
	}
	if len(n.cur) > n.curSync {
		n.curSync = len(n.cur)
		n.c.AppendDone(wire.LogCursors, n.curTail())
	}
}

// serveReads answers every queued read from the durable log, carrying out the effects after each.
func (n *node) serveReads(t tb) { n.serveReadsThen(t, true) }

// serveReadsThen answers every queued read; with ready false it leaves the effects for later, as a
// shard does when more completions follow in the same dispatch.
func (n *node) serveReadsThen(t tb, ready bool) {
	t.Helper()
	for len(n.reads) > 0 {
		r := n.reads[0]
		n.reads = n.reads[1:]
		if n.failRead > 0 {
			n.failRead--
			n.c.ReadDone(r.Tag, nil, errors.New("read table full"))
			n.ready(t)
			continue
		}
		log, synced := n.rec, n.recSync
		if r.Log == wire.LogCursors {
			log, synced = n.cur, n.curSync
		}
		var data []byte
		for _, b := range log[:synced] {
			h, size, _ := decode(b)
			if h.End() <= r.From {
				continue
			}
			if len(data)+size > r.BytesMax && len(data) > 0 {
				break
			}
			data = append(data, b...)
		}
		n.c.ReadDone(r.Tag, data, nil)
		if !ready {
			return // the rest when the effects are carried out
		}
		n.ready(t)
	}
}

// cluster is copies on nodes joined by an in-memory network the test drives.
type cluster struct {
	t     tb
	nodes map[uint16]*node
	ids   []uint16
	drop  func(e envelope) bool
	ticks int
}

func newCluster(t tb, a meta.Assignment) *cluster {
	cl := &cluster{t: t, nodes: map[uint16]*node{}}
	cl.ids = append([]uint16{a.Owner}, a.Followers...)
	slices.Sort(cl.ids)
	for _, id := range cl.ids {
		cl.nodes[id] = newNode(t, testConfig(id), a, nil, nil, nil)
	}
	cl.settle()
	return cl
}

// settle delivers messages and serves reads until nothing moves.
func (cl *cluster) settle() {
	cl.t.Helper()
	for round := 0; ; round++ {
		if round > 10000 {
			cl.t.Fatal("cluster never settles")
		}
		moved := false
		for _, id := range cl.ids {
			n := cl.nodes[id]
			if len(n.reads) > 0 && !n.down {
				n.serveReads(cl.t)
				moved = true
			}
			out := n.sent
			n.sent = nil
			for _, e := range out {
				moved = true
				cl.deliver(e)
			}
		}
		if !moved {
			return
		}
	}
}

func (cl *cluster) deliver(e envelope) {
	cl.t.Helper()
	to := cl.nodes[e.to]
	if to == nil || to.down || cl.nodes[e.from].down || (cl.drop != nil && cl.drop(e)) {
		return
	}
	h, body, err := wire.ParseFrame(e.frame)
	if err != nil {
		cl.t.Fatalf("frame from %d does not parse: %v", e.from, err)
	}
	m := stream.Message{From: e.from}
	switch h.Command {
	case wire.CommandStreamPrepare:
		m.Kind = stream.KindPrepare
		m.Prepare, err = wire.DecodeStreamPrepare(&h, body)
	case wire.CommandStreamPrepareOK:
		m.Kind = stream.KindPrepareOK
		m.PrepareOK, m.Epochs, err = wire.DecodeStreamPrepareOK(&h, body)
	default:
		err = fmt.Errorf("command %d", h.Command)
	}
	if err != nil {
		cl.t.Fatalf("frame from %d does not decode: %v", e.from, err)
	}
	to.c.Step(&m)
	to.ready(cl.t)
}

func (cl *cluster) tick(n int) {
	for range n {
		cl.ticks++
		for _, id := range cl.ids {
			if nd := cl.nodes[id]; !nd.down {
				nd.tick(cl.t)
			}
		}
		cl.settle()
	}
}

// tick ticks a settled copy (every input it took was followed by its Ready). A copy that is not
// Ticking is ticked too (its clock stops in a shard host, which skips it), and the Ready a shard
// host skips must indeed be empty: no effect and the heartbeat of the last Ready.
func (n *node) tick(t tb) {
	t.Helper()
	ticking := n.c.Ticking()
	n.c.Tick()
	if ticking {
		n.ready(t)
		return
	}
	prev := n.hb
	fx := n.c.Ready()
	hb := fx.Heartbeat
	if len(fx.Epochs)+len(fx.Appends)+len(fx.Reads)+len(fx.Prepares)+len(fx.PrepareOKs)+len(fx.Replies) > 0 || fx.SyncCursors {
		t.Fatalf("node %d: not Ticking, but the Ready a host skips had effects %+v", n.id, fx)
	}
	if hb.Role != prev.Role || hb.Epoch != prev.Epoch || hb.Commit != prev.Commit || hb.State != prev.State || !slices.Equal(hb.Holders, prev.Holders) {
		t.Fatalf("node %d: not Ticking, but the heartbeat moved from %+v to %+v", n.id, prev, hb)
	}
}

// produce sends one batch of count records with payload from client to node id.
func (cl *cluster) produce(id uint16, client, producer, seq uint64, count uint32, payload []byte) {
	n := cl.nodes[id]
	m := stream.Message{Kind: stream.KindProduce, Client: client}
	m.Produce = wire.Produce{RequestID: seq + 1000*client, Stream: testStream, ProducerID: producer, Sequence: seq, Count: count, Batch: payload}
	n.c.Step(&m)
	n.ready(cl.t)
}

func (n *node) takeReplies() []stream.Reply {
	r := n.replies
	n.replies = nil
	return r
}

// sameLog checks that a's durable record log is a prefix of b's or b's of a's, byte for byte.
func sameLog(t tb, a, b *node) {
	t.Helper()
	k := min(a.recSync, b.recSync)
	for i := 0; i < k; i++ {
		if !bytes.Equal(a.rec[i], b.rec[i]) {
			t.Fatalf("nodes %d and %d differ at batch %d", a.id, b.id, i)
		}
	}
}

func payload(i int, size int) []byte {
	b := make([]byte, size)
	for j := range b {
		b[j] = byte(i + j)
	}
	return b
}

// reassign applies a newer assignment in place as a host does after a seal or for a role change
// without a cut: appends made durable, Reassign, the cursors storage holds fed again, OpenDone.
// cursorEvent is an owner's cursor append as segment encodes it: name length u16 | name, then the
// offset unless it is a delete.
func cursorEvent(a stream.Append) []byte {
	b := binary.LittleEndian.AppendUint16(nil, uint16(len(a.CursorName)))
	b = append(b, a.CursorName...)
	if a.CursorDelete {
		return b
	}
	return binary.LittleEndian.AppendUint64(b, a.CursorOffset)
}

func (n *node) reassign(t tb, a meta.Assignment) {
	t.Helper()
	n.sync(t)
	n.ready(t)
	if err := n.c.Reassign(a, nil); err != nil {
		t.Fatal(err)
	}
	cursors := map[string]uint64{} // what storage's cursor map holds: the last event of each name
	for _, raw := range n.cur[:n.curSync] {
		_, payload, _, err := segment.DecodeBatch(raw)
		if err != nil || len(payload) < 2 {
			t.Fatalf("node %d: cursor event does not decode: %v", n.id, err)
		}
		name := payload[2 : 2+binary.LittleEndian.Uint16(payload)]
		if len(payload) == 2+len(name) {
			delete(cursors, string(name))
			continue
		}
		cursors[string(name)] = binary.LittleEndian.Uint64(payload[2+len(name):])
	}
	names := slices.Sorted(maps.Keys(cursors))
	for _, name := range names {
		n.c.ObserveCursor([]byte(name), cursors[name])
	}
	n.c.OpenDone(stream.OpenState{RecordTail: n.recTail(), CursorTail: n.curTail(), LogEpochs: n.epochs})
	n.ready(t)
}
