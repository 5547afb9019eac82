package stream

// producerWindow is how many of a producer's latest batches the table remembers: a retry of any of
// them is answered with its first offset.
const producerWindow = 5

// Kafka producers' batches (engine/kafka) carry their producer epoch and base sequence in the batch's
// Sequence, marked by KafkaSequenceFlag, and follow Kafka's rule instead of this project's: a batch's
// base sequence is the last batch's base sequence plus its record count, modulo 2^31, within one
// producer epoch. Our own clients' sequences start at 0 and grow by one, so they never carry the flag.
const (
	// KafkaSequenceFlag marks a batch Sequence as Kafka's (KafkaSequence).
	KafkaSequenceFlag = 1 << 63
	// kafkaSeqModulus is where Kafka's base sequences wrap (Kafka's int32 sequence, past MaxInt32 to 0).
	kafkaSeqModulus = 1 << 31
)

// KafkaSequence is the batch Sequence of a Kafka producer's batch: the flag, the producer epoch, and
// the base sequence (0 .. 2^31-1).
func KafkaSequence(epoch uint16, baseSeq uint32) uint64 {
	return KafkaSequenceFlag | uint64(epoch)<<32 | uint64(baseSeq)
}

// kafkaParts splits a Kafka batch Sequence into its producer epoch and base sequence.
func kafkaParts(seq uint64) (epoch uint16, base uint32) {
	return uint16(seq >> 32), uint32(seq)
}

// producerBatch is one remembered batch of a producer.
type producerBatch struct {
	seq   uint64
	base  uint64
	count uint32
}

// producerEntry is one producer's latest batches, a ring of producerWindow.
type producerEntry struct {
	batches   [producerWindow]producerBatch
	n         int // batches filled
	next      int // ring position of the next batch
	lastSeq   uint64
	lastCount uint32
	lastEnd   uint64
}

// producerTable is the owner's deduplication state, rebuilt from the batch headers of the log on
// open and kept by followers from what they append, so it survives a failover. It keys producers by
// id and keeps each one's last producerWindow batches, whichever rule the producer follows (ours, or
// Kafka's for a Sequence with KafkaSequenceFlag).
type producerTable struct {
	m   map[uint64]*producerEntry
	max int
}

type seqVerdict uint8

const (
	seqNew       seqVerdict = iota // append it
	seqDuplicate                   // appended before: answer with its first offset
	seqGap                         // the sequence skips ahead of the last appended batch
	seqOld                         // older than the remembered window
	seqFenced                      // a Kafka producer epoch older than the producer's last batch's
)

func (t *producerTable) init(max int) { t.max = max }

// check says what to do with producer id's batch seq of count records. A producer the table does
// not know may start at any sequence (Kafka's rule too since KIP-360), and so may a producer whose
// last batch followed the other rule.
func (t *producerTable) check(id, seq uint64, count uint32) (seqVerdict, producerBatch) {
	e, ok := t.m[id]
	if ok && (seq&KafkaSequenceFlag) != (e.lastSeq&KafkaSequenceFlag) {
		ok = false
	}
	if seq&KafkaSequenceFlag != 0 {
		return t.checkKafka(e, ok, seq, count)
	}
	switch {
	case !ok || seq == e.lastSeq+1:
		return seqNew, producerBatch{}
	case seq > e.lastSeq:
		return seqGap, producerBatch{}
	}
	if b, dup := e.find(seq, 0); dup {
		return seqDuplicate, b
	}
	return seqOld, producerBatch{}
}

// checkKafka is check under Kafka's rule: an older epoch is fenced, a newer one starts at base
// sequence 0, and within the epoch a retry of a remembered batch (same base sequence and record
// count) is a duplicate, the next base sequence (the last one plus its count, wrapping at 2^31) is
// new, and anything else is out of order.
func (t *producerTable) checkKafka(e *producerEntry, known bool, seq uint64, count uint32) (seqVerdict, producerBatch) {
	if !known {
		return seqNew, producerBatch{}
	}
	epoch, base := kafkaParts(seq)
	lastEpoch, lastBase := kafkaParts(e.lastSeq)
	switch {
	case epoch < lastEpoch:
		return seqFenced, producerBatch{}
	case epoch > lastEpoch && base == 0:
		return seqNew, producerBatch{}
	case epoch > lastEpoch:
		return seqGap, producerBatch{}
	}
	if b, dup := e.find(seq, count); dup {
		return seqDuplicate, b
	}
	if uint64(base) == (uint64(lastBase)+uint64(e.lastCount))%kafkaSeqModulus {
		return seqNew, producerBatch{}
	}
	return seqGap, producerBatch{}
}

// find returns the remembered batch of sequence seq (and of count records, unless count is 0).
func (e *producerEntry) find(seq uint64, count uint32) (producerBatch, bool) {
	for i := 0; i < e.n; i++ {
		if b := e.batches[i]; b.seq == seq && (count == 0 || b.count == count) {
			return b, true
		}
	}
	return producerBatch{}, false
}

// observe records a batch appended to the log (by the owner, a follower, or the open scan).
func (t *producerTable) observe(h *BatchHeader) {
	if h.ProducerID == 0 {
		return
	}
	e, ok := t.m[h.ProducerID]
	if !ok {
		if t.m == nil {
			t.m = make(map[uint64]*producerEntry)
		}
		if len(t.m) >= t.max {
			t.evict()
		}
		e = &producerEntry{}
		t.m[h.ProducerID] = e
	}
	e.batches[e.next] = producerBatch{seq: h.Sequence, base: h.BaseOffset, count: h.Count}
	e.next = (e.next + 1) % producerWindow
	e.n = min(e.n+1, producerWindow)
	e.lastSeq = h.Sequence
	e.lastCount = h.Count
	e.lastEnd = h.End()
}

// evict drops the producer whose last batch is oldest (lowest id on a tie). The scan's result does
// not depend on the map's order.
func (t *producerTable) evict() {
	var victim uint64
	var oldest uint64
	found := false
	for id, e := range t.m {
		if !found || e.lastEnd < oldest || (e.lastEnd == oldest && id < victim) {
			victim, oldest, found = id, e.lastEnd, true
		}
	}
	delete(t.m, victim)
}
