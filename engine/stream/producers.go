package stream

// producerWindow is how many of a producer's latest batches the table remembers: a retry of any of
// them is answered with its first offset.
const producerWindow = 5

// producerBatch is one remembered batch of a producer.
type producerBatch struct {
	seq   uint64
	base  uint64
	count uint32
}

// producerEntry is one producer's latest batches, a ring of producerWindow.
type producerEntry struct {
	batches [producerWindow]producerBatch
	n       int // batches filled
	next    int // ring position of the next batch
	lastSeq uint64
	lastEnd uint64
}

// producerTable is the owner's deduplication state, rebuilt from the batch headers of the log on
// open and kept by followers from what they append, so it survives a failover.
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
)

func (t *producerTable) init(max int) { t.max = max }

// check says what to do with producer id's batch seq. A producer the table does not know may start
// at any sequence.
func (t *producerTable) check(id, seq uint64) (seqVerdict, producerBatch) {
	e, ok := t.m[id]
	switch {
	case !ok || seq == e.lastSeq+1:
		return seqNew, producerBatch{}
	case seq > e.lastSeq:
		return seqGap, producerBatch{}
	}
	for i := 0; i < e.n; i++ {
		if e.batches[i].seq == seq {
			return seqDuplicate, e.batches[i]
		}
	}
	return seqOld, producerBatch{}
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
