package kafka

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringstream/ringstream/shard"
	"github.com/ringstream/ringstream/wire"
)

// fetchBytesMax bounds what one partition's fetch asks a stream for (a stored batch is at most
// 4 MiB; a fetch answers at least one batch whatever its bound).
const fetchBytesMax = 4 << 20

// fetchState is a Fetch request under way: its partitions and how many record bytes they hold.
type fetchState struct {
	req   *kmsg.FetchRequest
	parts []fetchPart
	bytes int
}

type fetchPart struct {
	rp     *kmsg.FetchResponseTopicPartition
	name   string
	stream uint64
	offset int64
	max    uint32
	again  bool // answered without records or error: asked again with the long poll
}

// serveFetch answers a Fetch in two rounds. The first asks every partition's stream at once
// without waiting, which gives each partition its records and high watermark (the confirmed
// tail). When they hold fewer than min_bytes and max_wait_ms allows a wait, the second round asks
// the partitions that had nothing again with wait_ms = max_wait_ms (the streams' long poll), and
// the response goes as soon as one of them answers with records, or when all did; a partition
// whose second answer has not come is answered with its first one.
func serveFetch(h *Handler, s *shard.Shard, st *shardState, r *request, kreq kmsg.Request) {
	req := kreq.(*kmsg.FetchRequest)
	resp := kmsg.NewPtrFetchResponse()
	resp.SetVersion(req.Version)
	r.resp = resp
	fs := &fetchState{req: req}
	r.fetch = fs
	resp.Topics = make([]kmsg.FetchResponseTopic, len(req.Topics))
	n := 0
	for ti := range req.Topics {
		t := &req.Topics[ti]
		rt := &resp.Topics[ti]
		*rt = kmsg.NewFetchResponseTopic()
		rt.Topic = t.Topic
		rt.Partitions = make([]kmsg.FetchResponseTopicPartition, len(t.Partitions))
		n += len(t.Partitions)
	}
	fs.parts = make([]fetchPart, 0, n)
	// The request's max_bytes bounds the response (trimFetch) and, shared out, what each partition
	// asks its stream for, so that a fetch of many partitions does not gather many times it.
	share := int32(fetchBytesMax)
	if req.MaxBytes > 0 {
		share = max(req.MaxBytes/int32(max(n, 1)), 1)
	}
	for ti := range req.Topics {
		t := &req.Topics[ti]
		for pi := range t.Partitions {
			p := &t.Partitions[pi]
			rp := &resp.Topics[ti].Partitions[pi]
			*rp = kmsg.NewFetchResponseTopicPartition()
			rp.Partition, rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = p.Partition, -1, -1, -1
			rp.RecordBatches = []byte{} // an empty set, not null: readers refuse a size of -1
			if validateTopic(t.Topic) != nil || p.Partition < 0 || p.Partition >= PartitionsMax {
				rp.ErrorCode = errUnknownTopicOrPart
				continue
			}
			if p.FetchOffset < 0 {
				rp.ErrorCode = errOffsetOutOfRange
				continue
			}
			fs.parts = append(fs.parts, fetchPart{rp: rp, name: StreamName(t.Topic, p.Partition), offset: p.FetchOffset,
				max: uint32(min(max(p.PartitionMaxBytes, 1), share, fetchBytesMax))})
		}
	}
	for i := range fs.parts {
		fp := &fs.parts[i]
		h.resolve(s, st, r, []byte(fp.name), func(s *shard.Shard, st *shardState, id uint64, code int16, _ string) {
			if code != errNone {
				fp.rp.ErrorCode = code
				return
			}
			fp.stream = id
			h.fetchPartition(s, st, r, fp, 0)
		})
	}
	if req.MinBytes > 0 && req.MaxWaitMillis > 0 {
		r.onDone = fetchAgain
	}
}

// fetchAgain is the second round of serveFetch.
func fetchAgain(s *shard.Shard, st *shardState, r *request) {
	fs := r.fetch
	if fs.bytes >= int(fs.req.MinBytes) {
		return
	}
	h := st.handler
	for i := range fs.parts {
		if fp := &fs.parts[i]; fp.again {
			h.fetchPartition(s, st, r, fp, uint32(fs.req.MaxWaitMillis))
		}
	}
}

// fetchPartition asks one partition's stream for records from its offset.
func (h *Handler) fetchPartition(s *shard.Shard, st *shardState, r *request, fp *fetchPart, waitMs uint32) {
	rid := st.nextRequestID()
	fp.again = false
	b := wire.AppendFetch(st.takeBuf(), h.from, &wire.Fetch{RequestID: rid, Stream: fp.stream, Offset: uint64(fp.offset),
		BytesMax: fp.max, WaitMs: waitMs})
	h.submit(s, st, r, rid, fp.stream, b, func(s *shard.Shard, st *shardState, rep *reply) {
		h.fetched(r, fp, rep, waitMs > 0)
	})
	st.giveBuf(b)
}

// fetched fills a partition's response from its stream's answer.
func (h *Handler) fetched(r *request, fp *fetchPart, rep *reply, second bool) {
	fs, rp := r.fetch, fp.rp
	if code, msg := rep.errorCode(); code != errNone {
		if code == errInvalidRequest {
			code = errOffsetOutOfRange // the one fetch a stream refuses as invalid: below its retained head
		}
		if second && code == errLeaderNotAvailable {
			return // the first answer stands
		}
		rp.ErrorCode = code
		h.metrics.errorCode(fetchKey, code)
		h.log.Debug("kafka: fetch refused", "stream", fp.name, "offset", fp.offset, "code", code, "err", msg)
		return
	}
	fr, err := wire.DecodeFetchReply(&rep.h, rep.body)
	if err != nil {
		rp.ErrorCode = errUnknownServer
		return
	}
	rp.ErrorCode = errNone
	rp.HighWatermark, rp.LastStableOffset = int64(fr.ConfirmedTail), int64(fr.ConfirmedTail)
	if fr.Count == 0 {
		if uint64(fp.offset) > fr.ConfirmedTail {
			rp.ErrorCode = errOffsetOutOfRange
			h.metrics.errorCode(fetchKey, errOffsetOutOfRange)
			return
		}
		fp.again = !second
		return
	}
	before := len(rp.RecordBatches)
	rp.RecordBatches, err = appendKafkaBatches(rp.RecordBatches[:0:0], fr.Batches)
	if err != nil {
		h.log.Warn("kafka: fetched batch not sent", "stream", fp.name, "offset", fp.offset, "err", err)
		if len(rp.RecordBatches) == 0 {
			rp.ErrorCode = errCorruptMessage
			h.metrics.errorCode(fetchKey, errCorruptMessage)
		}
	}
	fs.bytes += len(rp.RecordBatches) - before
	if second && len(rp.RecordBatches) > 0 && !r.done {
		r.done, r.onDone = true, nil // enough: the partitions still waiting answer with their first round
	}
}

// trimFetch keeps a Fetch response within the request's max_bytes: the records of the partitions
// in request order until the next would pass it (the first partition with records is always kept,
// as Kafka keeps it, so that a batch above max_bytes still makes progress). A partition whose
// records are dropped keeps its high watermark and is asked again by the client's next fetch.
func trimFetch(fs *fetchState) {
	if fs.req.MaxBytes <= 0 {
		return
	}
	total, kept := 0, false
	for i := range fs.parts {
		rp := fs.parts[i].rp
		n := len(rp.RecordBatches)
		if n == 0 {
			continue
		}
		if kept && total+n > int(fs.req.MaxBytes) {
			rp.RecordBatches = []byte{}
			continue
		}
		total += n
		kept = true
	}
}
