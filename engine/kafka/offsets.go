package kafka

import (
	"encoding/binary"

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
	case ts < 0 && ts != latestTimestamp && ts != earliestTimestamp:
		rp.ErrorCode = errInvalidRequest // -3 (max timestamp) and the like: not served
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
			switch ts {
			case latestTimestamp:
				rp.Offset = int64(lr.ConfirmedTail)
			case earliestTimestamp:
				rp.Offset = int64(lr.Head)
			default:
				h.searchTime(s, st, r, id, ts, lr.Head, lr.ConfirmedTail, lr.ConfirmedTail, rp)
			}
		})
		st.giveBuf(b)
	})
}

// searchTime answers ListOffsets by timestamp: the first offset whose batch was appended at or after
// ts (unix ms), searched between the retained head and the confirmed tail with fetches of one
// record, each answered with the whole batch holding it (about log2(records) of them). It searches
// the batches' append times (the stored header's max timestamp, the owner's clock when it appended
// the batch, as client.OffsetForTime does), not the producers' record timestamps, which need not be
// in order. No such batch: offset -1 and timestamp -1, as Kafka answers.
func (h *Handler) searchTime(s *shard.Shard, st *shardState, r *request, stream uint64, ts int64, lo, hi, tail uint64,
	rp *kmsg.ListOffsetsResponseTopicPartition) {
	if lo >= hi {
		rp.Offset = int64(lo) // rp.Timestamp is the append time of the batch that moved hi here
		if lo >= tail {
			rp.Offset, rp.Timestamp = -1, -1
		}
		return
	}
	mid := lo + (hi-lo)/2
	rid := st.nextRequestID()
	b := wire.AppendFetch(st.takeBuf(), h.from, &wire.Fetch{RequestID: rid, Stream: stream, Offset: mid, BytesMax: 1,
		RecordsMax: 1})
	h.submit(s, st, r, rid, stream, b, func(s *shard.Shard, st *shardState, rep *reply) {
		if code, _ := rep.errorCode(); code != errNone {
			rp.ErrorCode, rp.Offset = code, -1
			h.metrics.errorCode(listOffsetsKey, code)
			return
		}
		fr, err := wire.DecodeFetchReply(&rep.h, rep.body)
		if err != nil || len(fr.Batches) < sbHeaderSize {
			rp.ErrorCode, rp.Offset = errUnknownServer, -1
			return
		}
		le := binary.LittleEndian
		base, count := le.Uint64(fr.Batches[sbBaseOffset:]), uint64(le.Uint32(fr.Batches[sbCount:]))
		appended := int64(le.Uint64(fr.Batches[sbMaxTs:]))
		nlo, nhi := lo, hi
		if appended >= ts { // every record of a batch has its batch's append time: move by whole batches
			nhi = max(base, lo)
			rp.Timestamp = appended
		} else {
			nlo = base + count
		}
		h.searchTime(s, st, r, stream, ts, nlo, nhi, tail, rp)
	})
	st.giveBuf(b)
}
