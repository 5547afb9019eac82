package kafka

import (
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringstream/ringstream/shard"
)

// initProducerIDKey is InitProducerId's api key.
const initProducerIDKey int16 = 22

// Producer ids are allocated by the node that is asked, without a round trip to any other node:
// the node id in the top 16 bits of the 63 a Kafka producer id has, and below it a 47-bit
// allocation clock, in milliseconds since producerIDClockStart. Each id takes the next value of the
// node's clock (the last one plus 1, or the wall clock if that is later), and the clock never runs
// more than producerIDLead ahead of the wall clock: a node asked for more ids than that answers
// COORDINATOR_LOAD_IN_PROGRESS, which clients retry. A node starts its clock producerIDLead ahead
// of the wall clock, above anything its previous run could have allocated (at most producerIDLead
// ahead of the wall clock when it stopped). So ids are unique in the cluster as long as no node's
// wall clock steps back across its restarts; nodes allocate at most 1000 ids a second each,
// sustained.
const (
	producerIDNodeShift = 47
	producerIDLead      = 1000 // milliseconds
)

// producerIDClockStart is the origin of the allocation clock, 2026-01-01T00:00:00Z in Unix
// milliseconds: 2^47 ms after it is the year 6485.
const producerIDClockStart = 1767225600000

// producerIDs is a node's producer id allocator, shared by its shards.
type producerIDs struct {
	node uint16
	now  func() int64 // wall clock, in ms since producerIDClockStart
	last atomic.Int64 // the last allocation clock value handed out
}

func newProducerIDs(node uint16, now func() int64) *producerIDs {
	if now == nil {
		now = func() int64 { return time.Now().UnixMilli() - producerIDClockStart }
	}
	p := &producerIDs{node: node, now: now}
	p.last.Store(now() + producerIDLead - 1)
	return p
}

// next allocates a producer id; ok is false when the allocation clock is producerIDLead ahead of
// the wall clock already.
func (p *producerIDs) next() (id int64, ok bool) {
	for {
		last, now := p.last.Load(), p.now()
		v := max(last+1, now)
		if v > now+producerIDLead || v >= 1<<producerIDNodeShift {
			return 0, false
		}
		if p.last.CompareAndSwap(last, v) {
			return int64(p.node)<<producerIDNodeShift | v, true
		}
	}
}

// validateInitProducerID checks an InitProducerId request: no transactional id (transactions are
// not served), and a previous producer id and epoch either both given or both -1 (Kafka's rule).
// The validation of an InitProducerId request; it returns the Kafka error code and its message.
func validateInitProducerID(req *kmsg.InitProducerIDRequest) (int16, string) {
	switch {
	case req.TransactionalID != nil:
		return errTransactionalIDAuthz, "transactions are not supported: only idempotent producers (no transactional id)"
	case (req.ProducerID == -1) != (req.ProducerEpoch == -1):
		return errInvalidRequest, "producer id and epoch must both be -1 or both be set"
	case req.ProducerID < -1 || req.ProducerEpoch < -1:
		return errInvalidRequest, "producer id and epoch must be -1 or at least 0"
	}
	return errNone, ""
}

// serveInitProducerID answers an idempotent producer's InitProducerId: a new producer id of this
// node's, at epoch 0. As Kafka does for a producer without a transactional id, a previous id and
// epoch (v3+) are not bumped: the producer gets a new id.
func serveInitProducerID(h *Handler, _ *shard.Shard, _ *shardState, r *request, kreq kmsg.Request) {
	req := kreq.(*kmsg.InitProducerIDRequest)
	resp := kmsg.NewPtrInitProducerIDResponse()
	resp.SetVersion(req.Version)
	resp.ProducerID, resp.ProducerEpoch = -1, -1
	r.resp = resp
	code, msg := validateInitProducerID(req)
	if code == errNone {
		id, ok := h.producerIDs.next()
		if ok {
			resp.ProducerID, resp.ProducerEpoch = id, 0
			return
		}
		code, msg = errCoordinatorLoading, "producer ids are allocated at most 1000 a second: retry"
	}
	resp.ErrorCode = code
	h.metrics.errorCode(initProducerIDKey, code)
	h.log.Debug("kafka: InitProducerId refused", "code", code, "reason", msg)
}
