package vsr

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"
	"github.com/ringstream/ringstream/wire"
)

// transferCluster is a cluster of three whose replica 2 missed everything while the primary (0) took
// checkpoints at 8 and at 16 over many clients, so each checkpoint is several chunks long. It returns
// the checkpoint at 8 (captured when it was taken) and the one at 16.
func transferCluster(t *testing.T) (c *cluster, at8, at16 []byte) {
	t.Helper()
	c = newCluster(t, 3)
	c.cut = func(from, to uint8) bool { return from == 2 || to == 2 }
	p := c.replicas[0]
	for req := uint64(1); req <= 16; req++ {
		if err := c.propose(100+req, 1, req, 1); err != nil {
			t.Fatal(err)
		}
		if p.SnapshotOp() == 8 && at8 == nil {
			at8 = p.snapPayload
		}
	}
	at16 = p.snapPayload
	if p.SnapshotOp() != 16 || at8 == nil || len(at8) < 4*SnapshotChunkBytesMin {
		t.Fatalf("checkpoint op %d, %d bytes at 8: want two checkpoints of several chunks", p.SnapshotOp(), len(at8))
	}
	return c, at8, at16
}

// chunk is the chunk of payload (the checkpoint at op) from off, as replica from would send it.
func chunk(from uint8, op uint64, payload []byte, off int) wire.VSRMessage {
	end := min(off+SnapshotChunkBytesMin, len(payload))
	return wire.VSRMessage{Command: wire.CommandVSRSnapshot, Replica: from, Op: op, Checksum: checksumOf(payload),
		Offset: uint32(off), Total: uint32(len(payload)), Payload: payload[off:end]}
}

// sent returns the messages of command cmd in r's next effects.
func sent(r *Replica, cmd wire.Command) []wire.VSRMessage {
	var out []wire.VSRMessage
	for _, env := range r.Ready().Messages {
		if env.Msg.Command == cmd {
			out = append(out, cloneMessage(&env.Msg))
		}
	}
	return out
}

// TestTransfer_CatchesUpInChunks: a replica behind the checkpoint pulls it chunk by chunk, each ask
// naming the next offset of the same checkpoint, and ends at the group's commit and digest.
func TestTransfer_CatchesUpInChunks(t *testing.T) {
	c, _, at16 := transferCluster(t)
	c.cut = nil
	c.heartbeat()
	c.tick(4)
	c.heartbeat()
	r, p := c.replicas[2], c.replicas[0]
	want := uint64((len(at16) + SnapshotChunkBytesMin - 1) / SnapshotChunkBytesMin)
	st := r.Stats()
	if st.SnapshotsIn != 1 || st.SnapshotChunksIn != want || p.Stats().SnapshotChunksOut < want {
		t.Fatalf("snapshots in %d, chunks in %d out %d; want 1 checkpoint in %d chunks", st.SnapshotsIn,
			st.SnapshotChunksIn, p.Stats().SnapshotChunksOut, want)
	}
	if r.Commit() != 16 || r.Digest() != p.Digest() || r.SnapshotOp() != 16 {
		t.Fatalf("replica 2 commit %d checkpoint %d, digest equal %v", r.Commit(), r.SnapshotOp(), r.Digest() == p.Digest())
	}
	if r.xfer.active || r.xfer.buf != nil {
		t.Fatal("the transfer's state outlived the install")
	}
}

// TestTransfer_PastSnapshotBytesMaxRefused: the announced total is input; one past the receiver's limit
// is refused before any byte is kept, and nothing is asked; one at the limit is taken.
func TestTransfer_PastSnapshotBytesMaxRefused(t *testing.T) {
	c, _, at16 := transferCluster(t)
	r := c.replicas[2]
	r.Ready()
	r.cfg.SnapshotBytesMax = len(at16) - 1
	m := chunk(0, 16, at16, 0)
	r.Step(&m)
	st := r.Stats()
	if st.SnapshotsRefused != 1 || st.SnapshotChunksIn != 0 || r.xfer.active ||
		st.Dropped["snapshot: "+ErrSnapshotTooLarge.Error()] != 1 || len(sent(r, wire.CommandVSRRequestSnapshot)) != 0 {
		t.Fatalf("past the limit: stats %+v, transfer active %v", *st, r.xfer.active)
	}
	r.cfg.SnapshotBytesMax = len(at16)
	r.Step(&m)
	asks := sent(r, wire.CommandVSRRequestSnapshot)
	if len(asks) != 1 || asks[0].Offset != SnapshotChunkBytesMin || asks[0].Op != 16 ||
		asks[0].Checksum != checksumOf(at16) || r.Stats().SnapshotChunksIn != 1 {
		t.Fatalf("at the limit: asks %+v, stats %+v", asks, *r.Stats())
	}
}

// TestTransfer_SenderMovedOnRestarts: a chunk of a newer checkpoint in the middle of a transfer starts
// it over on the newer one, from its first byte; a chunk of an older one is dropped.
func TestTransfer_SenderMovedOnRestarts(t *testing.T) {
	c, at8, at16 := transferCluster(t)
	r := c.replicas[2]
	r.Ready()
	first := chunk(0, 8, at8, 0)
	r.Step(&first)
	r.Ready()
	newer := chunk(0, 16, at16, SnapshotChunkBytesMin)
	r.Step(&newer)
	asks := sent(r, wire.CommandVSRRequestSnapshot)
	if r.Stats().SnapshotTransfersRestarted != 1 || len(asks) != 1 || asks[0].Op != 16 || asks[0].Offset != 0 ||
		asks[0].Checksum != checksumOf(at16) {
		t.Fatalf("restart: stats %+v, asks %+v", *r.Stats(), asks)
	}
	older := chunk(0, 8, at8, 0)
	r.Step(&older)
	if r.Stats().Dropped["snapshot: chunk of an older checkpoint"] != 1 {
		t.Fatalf("older chunk: drops %v", r.Stats().Dropped)
	}
	for off := 0; off < len(at16); off += SnapshotChunkBytesMin {
		m := chunk(0, 16, at16, off)
		r.Step(&m)
	}
	if r.Stats().SnapshotsIn != 1 || r.Commit() != 16 || r.SnapshotOp() != 16 {
		t.Fatalf("after the restart: snapshots in %d commit %d", r.Stats().SnapshotsIn, r.Commit())
	}
}

// TestTransfer_ChunksOfTwoCheckpointsRefused: bytes of two checkpoints under one identity (a sender's
// bug, or chunks mixed on the way) add up to a payload whose checksum is not the identity's: the
// install is refused, counted, and nothing of it is applied.
func TestTransfer_ChunksOfTwoCheckpointsRefused(t *testing.T) {
	c, at8, at16 := transferCluster(t)
	r := c.replicas[2]
	commit, digest := r.Commit(), r.Digest()
	mixed := append(append([]byte(nil), at8[:SnapshotChunkBytesMin]...), at16[SnapshotChunkBytesMin:len(at8)]...)
	for off := 0; off < len(at8); off += SnapshotChunkBytesMin {
		m := chunk(0, 8, at8, off)
		m.Payload = mixed[off:min(off+SnapshotChunkBytesMin, len(mixed))]
		r.Step(&m)
	}
	st := r.Stats()
	if st.SnapshotsRefused != 1 || st.SnapshotsIn != 0 || st.Dropped["snapshot: "+ErrSnapshotChecksum.Error()] != 1 ||
		r.Commit() != commit || r.Digest() != digest || r.xfer.active {
		t.Fatalf("mixed checkpoint: stats %+v commit %d", *st, r.Commit())
	}
}

// TestTransfer_LostChunkAskedAgainThenAbandoned: a chunk that does not come is asked again on the repair
// timeout; after transferStallsMax timeouts without one the transfer is given up and counted.
func TestTransfer_LostChunkAskedAgainThenAbandoned(t *testing.T) {
	c, _, at16 := transferCluster(t)
	r := c.replicas[2]
	r.Ready()
	m := chunk(0, 16, at16, 0)
	r.Step(&m)
	r.Ready() // the ask is lost
	timeout := func() []wire.VSRMessage {
		for i := uint64(0); i < r.cfg.RepairTimeoutTicks; i++ {
			r.Tick()
		}
		return sent(r, wire.CommandVSRRequestSnapshot)
	}
	if asks := timeout(); len(asks) != 0 {
		t.Fatalf("asked again in the timeout a chunk came in: %+v", asks)
	}
	for i := 1; i < transferStallsMax; i++ {
		asks := timeout()
		if len(asks) != 1 || asks[0].Offset != SnapshotChunkBytesMin || r.Stats().SnapshotChunksReasked != uint64(i) {
			t.Fatalf("stalled timeout %d: asks %+v, stats %+v", i, asks, *r.Stats())
		}
	}
	timeout()
	if st := r.Stats(); st.SnapshotTransfersAbandoned != 1 || r.xfer.active || st.Dropped["snapshot: transfer stalled"] != 1 {
		t.Fatalf("after %d stalled timeouts: stats %+v", transferStallsMax, *st)
	}
}

// TestTransfer_SenderAnswersFromItsCheckpoint: an ask is answered from the checkpoint in force, at the
// asked offset whatever identity it names (the asker sees the identity change), from 0 past its end.
func TestTransfer_SenderAnswersFromItsCheckpoint(t *testing.T) {
	c, at8, at16 := transferCluster(t)
	p := c.replicas[0]
	p.Ready()
	ask := wire.VSRMessage{Command: wire.CommandVSRRequestSnapshot, Replica: 1, Op: 8, Checksum: checksumOf(at8),
		Offset: SnapshotChunkBytesMin}
	p.Step(&ask)
	got := sent(p, wire.CommandVSRSnapshot)
	want := chunk(0, 16, at16, SnapshotChunkBytesMin)
	if len(got) != 1 || got[0].Op != 16 || got[0].Checksum != want.Checksum || got[0].Offset != want.Offset ||
		got[0].Total != want.Total || string(got[0].Payload) != string(want.Payload) || got[0].Commit != p.Commit() {
		t.Fatalf("answer %+v", got)
	}
	ask.Offset = uint32(len(at16))
	p.Step(&ask)
	if got := sent(p, wire.CommandVSRSnapshot); len(got) != 1 || got[0].Offset != 0 || p.Stats().SnapshotsSent != 1 {
		t.Fatalf("ask past the end: %+v, stats %+v", got, *p.Stats())
	}
	fresh := mustNew(t, 3, 2)
	fresh.Step(&ask)
	if fresh.Stats().Dropped["request_snapshot: no checkpoint"] != 1 {
		t.Fatalf("no checkpoint: drops %v", fresh.Stats().Dropped)
	}
}

func TestConfig_SnapshotLimitsValidated(t *testing.T) {
	for _, c := range []struct {
		name           string
		chunk, maximum int
	}{
		{"chunk below the minimum", SnapshotChunkBytesMin - 1, 1 << 20},
		{"chunk past the frame", wire.VSRPayloadMax + 1, 1 << 20},
		{"no maximum", 1 << 20, 0},
		{"maximum past the format", 1 << 20, math.MaxUint32 + 1},
	} {
		cfg := testConfig(3, 0)
		cfg.SnapshotChunkBytes, cfg.SnapshotBytesMax = c.chunk, c.maximum
		if err := cfg.Validate(); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "snapshot_") {
			t.Errorf("%s: %v, want ErrConfig naming the field", c.name, err)
		}
	}
	cfg := testConfig(3, 0)
	cfg.SnapshotChunkBytes, cfg.SnapshotBytesMax = wire.VSRPayloadMax, math.MaxUint32
	if err := cfg.Validate(); err != nil {
		t.Fatalf("the largest limits: %v", err)
	}
}

func checksumOf(payload []byte) uint64 { return xxhash.Sum64(payload) }

// TestTransfer_SenderKeepsServingTheCheckpointBeingPulled: a sender that takes a newer checkpoint keeps
// answering from the one a peer is pulling, as long as the peer keeps asking between its checkpoints;
// one nobody asked for since is let go.
func TestTransfer_SenderKeepsServingTheCheckpointBeingPulled(t *testing.T) {
	c := newCluster(t, 3)
	c.cut = func(from, to uint8) bool { return from == 2 || to == 2 }
	p := c.replicas[0]
	ops := func(first uint64) {
		for req := first; req < first+8; req++ {
			if err := c.propose(100+req, 1, req, 1); err != nil {
				t.Fatal(err)
			}
		}
	}
	ops(1)
	at8 := p.snapPayload
	ask := wire.VSRMessage{Command: wire.CommandVSRRequestSnapshot, Replica: 2, Op: 8, Checksum: checksumOf(at8)}
	answer := func(off uint32) wire.VSRMessage {
		t.Helper()
		p.Ready()
		ask.Offset = off
		p.Step(&ask)
		got := sent(p, wire.CommandVSRSnapshot)
		if len(got) != 1 {
			t.Fatalf("ask at %d: %d answers", off, len(got))
		}
		return got[0]
	}
	answer(0)
	ops(9)
	if got := answer(SnapshotChunkBytesMin); p.SnapshotOp() != 16 || got.Op != 8 ||
		string(got.Payload) != string(at8[SnapshotChunkBytesMin:2*SnapshotChunkBytesMin]) {
		t.Fatalf("after checkpoint %d: answer from checkpoint %d, want 8", p.SnapshotOp(), got.Op)
	}
	ops(17)
	if got := answer(2 * SnapshotChunkBytesMin); p.SnapshotOp() != 24 || got.Op != 8 {
		t.Fatalf("after checkpoint %d with 8 still pulled: answer from %d, want 8", p.SnapshotOp(), got.Op)
	}
	ops(25) // checkpoint 32: 8 was asked for since 24, so it stays
	ops(33) // checkpoint 40: nothing was asked for since 32
	if got := answer(3 * SnapshotChunkBytesMin); p.SnapshotOp() != 40 || got.Op != 40 || p.served.payload != nil {
		t.Fatalf("after checkpoint %d with nothing pulled: answer from %d, served %d bytes; want 40 and none",
			p.SnapshotOp(), got.Op, len(p.served.payload))
	}
}

// TestTransfer_ChunkGuards: a duplicate chunk, or one past the next offset, is dropped without an ask;
// a chunk naming another checksum at the same op starts the transfer over; a checkpoint whose bytes
// decode at another op than the one announced is refused; and while a transfer runs, the repair does
// not ask the primary for the ops the checkpoint covers.
func TestTransfer_ChunkGuards(t *testing.T) {
	c, at8, at16 := transferCluster(t)
	r := c.replicas[2]
	r.Ready()
	first := chunk(0, 16, at16, 0)
	r.Step(&first)
	r.Ready()
	r.Step(&first)
	skip := chunk(0, 16, at16, 2*SnapshotChunkBytesMin)
	r.Step(&skip)
	if st := r.Stats(); st.Dropped["snapshot: chunk out of order"] != 2 || st.SnapshotChunksIn != 1 ||
		len(r.xfer.buf) != SnapshotChunkBytesMin || len(r.Ready().Messages) != 0 {
		t.Fatalf("duplicate and skipped chunks: stats %+v, %d bytes held", *st, len(r.xfer.buf))
	}
	r.OnCommitEntry(0, 16)
	if asks := sent(r, wire.CommandVSRRequestPrepare); len(asks) != 0 {
		t.Fatalf("asked the primary for ops during a transfer: %+v", asks)
	}
	other := chunk(0, 16, at16, SnapshotChunkBytesMin)
	other.Checksum++
	r.Step(&other)
	if asks := sent(r, wire.CommandVSRRequestSnapshot); r.Stats().SnapshotTransfersRestarted != 1 || len(asks) != 1 ||
		asks[0].Offset != 0 || asks[0].Checksum != other.Checksum {
		t.Fatalf("another checksum at the same op: stats %+v, asks %+v", *r.Stats(), asks)
	}
	// The checkpoint at 8, announced at op 9: its bytes match the checksum but decode at op 8.
	r.endTransfer()
	for off := 0; off < len(at8); off += SnapshotChunkBytesMin {
		m := chunk(0, 9, at8, off)
		r.Step(&m)
	}
	if st := r.Stats(); st.SnapshotsRefused != 1 || st.SnapshotsIn != 0 || st.Dropped["snapshot: "+ErrRecord.Error()] != 1 ||
		!strings.Contains(st.LastSnapshotRefusal, "announced at 9") {
		t.Fatalf("checkpoint at another op: stats %+v", *st)
	}
	// The primary in normal status holds every committed op: it takes no checkpoint from anyone.
	p := c.replicas[0]
	ahead := chunk(1, p.Commit()+8, at16, 0)
	p.Step(&ahead)
	if st := p.Stats(); st.Dropped["snapshot: to the primary"] != 1 || st.SnapshotChunksIn != 0 || p.xfer.active {
		t.Fatalf("chunk to the primary: stats %+v", *st)
	}
}
