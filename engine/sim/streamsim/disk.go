package streamsim

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/engine/stream"
	"github.com/ringstream/ringstream/segment"
	"github.com/ringstream/ringstream/wire"
)

// decodeBatch is the host's adapter over segment's batch format, the one engine/stream reads.
func decodeBatch(b []byte) (stream.BatchHeader, int, error) {
	h, _, n, err := segment.DecodeBatch(b)
	if err != nil {
		return stream.BatchHeader{}, 0, err
	}
	if h.Epoch > math.MaxUint32 {
		return stream.BatchHeader{}, 0, errors.New("streamsim: batch epoch above 32 bits")
	}
	return stream.BatchHeader{BaseOffset: h.BaseOffset, Count: h.RecordCount, PayloadLen: h.PayloadLen,
		Epoch: uint32(h.Epoch), ProducerID: h.ProducerID, Sequence: h.ProducerSeq, Codec: h.Codec,
		Format: uint8(h.Version)}, n, nil
}

// encodeBatch is the host's encoding of an owner append (segment.Copy.Append does the same).
func encodeBatch(h stream.BatchHeader, payload []byte) []byte {
	sh := segment.BatchHeader{BaseOffset: h.BaseOffset, RecordCount: h.Count, Epoch: uint64(h.Epoch),
		ProducerID: h.ProducerID, ProducerSeq: h.Sequence, Codec: h.Codec, Version: uint16(h.Format)}
	return segment.AppendBatch(nil, &sh, payload)
}

// batchID names one batch as it was first appended: where, by which owner epoch, from which
// producer batch. Two copies hold the same record exactly when they hold the same batchID.
type batchID struct {
	base  uint64
	count uint32
	epoch uint32
	pid   uint64
	seq   uint64
}

func (b batchID) end() uint64 { return b.base + uint64(b.count) }

func (b batchID) String() string {
	return fmt.Sprintf("[%d,%d)@e%d p%d/%d", b.base, b.end(), b.epoch, b.pid, b.seq)
}

// slog is one simulated log file: encoded batches in offset order, the first synced of them
// durable.
type slog struct {
	raw    [][]byte
	ids    []batchID
	synced int
}

func (l *slog) tail() uint64 {
	if len(l.ids) == 0 {
		return 0
	}
	return l.ids[len(l.ids)-1].end()
}

func (l *slog) durableTail() uint64 {
	if l.synced == 0 {
		return 0
	}
	return l.ids[l.synced-1].end()
}

func (l *slog) append(raw []byte) (batchID, error) {
	h, _, err := decodeBatch(raw)
	if err != nil {
		return batchID{}, err
	}
	if h.BaseOffset != l.tail() {
		return batchID{}, fmt.Errorf("append at %d, log tail %d", h.BaseOffset, l.tail())
	}
	id := batchID{base: h.BaseOffset, count: h.Count, epoch: h.Epoch, pid: h.ProducerID, seq: h.Sequence}
	l.raw = append(l.raw, raw)
	l.ids = append(l.ids, id)
	return id, nil
}

// keep truncates the log to its first n batches.
func (l *slog) keep(n int) {
	clear(l.raw[n:])
	l.raw, l.ids = l.raw[:n], l.ids[:n]
	l.synced = min(l.synced, n)
}

// cutAt drops every batch that ends past off (a cut inside a batch drops that whole batch: the
// copy fetches the rest from its owner) and returns the offset it cut at and the batches dropped.
func (l *slog) cutAt(off uint64) (uint64, []batchID) {
	n := len(l.ids)
	for n > 0 && l.ids[n-1].end() > off {
		n--
	}
	dropped := append([]batchID(nil), l.ids[n:]...)
	l.keep(n)
	return l.tail(), dropped
}

// read returns the durable batches from the one holding from on, at least one, then up to
// bytesMax bytes.
func (l *slog) read(from uint64, bytesMax int) []byte {
	var out []byte
	for i := 0; i < l.synced; i++ {
		if l.ids[i].end() <= from {
			continue
		}
		if len(out) > 0 && len(out)+len(l.raw[i]) > bytesMax {
			break
		}
		out = append(out, l.raw[i]...)
	}
	return out
}

// unsyncedFrom returns every batch from the one based at base to the end.
func (l *slog) unsyncedFrom(base uint64) ([]byte, bool) {
	for i := range l.ids {
		if l.ids[i].base == base {
			var out []byte
			for _, r := range l.raw[i:] {
				out = append(out, r...)
			}
			return out, true
		}
	}
	return nil, base == l.tail()
}

// disk is one node's storage for one stream copy. It survives crashes: a power loss keeps what was
// synced and a random prefix of the rest of each log (a torn batch past it is cut on open, as
// segment does). The fence, the log epochs and the assignment the host last applied are written
// durably when they change.
type disk struct {
	logs    [2]slog // wire.LogRecords - 1, wire.LogCursors - 1
	fence   uint32
	epochs  []wire.LogEpoch
	asg     meta.Assignment
	starts  []meta.HistoryStart
	applied bool // asg and starts hold an applied assignment
	version uint64
	fault   diskFault // disk errors (diskfault.go)
}

func (d *disk) log(k wire.LogKind) *slog {
	if k == wire.LogCursors {
		return &d.logs[1]
	}
	return &d.logs[0]
}

func (d *disk) rec() *slog { return &d.logs[0] }
func (d *disk) cur() *slog { return &d.logs[1] }

func (d *disk) syncAll() {
	for i := range d.logs {
		d.logs[i].synced = len(d.logs[i].ids)
	}
}

// powerLoss keeps what was synced and, with torn, a random prefix of what was not.
func (d *disk) powerLoss(rng *rand.Rand, torn bool) {
	for i := range d.logs {
		l := &d.logs[i]
		keep := l.synced
		if torn {
			keep += rng.IntN(len(l.ids) - l.synced + 1)
		}
		l.keep(keep)
		l.synced = keep
	}
	d.version++
}

// cut brings the copy onto the recorded history at c and cuts the log epochs as segment does: an
// entry whose record start lies past the record cut goes; one at or below it stays, its cursor
// start clamped to the cursor cut. It returns the record batches dropped.
func (d *disk) cut(c meta.Cut) []batchID {
	recAt, dropped := d.rec().cutAt(c.Record)
	curAt, _ := d.cur().cutAt(c.Cursor)
	k := len(d.epochs)
	for k > 0 && d.epochs[k-1].RecordStart > recAt {
		k--
	}
	d.epochs = d.epochs[:k]
	for i := range d.epochs {
		d.epochs[i].CursorStart = min(d.epochs[i].CursorStart, curAt)
	}
	d.version++
	return dropped
}

// metaEpochs converts the log epochs for meta.CutPoint.
func (d *disk) metaEpochs() []meta.LogEpoch {
	out := make([]meta.LogEpoch, len(d.epochs))
	for i, e := range d.epochs {
		out[i] = meta.LogEpoch{Epoch: e.Epoch, RecordStart: e.RecordStart, CursorStart: e.CursorStart}
	}
	return out
}

// ownEpoch is the epoch of the copy's last log-epoch entry.
func (d *disk) ownEpoch() uint32 {
	if len(d.epochs) == 0 {
		return 0
	}
	return d.epochs[len(d.epochs)-1].Epoch
}

// cursorPayload is the simulated cursor event: the consumer's name and its offset.
func cursorPayload(name []byte, off uint64) []byte {
	return binary.LittleEndian.AppendUint64(append([]byte(nil), name...), off)
}

// cursorEvent decodes a cursor event batch.
func cursorEvent(raw []byte) ([]byte, uint64, bool) {
	_, payload, _, err := segment.DecodeBatch(raw)
	if err != nil || len(payload) < 8 {
		return nil, 0, false
	}
	n := len(payload) - 8
	return payload[:n], binary.LittleEndian.Uint64(payload[n:]), true
}
