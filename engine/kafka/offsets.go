package kafka

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringstream/ringstream/shard"
	"github.com/ringstream/ringstream/wire"
)

// ListOffsets timestamps with a meaning of their own.
const (
	latestTimestamp   = -1
	earliestTimestamp = -2
)

func serveListOffsets(h *Handler, s *shard.Shard, st *shardState, r *request, kreq kmsg.Request) {
	req := kreq.(*kmsg.ListOffsetsRequest)
	resp := kmsg.NewPtrListOffsetsResponse()
	resp.SetVersion(req.Version)
	r.resp = resp
	resp.Topics = make([]kmsg.ListOffsetsResponseTopic, len(req.Topics))
	for ti := range req.Topics {
		t := &req.Topics[ti]
		rt := &resp.Topics[ti]
		*rt = kmsg.NewListOffsetsResponseTopic()
		rt.Topic = t.Topic
		rt.Partitions = make([]kmsg.ListOffsetsResponseTopicPartition, len(t.Partitions))
		for pi := range t.Partitions {
			p := &t.Partitions[pi]
			rp := &rt.Partitions[pi]
			*rp = kmsg.NewListOffsetsResponseTopicPartition()
			rp.Partition, rp.Timestamp, rp.Offset, rp.LeaderEpoch = p.Partition, -1, -1, -1
			h.listOffset(s, st, r, t.Topic, p.Partition, p.Timestamp, rp)
		}
	}
}

// listOffset answers one partition: latest is the confirmed tail (the high watermark), earliest the
// retained head, both from the stream owner's list-cursors answer.
func (h *Handler) listOffset(s *shard.Shard, st *shardState, r *request, topic string, partition int32, ts int64,
	rp *kmsg.ListOffsetsResponseTopicPartition) {
	switch {
	case validateTopic(topic) != nil || partition < 0 || partition >= PartitionsMax:
		rp.ErrorCode = errUnknownTopicOrPart
		return
	case ts != latestTimestamp && ts != earliestTimestamp:
		rp.ErrorCode = errInvalidRequest // by timestamp: not served yet (docs/kafka.md)
		h.metrics.errorCode(listOffsetsKey, errInvalidRequest)
		return
	}
	st.name = appendStreamName(st.name[:0], topic, partition)
	name := string(st.name)
	h.resolve(s, st, r, st.name, func(s *shard.Shard, st *shardState, id uint64, code int16, _ string) {
		if code != errNone {
			rp.ErrorCode = code
			return
		}
		rid := st.nextRequestID()
		b := wire.AppendListCursors(st.takeBuf(), h.from, &wire.ListCursors{RequestID: rid, Stream: id, Limit: 1})
		h.submit(s, st, r, rid, id, b, func(s *shard.Shard, st *shardState, rep *reply) {
			if code, _ := rep.errorCode(); code != errNone {
				st.forget(name, code)
				rp.ErrorCode = code
				h.metrics.errorCode(listOffsetsKey, code)
				return
			}
			lr, _, err := wire.DecodeListCursorsReply(&rep.h, rep.body)
			if err != nil {
				rp.ErrorCode = errUnknownServer
				return
			}
			if ts == latestTimestamp {
				rp.Offset = int64(lr.ConfirmedTail)
			} else {
				rp.Offset = int64(lr.Head)
			}
		})
		st.giveBuf(b)
	})
}
