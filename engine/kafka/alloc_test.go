package kafka

import (
	"strconv"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringstream/ringstream/wire"
)

// producePath is the record-batch work of one partition of a Produce: check the Kafka batch, build
// record format 2's payload and the produce frame (with the idempotent producer's id and Kafka
// sequence), into reused buffers.
func producePath(kb []byte, payload, frame []byte) ([]byte, []byte, error) {
	pb, err := parseProducedBatch(kb)
	if err != nil {
		return payload, frame, err
	}
	payload = appendStoredPayload(payload[:0], &pb)
	pid, seq := producerSequence(&pb)
	frame = wire.AppendProduce(frame[:0], wire.From{Cluster: 1, Node: 1}, &wire.Produce{RequestID: 1, Stream: 9,
		Codec: pb.Codec, Format: wire.FormatRecords, Count: pb.Count, Batch: payload, ProducerID: pid, Sequence: seq})
	return payload, frame, nil
}

// The produce and fetch paths allocate nothing per record: none at all once their buffers have
// grown, for a batch of one record or of a thousand.
func TestBatchPathsAllocateNothing(t *testing.T) {
	for _, n := range []int{1, 1000} {
		kb := kafkaBatch(someRecords(n), 1_700_000_000_000, 0)
		var payload, frame []byte
		var err error
		produce := testing.AllocsPerRun(20, func() {
			payload, frame, err = producePath(kb, payload, frame)
		})
		if err != nil {
			t.Fatal(err)
		}
		stored := storedBatch(0, uint32(n), uint16(wire.FormatRecords), codecNone, payload)
		stored = append(stored, stored...)
		var out []byte
		fetch := testing.AllocsPerRun(20, func() {
			out, err = appendKafkaBatches(out[:0], stored)
		})
		if err != nil {
			t.Fatal(err)
		}
		if produce != 0 || fetch != 0 {
			t.Errorf("%d records: %v allocations per produce batch, %v per fetch of two batches", n, produce, fetch)
		}
	}
}

// BenchmarkProduceBatch is the record-batch work of a produce partition (producePath);
// allocs/op stays 0 at every record count.
func BenchmarkProduceBatch(b *testing.B) {
	for _, n := range []int{1, 100, 1000} {
		b.Run(strconv.Itoa(n)+"-records", func(b *testing.B) {
			kb := kafkaBatch(someRecords(n), 1_700_000_000_000, 0)
			var payload, frame []byte
			var err error
			b.SetBytes(int64(len(kb)))
			b.ReportAllocs()
			for b.Loop() {
				if payload, frame, err = producePath(kb, payload, frame); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkFetchBatches turns a fetch reply's stored batches into Kafka batches; allocs/op stays 0.
func BenchmarkFetchBatches(b *testing.B) {
	for _, n := range []int{1, 100, 1000} {
		b.Run(strconv.Itoa(n)+"-records", func(b *testing.B) {
			pb, err := parseProducedBatch(kafkaBatch(someRecords(n), 1_700_000_000_000, 0))
			if err != nil {
				b.Fatal(err)
			}
			stored := storedBatch(0, uint32(n), uint16(wire.FormatRecords), codecNone, appendStoredPayload(nil, &pb))
			var out []byte
			b.SetBytes(int64(len(stored)))
			b.ReportAllocs()
			for b.Loop() {
				if out, err = appendKafkaBatches(out[:0], stored); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkProduceRequestDecode decodes a whole Produce request with kmsg and checks its batch: the
// allocations are per request and partition (kmsg's structs), the same at every record count.
func BenchmarkProduceRequestDecode(b *testing.B) {
	for _, n := range []int{1, 1000} {
		b.Run(strconv.Itoa(n)+"-records", func(b *testing.B) {
			req := kmsg.NewPtrProduceRequest()
			req.SetVersion(9)
			req.Acks = -1
			req.Topics = []kmsg.ProduceRequestTopic{{Topic: "orders", Partitions: []kmsg.ProduceRequestTopicPartition{
				{Partition: 0, Records: kafkaBatch(someRecords(n), 1, 0)}}}}
			frame := requestFrame(req, 1)
			b.ReportAllocs()
			for b.Loop() {
				_, r, ok, bodyErr, err := decodeRequest(frame)
				if !ok || bodyErr != nil || err != nil {
					b.Fatal(ok, bodyErr, err)
				}
				if _, err := parseProducedBatch(r.(*kmsg.ProduceRequest).Topics[0].Partitions[0].Records); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
