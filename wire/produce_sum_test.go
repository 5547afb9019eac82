package wire_test

import (
	"testing"

	"github.com/cespare/xxhash/v2"

	"github.com/ringstream/ringstream/wire"
)

// TestDecodeProduce_BatchSumIsThePayloadsChecksum: the owner stores a produce's BatchSum as the
// batch's payload checksum without hashing the payload again, so it must be exactly xxhash64 of
// Batch (what every read and recovery checks the payload against).
func TestDecodeProduce_BatchSumIsThePayloadsChecksum(t *testing.T) {
	m := wire.Produce{RequestID: 1, Stream: 9, ProducerID: 4, Sequence: 2, Count: 3, Batch: []byte("three records, encoded")}
	h, body, err := wire.ParseFrame(wire.AppendProduce(nil, wire.From{Cluster: testCluster}, &m))
	if err != nil {
		t.Fatal(err)
	}
	got, err := wire.DecodeProduce(&h, body)
	if err != nil {
		t.Fatal(err)
	}
	if !got.BatchSummed || got.BatchSum != xxhash.Sum64(m.Batch) {
		t.Fatalf("BatchSum %#x (summed %v), want %#x", got.BatchSum, got.BatchSummed, xxhash.Sum64(m.Batch))
	}
}
