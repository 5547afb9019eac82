package stream

import "github.com/ringstream/ringstream/internal/assert"

// BatchHeader is what the copy reads from one batch: where it sits in its log, the epoch of the owner
// that first appended it, and the producer that sent it. The owner fills one for each produce and the
// host encodes it; a follower gets it from Config.Decode.
type BatchHeader struct {
	BaseOffset uint64
	Count      uint32 // records (or cursor events); at least 1
	PayloadLen uint32
	Epoch      uint32 // the epoch of the owner that appended the batch first
	ProducerID uint64 // 0: the producer opted out of deduplication
	Sequence   uint64
	Codec      uint8 // the producer's compression, stored and never read here
	Format     uint8 // the records' format (wire.FormatValues or FormatRecords), stored as the batch version
}

// End is the offset just past the batch's last record.
func (h *BatchHeader) End() uint64 { return h.BaseOffset + uint64(h.Count) }

// epochRun says that the records from start on were appended first in epoch (until the next run).
type epochRun struct {
	start uint64
	epoch uint32
}

// epochRuns is the epoch of every record of the record log, as runs: one entry each time the batch
// epoch changes. Log matching compares these epochs (the epoch a record was first appended in, the
// same on every copy that holds it), not the copy's log epochs (the role changes it went through).
type epochRuns struct {
	runs []epochRun
}

// observe records a batch appended at base in epoch; batches arrive in offset order.
func (r *epochRuns) observe(base uint64, epoch uint32) {
	n := len(r.runs)
	if n > 0 && r.runs[n-1].epoch == epoch {
		return
	}
	assert.True(n == 0 || r.runs[n-1].start <= base, "stream: epoch run out of offset order")
	assert.True(n == 0 || r.runs[n-1].epoch < epoch, "stream: batch epochs went back")
	r.runs = append(r.runs, epochRun{start: base, epoch: epoch})
}

// epochAt is the epoch of the record at off; false below the first run (below what the host fed).
func (r *epochRuns) epochAt(off uint64) (uint32, bool) {
	for i := len(r.runs) - 1; i >= 0; i-- {
		if r.runs[i].start <= off {
			return r.runs[i].epoch, true
		}
	}
	return 0, false
}

// runStart is the first offset of the run holding the record at off (0 if none is known).
func (r *epochRuns) runStart(off uint64) uint64 {
	for i := len(r.runs) - 1; i >= 0; i-- {
		if r.runs[i].start <= off {
			return r.runs[i].start
		}
	}
	return 0
}

// fifo is a queue on a slice that keeps its capacity: it allocates only while it grows to its
// high-water mark, never in steady state.
type fifo[T any] struct {
	items []T
	head  int
}

func (q *fifo[T]) len() int { return len(q.items) - q.head }

func (q *fifo[T]) push(v T) {
	if q.head > 0 && len(q.items) == cap(q.items) {
		n := copy(q.items, q.items[q.head:])
		clear(q.items[n:])
		q.items = q.items[:n]
		q.head = 0
	}
	q.items = append(q.items, v)
}

func (q *fifo[T]) front() *T {
	assert.True(q.len() > 0, "stream: front of an empty queue")
	return &q.items[q.head]
}

func (q *fifo[T]) pop() {
	assert.True(q.len() > 0, "stream: pop of an empty queue")
	var zero T
	q.items[q.head] = zero
	q.head++
	if q.head == len(q.items) {
		q.items, q.head = q.items[:0], 0
	}
}

func (q *fifo[T]) reset() {
	clear(q.items)
	q.items, q.head = q.items[:0], 0
}
