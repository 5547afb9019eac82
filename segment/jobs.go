package segment

import (
	"fmt"
	"iter"

	"github.com/ringstream/ringstream/internal/assert"
	"github.com/ringstream/ringstream/ring"
)

// Op names a copy's rare operation in a Result.
type Op uint8

const (
	// OpOpen: Open, with recovery.
	OpOpen Op = iota + 1
	// OpCut: Cut of both logs.
	OpCut
	// OpAppendEpoch: AppendEpoch.
	OpAppendEpoch
	// OpRetain: Retain.
	OpRetain
	// OpCursorSnapshot: WriteCursorSnapshot.
	OpCursorSnapshot
	// OpClose: Close.
	OpClose
	// OpDelete: Delete.
	OpDelete
)

func (o Op) String() string {
	switch o {
	case OpOpen:
		return "open"
	case OpCut:
		return "cut"
	case OpAppendEpoch:
		return "append-epoch"
	case OpRetain:
		return "retain"
	case OpCursorSnapshot:
		return "cursor-snapshot"
	case OpClose:
		return "close"
	case OpDelete:
		return "delete"
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// Result is the outcome of a rare operation, handed to Events.Done.
type Result struct {
	Op     Op
	Tag    uint64 // the caller's tag, as given when the operation was started
	Err    error
	Open   OpenReport   // OpOpen only
	Retain RetainReport // OpRetain only
}

// Jobs runs the rare operations (open, cut, log epochs, retention, cursor snapshots, close,
// delete) of every copy on one shard, interleaved on the shard's ring, without ever blocking the
// loop. One Jobs belongs to one shard; it is used only on that shard's locked OS thread.
//
// Each operation runs its sequential code as a coroutine (iter.Pull): where the code needs a ring
// operation it queues it, with the job as Handler, and suspends. The completion, inside
// ring.Dispatch, only records the result and marks the job ready; Poll resumes ready jobs. So
// the code runs only inside Poll, never inside Dispatch, and never drives the ring itself.
type Jobs struct {
	ready    []*job  // resume in this Poll: an operation completed, or the job is new
	deferred []*job  // resume in the next Poll: the ring was full, or a log was not quiet yet
	swap     []*job  // the deferred list being resumed
	copies   []*Copy // copies opened on this Jobs (Abandon)
	awake    []*Copy // copies with work a Flush starts or resumes: flushed every Poll
	flushing []*Copy // the awake list being flushed
	waiting  []*job  // started past JobsRunningMax: they run, in order, as running ones end
	polling  bool
	live     int
	running  int // jobs that have been given their turn and not ended
}

// JobsRunningMax is how many rare operations one shard runs at once; the others wait in the order
// they were started. Each running operation holds a few descriptors (an open holds its log
// directories, segments being recovered, its epochs and fence files), so a node opening 10,000
// copies at boot holds about 640 per shard at the peak (TestJobs_RunningOperationsAreCapped), not
// tens of thousands, while the disk still sees hundreds of operations at once. A copy that waits is
// busy (ErrBusy) as if it ran.
const JobsRunningMax = 128

// NewJobs returns an empty runner for one shard.
func NewJobs() *Jobs { return &Jobs{} }

// Live is the number of operations started and not yet reported.
func (js *Jobs) Live() int { return js.live }

// Poll is the shard loop's per-turn hook. The shard calls it once per loop turn, on the ring's
// thread, after Dispatch has run the turn's completions and outside Dispatch. It resumes every
// job whose ring operation completed (and new jobs), each until it queues its next operation or
// ends; reports each job that ended through its copy's Events.Done; then flushes the logs of every
// copy that has work a Flush starts or resumes (Copy.Flush), so the host needs no other per-turn
// call. A copy joins that list when it is given work (an append, a sync, a read, a seal, the end
// of a rare operation) and leaves it once a Flush finds both logs quiet and no seal running: idle
// copies cost a turn nothing. Poll queues operations but never submits, waits or dispatches.
func (js *Jobs) Poll() {
	assert.True(!js.polling, "segment: Jobs.Poll re-entered")
	js.polling = true
	js.swap, js.deferred = js.deferred, js.swap[:0]
	js.ready = append(js.ready, js.swap...)
	clear(js.swap)
	js.swap = js.swap[:0]
	for i := 0; i < len(js.ready); i++ {
		j := js.ready[i]
		js.ready[i] = nil
		j.resume()
	}
	js.ready = js.ready[:0]
	js.flushing, js.awake = js.awake, js.flushing[:0]
	for i, c := range js.flushing {
		js.flushing[i] = nil
		c.awake = false
		c.Flush()
		if c.needsFlush() {
			js.wake(c)
		}
	}
	js.flushing = js.flushing[:0]
	js.polling = false
}

// wake puts c on the list of copies the next Poll flushes (see Poll).
func (js *Jobs) wake(c *Copy) {
	if !c.awake {
		c.awake = true
		js.awake = append(js.awake, c)
	}
}

func (js *Jobs) addCopy(c *Copy) { js.copies = append(js.copies, c) }

func (js *Jobs) removeCopy(c *Copy) {
	for i, o := range js.copies {
		if o == c {
			last := len(js.copies) - 1
			js.copies[i] = js.copies[last]
			js.copies[last] = nil
			js.copies = js.copies[:last]
			return
		}
	}
}

// Abandon ends every job that has not finished, as a Stop does when the ring goes away: each
// suspended job is resumed with its pending operation failed (ErrClosed) and runs to its end
// without queueing anything more; its Done reports the error. Completions that arrive later for
// operations it had queued are ignored. Files such a job held open may stay open.
func (js *Jobs) Abandon() {
	for _, j := range js.waiting {
		js.running++
		js.ready = append(js.ready, j)
	}
	clear(js.waiting)
	js.waiting = js.waiting[:0]
	for _, c := range js.copies {
		j := c.job
		if j == nil || j.finished {
			continue
		}
		j.abandoned = true
		if j.inFlight {
			j.inFlight = false
			js.ready = append(js.ready, j)
		}
	}
	js.Poll()
}

// job is one rare operation of one copy, run as a coroutine.
type job struct {
	js   *Jobs
	c    *Copy
	res  Result
	body func(j *job) error

	next  func() (struct{}, bool)
	stop  func()
	yield func(struct{}) bool

	inFlight  bool // a ring operation of the job awaits its completion
	finished  bool
	abandoned bool
	compRes   int32
	compOp    ring.Opcode
}

// start registers a new job; it first runs at the next Poll.
func (js *Jobs) start(c *Copy, op Op, tag uint64, body func(j *job) error) *job {
	j := &job{js: js, c: c, res: Result{Op: op, Tag: tag}, body: body}
	js.live++
	if js.running >= JobsRunningMax {
		js.waiting = append(js.waiting, j)
		return j
	}
	js.running++
	js.ready = append(js.ready, j)
	return j
}

// ended gives a waiting job the turn of one that ended.
func (js *Jobs) ended() {
	js.running--
	if len(js.waiting) > 0 && js.running < JobsRunningMax {
		j := js.waiting[0]
		js.waiting[0] = nil
		js.waiting = js.waiting[1:]
		js.running++
		js.ready = append(js.ready, j)
	}
}

// Complete records a completion of the job's operation and marks the job ready. It implements
// ring.Handler; it never resumes the job (that happens in Poll).
func (j *job) Complete(c ring.Completion) {
	if j.finished {
		return // an abandoned job's late completion
	}
	assert.True(j.inFlight, "segment: job completion without operation")
	j.inFlight = false
	j.compRes, j.compOp = c.Res, c.Op
	j.js.ready = append(j.js.ready, j)
}

// resume runs the job until it suspends or ends. The coroutine is created on the first resume,
// inside Poll, so it is made and always switched to on the ring's thread.
func (j *job) resume() {
	if j.finished {
		return
	}
	if j.next == nil {
		j.next, j.stop = iter.Pull(j.run)
	}
	if _, more := j.next(); more {
		return
	}
	j.stop()
	j.finished = true
	j.js.live--
	j.js.ended()
	j.c.jobEnded(j)
}

// run is the coroutine's body.
func (j *job) run(yield func(struct{}) bool) {
	j.yield = yield
	j.res.Err = j.body(j)
}

// suspend yields to Poll until the job is resumed. It returns false once the job is abandoned.
func (j *job) suspend() bool {
	if j.abandoned {
		return false
	}
	j.yield(struct{}{})
	return !j.abandoned
}

// await suspends until the operation just queued completes.
func (j *job) await() (int32, ring.Opcode, error) {
	j.inFlight = true
	if !j.suspend() {
		return 0, 0, fmt.Errorf("segment: %s abandoned: %w", j.res.Op, ErrClosed)
	}
	assert.True(!j.inFlight, "segment: job resumed before its completion")
	return j.compRes, j.compOp, nil
}

// nextTurn suspends until the next Poll (ring full, or waiting for a quiet log).
func (j *job) nextTurn() error {
	j.js.deferred = append(j.js.deferred, j)
	if !j.suspend() {
		return fmt.Errorf("segment: %s abandoned: %w", j.res.Op, ErrClosed)
	}
	return nil
}
