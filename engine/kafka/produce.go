package kafka

import (
	"bytes"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringstream/ringstream/engine/stream"
	"github.com/ringstream/ringstream/shard"
	"github.com/ringstream/ringstream/wire"
)

func serveProduce(h *Handler, s *shard.Shard, st *shardState, r *request, kreq kmsg.Request) {
	req := kreq.(*kmsg.ProduceRequest)
	resp := kmsg.NewPtrProduceResponse()
	resp.SetVersion(req.Version)
	r.resp = resp
	r.silent = req.Acks == 0 // Kafka sends nothing back for acks=0
	resp.Topics = make([]kmsg.ProduceResponseTopic, len(req.Topics))
	for ti := range req.Topics {
		t := &req.Topics[ti]
		rt := &resp.Topics[ti]
		*rt = kmsg.NewProduceResponseTopic()
		rt.Topic = t.Topic
		rt.Partitions = make([]kmsg.ProduceResponseTopicPartition, len(t.Partitions))
		for pi := range t.Partitions {
			rp := &rt.Partitions[pi]
			*rp = kmsg.NewProduceResponseTopicPartition()
			rp.Partition, rp.BaseOffset, rp.LogAppendTime, rp.LogStartOffset = t.Partitions[pi].Partition, -1, -1, -1
		}
	}
	for ti := range req.Topics {
		t := &req.Topics[ti]
		for pi := range t.Partitions {
			h.producePartition(s, st, r, req, t.Topic, &t.Partitions[pi], &resp.Topics[ti].Partitions[pi])
		}
	}
}

// producerSequence maps a Kafka batch's producer onto the stream's producer table: an idempotent
// producer's id as it is, and its epoch and base sequence as a Kafka sequence
// (stream.KafkaSequence), which the table checks by Kafka's rule. A batch without a producer id (-1,
// or 0, which the table takes for none and this node never allocates) is appended without a check.
func producerSequence(pb *producedBatch) (id, seq uint64) {
	if pb.ProducerID <= 0 {
		return 0, 0
	}
	return uint64(pb.ProducerID), stream.KafkaSequence(uint16(pb.ProducerEpoch), uint32(pb.BaseSequence))
}

// producePartition appends one partition's batch to its stream: checked (parseProducedBatch), then
// a produce of record format 2 to the stream, answered once the stream's policy confirmed it
// (acks=1 and acks=-1 alike).
func (h *Handler) producePartition(s *shard.Shard, st *shardState, r *request, req *kmsg.ProduceRequest,
	topic string, p *kmsg.ProduceRequestTopicPartition, rp *kmsg.ProduceResponseTopicPartition) {
	fail := func(code int16, msg string) {
		rp.ErrorCode = code
		h.metrics.errorCode(produceKey, code)
		if req.Version >= 8 && msg != "" {
			rp.ErrorMessage = &msg
		}
	}
	switch {
	case req.Acks != -1 && req.Acks != 0 && req.Acks != 1:
		fail(errInvalidRequiredAcks, "acks must be -1, 0 or 1")
		return
	case req.TransactionID != nil:
		fail(errTransactionalIDAuthz, "transactions are not supported")
		return
	case validateTopic(topic) != nil || p.Partition < 0 || p.Partition >= PartitionsMax:
		fail(errUnknownTopicOrPart, "")
		return
	}
	pb, err := parseProducedBatch(p.Records)
	if err != nil {
		h.log.Debug("kafka: produce refused", "topic", topic, "partition", p.Partition, "err", err)
		fail(batchErrorCode(err), err.Error())
		return
	}
	st.name = appendStreamName(st.name[:0], topic, p.Partition)
	name := string(st.name)
	if _, ok := st.ids[name]; !ok {
		// The lookup answers after this request's frame is gone: keep the records.
		pb.Records = bytes.Clone(pb.Records)
	}
	h.resolve(s, st, r, st.name, func(s *shard.Shard, st *shardState, id uint64, code int16, msg string) {
		if code != errNone {
			fail(code, msg)
			return
		}
		payload := appendStoredPayload(st.takeBuf(), &pb)
		rid := st.nextRequestID()
		pid, seq := producerSequence(&pb)
		b := wire.AppendProduce(st.takeBuf(), h.from, &wire.Produce{RequestID: rid, Stream: id, Codec: pb.Codec,
			Format: wire.FormatRecords, Count: pb.Count, Batch: payload, ProducerID: pid, Sequence: seq})
		st.giveBuf(payload)
		h.submit(s, st, r, rid, id, b, func(s *shard.Shard, st *shardState, rep *reply) {
			if code, msg := rep.errorCode(); code != errNone {
				st.forget(name, code)
				fail(code, msg)
				return
			}
			pr, err := wire.DecodeProduceReply(&rep.h, rep.body)
			if err != nil {
				fail(errUnknownServer, err.Error())
				return
			}
			rp.BaseOffset = int64(pr.BaseOffset)
		})
		st.giveBuf(b)
	})
}
