package bench

import (
	"encoding/binary"
	"testing"

	"github.com/ringstream/ringstream/client"
)

// A bench batch of N records is full at N records: the client Producer is told the count, and its
// byte bound holds exactly N records with their length prefixes (up to 1 MiB), for record sizes on
// both sides of a prefix's byte boundary.
func TestProducerConfigBatchIsNRecords(t *testing.T) {
	for _, size := range []int{16, 127, 128, 1024, 16383, 16384} {
		for _, batch := range []int{1, 2, 16, 64} {
			p := &producer{stream: "s", cfg: &Config{RecordSize: size, Batch: batch}}
			pc := p.producerConfig(client.CodecNone)
			framed := len(binary.AppendUvarint(nil, uint64(size))) + size
			if pc.BatchRecords != batch {
				t.Fatalf("size %d batch %d: BatchRecords %d, want %d", size, batch, pc.BatchRecords, batch)
			}
			if want := min(batch*framed, 1<<20); pc.BatchBytes != max(want, 16) {
				t.Fatalf("size %d batch %d: BatchBytes %d, want %d (%d records of %d framed bytes)",
					size, batch, pc.BatchBytes, want, batch, framed)
			}
		}
	}
}
