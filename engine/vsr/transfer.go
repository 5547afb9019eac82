package vsr

import (
	"errors"
	"fmt"
	"math"

	"github.com/cespare/xxhash/v2"
	"github.com/ringstream/ringstream/wire"
)

// State transfer. A replica that needs ops at or below a peer's checkpoint assembles that checkpoint
// from chunks it pulls, one at a time: each chunk names the checkpoint's identity (op and the xxhash64
// of the whole payload) and total length, and the receiver asks for the next offset of that identity
// (CommandVSRRequestSnapshot). The sender answers every ask from the checkpoint it holds now, so a
// sender that took a newer checkpoint mid-transfer answers with the newer one's identity, and the
// receiver starts over on it. The assembled whole is checked (its checksum, then the checkpoint's
// decode and op) before Restore; one that fails is refused and counted, and the next ask starts over.
//
// A sender keeps serving the checkpoint a peer is pulling after it takes a newer one: on each new
// checkpoint, the one before stays served (r.served) when a peer asked for a chunk of it since, and an
// older one still served stays instead when a peer asked for it since; otherwise nothing older is
// kept, so an idle replica holds one checkpoint's bytes. A transfer then starts over only when its
// sender took two checkpoints during it while another peer pulled the older one, not each time the
// state moves on under load.
//
// Bounds and timers: a total past Config.SnapshotBytesMax is refused before any byte is kept
// (ErrSnapshotTooLarge); the receiver holds at most one transfer's bytes. A chunk that does not come
// is asked again on the repair timeout; a transfer with no chunk in transferStallsMax repair timeouts in
// a row is abandoned (counted), and the usual repair asks the primary (or the member the replica waits
// on) again, which starts a new transfer.

// ErrSnapshotTooLarge: a peer announced a checkpoint longer than Config.SnapshotBytesMax. The receiver
// refuses it (Stats.SnapshotsRefused) and cannot catch up from that peer until the limit is raised.
var ErrSnapshotTooLarge = errors.New("vsr: checkpoint past snapshot_bytes_max")

// ErrSnapshotChecksum: the chunks of a transfer added up to bytes whose xxhash64 is not the
// checkpoint's identity (chunks of two checkpoints, or a sender's bug). The transfer starts over.
var ErrSnapshotChecksum = errors.New("vsr: assembled checkpoint does not match its checksum")

// errSnapshotRestore: the assembled checkpoint decoded but the state machine refused its state.
var errSnapshotRestore = errors.New("vsr: checkpoint state does not restore")

// transferStallsMax is how many repair timeouts in a row a transfer may go without a chunk before it is
// abandoned: its sender is gone or no longer holds it.
const transferStallsMax = 3

// transfer is the checkpoint this replica is assembling from a peer's chunks.
type transfer struct {
	active     bool
	from       uint8  // the member whose chunk came last: the next one is asked from it
	op         uint64 // the checkpoint's op
	sum        uint64 // xxhash64 of the whole checkpoint
	total      uint32 // its length
	buf        []byte // the bytes [0, len(buf)) so far
	progressed bool   // a chunk came since the last repair timeout
	stalls     int    // repair timeouts in a row without a chunk
}

// servedCheckpoint is an older checkpoint a sender keeps for a peer still pulling it.
type servedCheckpoint struct {
	op, sum uint64
	payload []byte
	asked   bool // a chunk of it was sent since the sender's last checkpoint
}

// retireCheckpoint is called before the checkpoint in force is replaced: it decides which older
// checkpoint stays served (see the file's comment).
func (r *Replica) retireCheckpoint() {
	switch {
	case r.served.asked && r.served.payload != nil:
	case r.snapAsked && r.snapPayload != nil:
		r.served = servedCheckpoint{op: r.snapOp, sum: r.snapChecksum, payload: r.snapPayload}
	default:
		r.served = servedCheckpoint{}
	}
	r.served.asked, r.snapAsked = false, false
}

// sendChunk sends member to the bytes of the checkpoint in force from offset off (0 when off is past
// its end).
func (r *Replica) sendChunk(to uint8, off uint64) {
	r.snapAsked = true
	r.sendChunkOf(to, r.snapOp, r.snapChecksum, r.snapPayload, off)
}

// sendChunkOf sends member to the bytes of checkpoint op, sum (payload) from offset off (0 when off is
// past its end).
func (r *Replica) sendChunkOf(to uint8, op, sum uint64, payload []byte, off uint64) {
	total := uint64(len(payload))
	if total > math.MaxUint32 {
		// The checkpoint's own format holds its state's size in a u32; wire's total is one too.
		r.refuseSnapshot(fmt.Errorf("%w: own checkpoint of %d bytes is past 4 GiB", ErrSnapshotTooLarge, total))
		return
	}
	if off >= total {
		off = 0
	}
	end := min(off+uint64(r.cfg.SnapshotChunkBytes), total)
	if off == 0 {
		r.stats.SnapshotsSent++
	}
	r.stats.SnapshotChunksOut++
	r.send(to, wire.VSRMessage{Command: wire.CommandVSRSnapshot, View: r.view, Op: op, Commit: r.commit,
		Checksum: sum, Offset: uint32(off), Total: uint32(total), Payload: payload[off:end]}, false)
}

// onRequestSnapshot answers a peer's ask for the next chunk: from the checkpoint it names when this
// replica still serves it, else from the checkpoint in force (the chunk's identity tells the peer).
func (r *Replica) onRequestSnapshot(m *wire.VSRMessage) {
	if sv := &r.served; sv.payload != nil && m.Op == sv.op && m.Checksum == sv.sum {
		sv.asked = true
		r.sendChunkOf(m.Replica, sv.op, sv.sum, sv.payload, uint64(m.Offset))
		return
	}
	if r.snapOp == 0 {
		r.drop("request_snapshot: no checkpoint")
		return
	}
	r.sendChunk(m.Replica, uint64(m.Offset))
}

// askChunk asks the member that sent the last chunk for the next one.
func (r *Replica) askChunk() {
	x := &r.xfer
	r.send(x.from, wire.VSRMessage{Command: wire.CommandVSRRequestSnapshot, View: r.view, Op: x.op, Checksum: x.sum,
		Offset: uint32(len(x.buf))}, false)
}

// beginTransfer starts assembling the checkpoint m names. The buffer is kept across transfers.
func (r *Replica) beginTransfer(m *wire.VSRMessage) {
	x := &r.xfer
	x.active, x.from, x.op, x.sum, x.total = true, m.Replica, m.Op, m.Checksum, m.Total
	x.progressed, x.stalls = true, 0
	if cap(x.buf) < int(m.Total) {
		x.buf = make([]byte, 0, m.Total)
	}
	x.buf = x.buf[:0]
}

// endTransfer forgets the transfer in progress (its buffer goes: a transfer is rare and large).
func (r *Replica) endTransfer() { r.xfer = transfer{} }

// onSnapshot takes one chunk of a checkpoint ahead of this replica's commit, and installs the
// checkpoint once the chunks add up to it. A checkpoint is committed state, so any replica's is safe to
// install whatever the views.
func (r *Replica) onSnapshot(m *wire.VSRMessage) {
	x := &r.xfer
	if x.active && x.op <= r.commit {
		r.endTransfer() // the replica got past it another way (prepares, another checkpoint)
	}
	if m.Op <= r.commit {
		r.drop("snapshot: not ahead of commit")
		return
	}
	if r.isPrimary() {
		// A primary in normal status holds every committed op; its log must not change under the
		// persists it counts toward commits.
		r.drop("snapshot: to the primary")
		return
	}
	if uint64(m.Total) > uint64(r.cfg.SnapshotBytesMax) {
		r.refuseSnapshot(fmt.Errorf("%w: %d bytes announced, limit %d", ErrSnapshotTooLarge, m.Total,
			r.cfg.SnapshotBytesMax))
		return
	}
	if !x.active || x.op != m.Op || x.sum != m.Checksum || x.total != m.Total {
		switch {
		case x.active && m.Op < x.op:
			r.drop("snapshot: chunk of an older checkpoint")
			return
		case x.active && r.broken.mixChunks && uint64(m.Offset) == uint64(len(x.buf)):
			x.op, x.sum, x.total = m.Op, m.Checksum, m.Total // the broken rule: carry on with the other one
		default:
			if x.active {
				r.stats.SnapshotTransfersRestarted++
			}
			r.beginTransfer(m)
			if m.Offset != 0 {
				r.askChunk() // a newer checkpoint than the one asked for: from its first byte
				return
			}
		}
	}
	if uint64(m.Offset) != uint64(len(x.buf)) || uint64(len(x.buf))+uint64(len(m.Payload)) > uint64(x.total) {
		// A duplicate or a late answer to an ask already re-sent: the repair timeout asks again if the
		// right one never comes.
		r.drop("snapshot: chunk out of order")
		return
	}
	x.buf = append(x.buf, m.Payload...)
	x.from, x.progressed = m.Replica, true
	r.stats.SnapshotChunksIn++
	if len(x.buf) < int(x.total) {
		r.askChunk()
		return
	}
	payload := x.buf
	r.endTransfer()
	if err := r.installCheckpoint(m, payload); err != nil {
		r.refuseSnapshot(err)
	}
}

// refuseSnapshot counts a refused checkpoint: among the drops under its kind (a fixed text), and with
// err, the whole cause, kept for the host's log line.
func (r *Replica) refuseSnapshot(err error) {
	r.stats.SnapshotsRefused++
	r.stats.LastSnapshotRefusal = err.Error()
	kind := errSnapshotRestore
	for _, k := range []error{ErrSnapshotTooLarge, ErrSnapshotChecksum, ErrRecord} {
		if errors.Is(err, k) {
			kind = k
			break
		}
	}
	r.drop("snapshot: " + kind.Error())
}

// installCheckpoint checks the assembled payload of the checkpoint the last chunk m names and installs
// it: the state machine's and client table's state, the log trimmed to what follows it, the commit
// point raised.
func (r *Replica) installCheckpoint(m *wire.VSRMessage, payload []byte) error {
	if !r.broken.mixChunks && xxhash.Sum64(payload) != m.Checksum {
		return ErrSnapshotChecksum
	}
	cp, err := decodeCheckpoint(payload)
	if err != nil {
		return err
	}
	if cp.op != m.Op && !r.broken.mixChunks {
		return fmt.Errorf("%w: checkpoint at op %d, announced at %d", ErrRecord, cp.op, m.Op)
	}
	op := cp.op
	if op <= r.commit {
		return fmt.Errorf("%w: checkpoint at op %d is not ahead of commit %d", ErrRecord, op, r.commit)
	}
	if err := r.sm.Restore(cp.state); err != nil {
		return fmt.Errorf("%w: %w", errSnapshotRestore, err)
	}
	r.stats.SnapshotsIn++
	r.clients.sessions = cp.sessions
	r.retireCheckpoint()
	r.snapPayload = payload
	r.snapOp, r.snapChecksum = op, xxhash.Sum64(payload)
	r.pendingSnapshot = r.snapPayload
	if op <= r.op && r.headAt(op) == cp.head {
		r.log = r.log[:copy(r.log, r.log[op-r.logBase:])]
	} else {
		// This replica's entries past its commit are not on the committed chain: none of them can
		// commit, so they go.
		r.log = r.log[:0]
		r.op = op
	}
	r.logBase, r.logBaseHead = op, cp.head
	r.commit = op
	r.commitMax = max(r.commitMax, r.snapshotCommitJustified(m))
	r.dirty = true
	r.afterSnapshot()
	return nil
}

// repairTransfer is the repair timeout's part for a transfer in progress: nothing while chunks come,
// the next chunk asked again once one did not, the transfer abandoned after transferStallsMax timeouts
// without a chunk. It reports whether it asked (the timeout's other repairs then wait).
func (r *Replica) repairTransfer() bool {
	x := &r.xfer
	if !x.active {
		return false
	}
	if x.op <= r.commit {
		r.endTransfer()
		return false
	}
	if x.progressed {
		x.progressed, x.stalls = false, 0
		return true
	}
	x.stalls++
	if x.stalls >= transferStallsMax {
		r.stats.SnapshotTransfersAbandoned++
		r.drop("snapshot: transfer stalled")
		r.endTransfer()
		return false
	}
	r.stats.SnapshotChunksReasked++
	r.askChunk()
	return true
}
