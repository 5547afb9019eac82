package streamhost

import (
	"testing"

	"github.com/ringstream/ringstream/segment"
	"github.com/ringstream/ringstream/wire"
)

// TestPrepare_EveryFlippedByteIsRefused: a follower hashes a prepare's payload once, under the
// frame's body checksum, and only checks its batches' headers (decodeBatchHeader). That is safe only
// while every byte of the frame is still covered: flip any one byte of a real prepare, header or
// body, and the frame parser or the batch decoder the copies use must refuse it.
func TestPrepare_EveryFlippedByteIsRefused(t *testing.T) {
	var batches []byte
	for i, payload := range []string{"first batch of records", "second", "and a third with more bytes in it"} {
		h := segment.BatchHeader{BaseOffset: uint64(10 + i), RecordCount: 1, Epoch: 3, FirstTimestamp: 7, MaxTimestamp: 7}
		batches = segment.AppendBatch(batches, &h, []byte(payload))
	}
	msg := wire.StreamPrepare{Stream: 5, Incarnation: 1, Epoch: 3, PrevEpoch: 3, Log: wire.LogRecords,
		BaseOffset: 10, Count: 3, ConfirmedTail: 9, Batches: batches}
	frame := wire.AppendStreamPrepare(nil, wire.From{Cluster: 1, Node: 1}, &msg)
	if err := acceptPrepare(frame); err != nil {
		t.Fatalf("the unchanged prepare is refused: %v", err)
	}
	for i := range frame {
		for _, bit := range []byte{0x01, 0x80} {
			frame[i] ^= bit
			if err := acceptPrepare(frame); err == nil {
				t.Errorf("byte %d (of %d; body from %d) flipped by %#x: the prepare was accepted", i, len(frame), wire.HeaderSize, bit)
			}
			frame[i] ^= bit
		}
	}
}

// acceptPrepare is a follower's receive path for one prepare frame: the frame parser, the prepare's
// decoder and the copies' decoder of received batches, batch by batch.
func acceptPrepare(frame []byte) error {
	h, body, err := wire.ParseFrame(frame)
	if err != nil {
		return err
	}
	m, err := wire.DecodeStreamPrepare(&h, body)
	if err != nil {
		return err
	}
	for off := 0; off < len(m.Batches); {
		_, n, err := decodeBatchHeader(m.Batches[off:])
		if err != nil {
			return err
		}
		off += n
	}
	return nil
}
