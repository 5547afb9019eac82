// Package stagetrace records, on a node, when record batches pass each stage of the record path:
// the client handler's receive and reply, the owner's append, group commit, fdatasync, followers'
// answers and confirm, and a follower's receive, group commit, fdatasync and answer. `ringstream
// bench --trace-stages` reads every node's traces (GET /v1/stages on the admin listener) and lines
// them up with its client's marks into the latency budget of one record.
//
// Decisions where the design is silent:
//   - Instants, not durations: every mark is CLOCK_MONOTONIC nanoseconds (internal/monoclock), which
//     all processes of a machine share, so the bench can subtract a follower's mark from its owner's
//     and the owner's from the client's. Durations kept per node could not show the hops between
//     processes.
//   - Off unless switched on (POST /v1/stages/start; the bench does it only with --trace-stages): off,
//     each hook costs one atomic load. On, a traced batch costs a few clock reads per stage (one per
//     turn's step, fdatasync completion, answer and reply, never per record) and nothing allocated:
//     open traces live in a fixed table per shard (Shard), finished ones are copied into a fixed log
//     per shard allocated when tracing starts.
//   - Every batch is traced while there is room: a shard holds at most openMax traces begun and not
//     finished; a new one pushes the oldest out (counted as dropped), so traces of batches that never
//     finish (a failover) cannot block the table. Under a heavy load most batches are therefore left
//     out, and the bench joins only batches every process traced: the budget is meant for the one
//     record path, where every batch is traced.
//   - Marks are taken where the hosts already are: the owner's Appended when its copy's effects are
//     carried out (the turn's produces stepped, the append and the prepares queued), Submitted from
//     the segment's own clock read when the group's writes were queued, Durable at the fdatasync's
//     completion, an answer when the prepare-ok is stepped, Confirmed when the reply is made. The
//     shard's socket writes and reads are not marked: the hops between processes include them.
//     Submitted is 0 when the segment keeps no commit clock (segment.Config.CommitObserver unset; the
//     node always sets it).
package stagetrace

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringstream/ringstream/engine/adminapi"
	"github.com/ringstream/ringstream/internal/monoclock"
)

const (
	// openMax bounds a shard's traces begun and not finished.
	openMax = 64
	// logMax is how many finished traces a shard keeps (the newest), 168 bytes each: 11 MiB per shard once
	// tracing was started: the owner's request and batch entries of a default 20 s bench run with one
	// record at a time (about 1,500 batches a second).
	logMax = 65536
	// answersMax bounds the followers' answers an owner trace keeps (E up to 5: four followers).
	answersMax = 4
)

// kind of an entry.
type kind uint8

const (
	kindRequest kind = iota + 1
	kindOwner
	kindFollower
)

// entry is one trace, laid out without pointers so that tables of them are copied, not allocated.
type entry struct {
	kind                                                                 kind
	nAnswers                                                             uint8
	peer                                                                 uint16
	quorum                                                               int32
	stream, producer, seq, base, end                                     uint64
	received, appended, submitted, durable, answered, confirmed, replied int64
	answers                                                              [answersMax]answer
}

type answer struct {
	node uint16
	at   int64
}

// Tracer is a node's stage tracing: one Shard per shard, and the switch.
type Tracer struct {
	clock  monoclock.Clock
	on     atomic.Bool
	shards []*Shard
}

// New makes a node's tracer for its shards, switched off.
func New(shards int) *Tracer {
	t := &Tracer{clock: monoclock.New(), shards: make([]*Shard, shards)}
	for i := range t.shards {
		t.shards[i] = &Shard{t: t}
	}
	return t
}

// Shard is shard i's part (nil for a nil Tracer: every hook is then a no-op).
func (t *Tracer) Shard(i int) *Shard {
	if t == nil || i >= len(t.shards) {
		return nil
	}
	return t.shards[i]
}

// Start clears every shard's traces and switches tracing on. Traces open on a shard when Start runs
// may still finish into the new log: they are complete traces all the same.
func (t *Tracer) Start() {
	for _, s := range t.shards {
		s.mu.Lock()
		if s.log == nil {
			s.log = make([]entry, logMax)
		}
		s.n, s.dropped = 0, 0
		s.mu.Unlock()
	}
	t.on.Store(true)
}

// Stop switches tracing off; what was traced stays readable.
func (t *Tracer) Stop() { t.on.Store(false) }

// Snapshot is every shard's finished traces, oldest first within each shard.
func (t *Tracer) Snapshot(node uint16) adminapi.StageTrace {
	out := adminapi.StageTrace{Node: node, On: t.on.Load(), Entries: []adminapi.StageEntry{}}
	for _, s := range t.shards {
		s.mu.Lock()
		first := uint64(0)
		if s.n > logMax {
			first = s.n - logMax
		}
		for i := first; i < s.n; i++ {
			out.Entries = append(out.Entries, s.log[i%logMax].doc())
		}
		out.Dropped += s.dropped + first
		s.mu.Unlock()
		out.Dropped += s.evicted.Load()
	}
	return out
}

// doc is e as the admin API's document.
func (e *entry) doc() adminapi.StageEntry {
	d := adminapi.StageEntry{Stream: e.stream, Producer: e.producer, Sequence: e.seq, Base: e.base, End: e.end,
		Peer: e.peer, Quorum: int(e.quorum), Received: e.received, Appended: e.appended, Submitted: e.submitted,
		Durable: e.durable, Answered: e.answered, Confirmed: e.confirmed, Replied: e.replied}
	switch e.kind {
	case kindRequest:
		d.Kind = adminapi.StageRequest
	case kindOwner:
		d.Kind = adminapi.StageOwner
	case kindFollower:
		d.Kind = adminapi.StageFollower
	}
	for _, a := range e.answers[:e.nAnswers] {
		d.Answers = append(d.Answers, adminapi.StageAnswer{Node: a.node, At: a.at})
	}
	return d
}

// Shard is one shard's traces. Its hooks run on the shard's goroutine only; the log of finished
// traces is shared with Snapshot under mu.
type Shard struct {
	t     *Tracer
	open  [openMax]entry // begun, not finished; kind 0: free
	nOpen int
	// evicted counts open traces pushed out by newer ones (read by Snapshot).
	evicted atomic.Uint64

	mu      sync.Mutex
	log     []entry // logMax finished traces, a ring; nil until the first Start
	n       uint64  // traces finished since Start
	dropped uint64
}

// On says whether tracing is on; false for a nil Shard. Hooks are called only when it is.
func (s *Shard) On() bool { return s != nil && s.t.on.Load() }

// Now is CLOCK_MONOTONIC now, in nanoseconds.
func (s *Shard) Now() int64 { return s.t.clock.Now() }

// Nanos is t (taken in this process) as CLOCK_MONOTONIC nanoseconds.
func (s *Shard) Nanos(t time.Time) int64 { return s.t.clock.Nanos(t) }

// begin takes a free slot of the open table, pushing the oldest trace out when none is free.
func (s *Shard) begin(e entry) {
	if s.nOpen == openMax {
		oldest := 0
		for i := range s.open {
			if s.open[i].firstMark() < s.open[oldest].firstMark() {
				oldest = i
			}
		}
		s.open[oldest] = entry{}
		s.nOpen--
		s.evicted.Add(1)
	}
	for i := range s.open {
		if s.open[i].kind == 0 {
			s.open[i] = e
			s.nOpen++
			return
		}
	}
}

func (e *entry) firstMark() int64 {
	if e.kind == kindFollower {
		return e.received
	}
	return e.appended
}

// finish moves open trace i into the log.
func (s *Shard) finish(i int) {
	s.mu.Lock()
	if s.log != nil {
		s.log[s.n%logMax] = s.open[i]
		s.n++
	}
	s.mu.Unlock()
	s.open[i] = entry{}
	s.nOpen--
}

// Request records a produce the client handler answered: decoded at received, its reply handed to
// the connection at replied.
func (s *Shard) Request(stream, producer, seq uint64, received, replied int64) {
	s.mu.Lock()
	if s.log != nil {
		s.log[s.n%logMax] = entry{kind: kindRequest, stream: stream, producer: producer, seq: seq,
			received: received, replied: replied}
		s.n++
	}
	s.mu.Unlock()
}

// OwnerAppended begins the trace of an owner's batch [base, end) of producer's sequence seq, stepped
// and queued at now; quorum is the stream's W.
func (s *Shard) OwnerAppended(stream, producer, seq, base, end uint64, quorum int, now int64) {
	s.begin(entry{kind: kindOwner, stream: stream, producer: producer, seq: seq, base: base, end: end,
		quorum: int32(quorum), appended: now})
}

// Durable marks the traces of stream's copy here (owner and follower) that the group commit ending at
// end made durable: its writes were queued at submitted, its fdatasync completed at now.
func (s *Shard) Durable(stream, end uint64, submitted, now int64) {
	for i := range s.open {
		e := &s.open[i]
		if e.kind >= kindOwner && e.stream == stream && e.durable == 0 && e.end <= end {
			e.submitted, e.durable = submitted, now
		}
	}
}

// OwnerAnswer marks the owner's traces below tail, a follower's durable record tail in its answer
// from node, received at now.
func (s *Shard) OwnerAnswer(stream uint64, node uint16, tail uint64, now int64) {
	for i := range s.open {
		e := &s.open[i]
		if e.kind != kindOwner || e.stream != stream || e.end > tail || int(e.nAnswers) == answersMax {
			continue
		}
		seen := false
		for _, a := range e.answers[:e.nAnswers] {
			seen = seen || a.node == node
		}
		if !seen {
			e.answers[e.nAnswers] = answer{node: node, at: now}
			e.nAnswers++
		}
	}
}

// OwnerConfirmed finishes the owner's trace of the batch at base, whose reply was made at now.
func (s *Shard) OwnerConfirmed(stream, base uint64, now int64) {
	for i := range s.open {
		if e := &s.open[i]; e.kind == kindOwner && e.stream == stream && e.base == base {
			e.confirmed = now
			s.finish(i)
			return
		}
	}
}

// FollowerReceived begins the trace of a follower's prepare [base, end) from owner node peer,
// decoded at now.
func (s *Shard) FollowerReceived(stream uint64, peer uint16, base, end uint64, now int64) {
	s.begin(entry{kind: kindFollower, stream: stream, peer: peer, base: base, end: end, received: now})
}

// FollowerAnswered finishes the follower's traces made durable and covered by a prepare-ok up to
// tail, queued at now.
func (s *Shard) FollowerAnswered(stream, tail uint64, now int64) {
	for i := range s.open {
		if e := &s.open[i]; e.kind == kindFollower && e.stream == stream && e.durable != 0 && e.end <= tail {
			e.answered = now
			s.finish(i)
		}
	}
}
