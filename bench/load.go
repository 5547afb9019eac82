package bench

import (
	"context"
	"crypto/rand"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ringstream/ringstream/client"
)

// pending is a record appended and not confirmed yet: its id and when it was appended (or due, with
// --rate).
type pending struct {
	id   recordID
	sent time.Time
}

// producer is one bench producer: it appends records to one stream through a client Producer,
// records every confirmation in its recorder and its stream's ledger, and opens a new client
// Producer (a new producer id) when one fails.
type producer struct {
	index  uint32
	stream string
	cl     *client.Client
	cfg    *Config
	rec    *recorder
	pad    []byte
	watch  *watches
	errors *atomic.Int64
	traces *clientTraces // nil: no stage tracing

	mu        sync.Mutex
	queue     []pending // appended, not confirmed, in append order
	confirmed []confirmation
	lastEpoch uint32
	seq       uint64
}

// newPad is the bytes after each record's id: random, so that compression has a fair case.
func newPad(n int) []byte {
	pad := make([]byte, max(n, 0))
	rand.Read(pad)
	return pad
}

// producerConfig is the client Producer of one bench producer. A batch of --batch records is full at
// exactly that many records (BatchRecords), whatever the records' framing; BatchBytes holds them as
// the client encodes them (client.BatchBytesFor, FormatRecords), up to the nodes' 1 MiB. The client
// sends a batch at once while none is in flight, so the linger never delays a producer with one batch
// in flight.
func (p *producer) producerConfig(codec client.Codec) client.ProducerConfig {
	batchBytes := min(client.BatchBytesFor(p.cfg.Batch, p.cfg.RecordSize), 1<<20)
	pc := client.ProducerConfig{Stream: p.stream, BatchBytes: max(batchBytes, 16), BatchRecords: p.cfg.Batch,
		Linger: time.Millisecond, Codec: codec, OnConfirm: p.onConfirm}
	if p.traces != nil {
		pc.OnTrace = p.traces.add
	}
	return pc
}

// onConfirm takes the batch's records off the queue, in order, and records them.
func (p *producer) onConfirm(c client.Confirmed) {
	now := time.Now()
	p.mu.Lock()
	n := min(int(c.Count), len(p.queue))
	first := p.queue[:n]
	for i, pr := range first {
		p.confirmed = append(p.confirmed, confirmation{id: pr.id, offset: c.BaseOffset + uint64(i)})
	}
	var oldest time.Time
	if n > 0 {
		oldest = first[0].sent
		p.rec.confirm(first[0].sent, now, n, n*p.cfg.RecordSize)
	}
	p.queue = p.queue[n:]
	p.lastEpoch = c.Epoch
	p.mu.Unlock()
	p.watch.confirmed(now, oldest, c.Epoch)
}

// run appends records until ctx ends, then closes its client Producer, waiting up to drain for the
// confirmations of what it holds.
func (p *producer) run(ctx context.Context, codec client.Codec, pacer *pacer, drain time.Duration) {
	buf := make([]byte, p.cfg.RecordSize)
	for ctx.Err() == nil {
		prod, err := p.cl.Producer(p.producerConfig(codec))
		if err != nil {
			p.errors.Add(1)
			return
		}
		err = p.appendUntilError(ctx, prod, buf, pacer)
		if ctx.Err() != nil {
			err = nil // the end of load, not a failure
		}
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), drain)
		if cerr := prod.Close(closeCtx); cerr != nil && err == nil {
			err = cerr
		}
		cancel()
		if err != nil {
			p.errors.Add(1)
		}
		// What the failed producer held was never confirmed: forget it, and go on with a new producer id.
		p.mu.Lock()
		p.queue = p.queue[:0]
		p.mu.Unlock()
	}
}

// appender is what appendUntilError needs of a client Producer.
type appender interface {
	Append(ctx context.Context, rec []byte) error
	Flush(ctx context.Context) error
}

// appendUntilError appends records to prod until ctx ends or prod fails. In a closed loop (no --rate)
// each bench producer has at most one batch unconfirmed, as --in-flight says: after each --batch
// records it waits for their confirm (Flush) before it appends the next. Appending on at once would
// queue a whole batch behind the one in flight, and a record's latency would then be its wait for
// the previous batch's confirm plus its own round trip: --batch 1 --in-flight 1 measured two records
// at a time, not one. With --rate the pacer alone decides when a record is appended (open loop).
func (p *producer) appendUntilError(ctx context.Context, prod appender, buf []byte, pacer *pacer) error {
	for n := 1; ; n++ {
		due, ok := pacer.next(ctx)
		if !ok {
			return ctx.Err()
		}
		p.mu.Lock()
		id := recordID{producer: p.index, seq: p.seq}
		p.seq++
		p.queue = append(p.queue, pending{id: id, sent: due})
		p.mu.Unlock()
		putRecord(buf, id, p.pad)
		if err := prod.Append(ctx, buf); err != nil {
			p.mu.Lock()
			p.queue = p.queue[:len(p.queue)-1] // not taken by the producer
			p.mu.Unlock()
			return err
		}
		if pacer.interval == 0 && n%p.cfg.Batch == 0 {
			if err := prod.Flush(ctx); err != nil {
				return err
			}
		}
	}
}

// pacer gives each append its due time: now in a closed loop; with --rate, one every 1/rate seconds
// from the start whatever happened before (open loop), so that a stall shows in the latency of the
// records due during it instead of being hidden by coordinated omission.
//
// The wait for a due time must not be late, or the open loop's latency measures the bench: Go's
// timers fire up to about a millisecond late when the process is idle (the runtime's netpoll waits in
// whole milliseconds: a timer due in 4.3 ms waits 4 ms, then 1 ms more), which added about 0.7 ms to
// the p50 of `--rate 200` with one record at a time. So the pacer waits on a timer only until
// pacerCoarse before the due time, and sleeps the rest with nanosleep(2), whose wake is the kernel's
// high-resolution timer's (a blocking system call: it holds an OS thread, not a P, for under
// pacerCoarse).
type pacer struct {
	start    time.Time
	interval time.Duration // 0: closed loop
	n        int64
	timer    *time.Timer
	// The clock and the two waits (tests swap them): now; onTimer waits on a Go timer (false once ctx
	// ended); sleep waits the last stretch before a due time (preciseSleep).
	now     func() time.Time
	onTimer func(ctx context.Context, d time.Duration) bool
	sleep   func(time.Duration)
}

// pacerCoarse is how long before a due time the pacer stops waiting on a Go timer: more than the
// timer's lateness when the process is idle (a millisecond).
const pacerCoarse = 2 * time.Millisecond

func newPacer(start time.Time, ratePerProducer float64) *pacer {
	p := &pacer{start: start, now: time.Now, sleep: preciseSleep}
	p.onTimer = p.waitTimer
	if ratePerProducer > 0 {
		p.interval = time.Duration(float64(time.Second) / ratePerProducer)
		p.timer = time.NewTimer(time.Hour)
		p.timer.Stop()
	}
	return p
}

// next waits for the next append's due time and returns it; false once ctx ended.
func (p *pacer) next(ctx context.Context) (time.Time, bool) {
	if ctx.Err() != nil {
		return time.Time{}, false
	}
	if p.interval == 0 {
		return p.now(), true
	}
	due := p.start.Add(time.Duration(p.n) * p.interval)
	p.n++
	if wait := due.Sub(p.now()) - pacerCoarse; wait > 0 && !p.onTimer(ctx, wait) {
		return time.Time{}, false
	}
	if wait := due.Sub(p.now()); wait > 0 {
		p.sleep(wait)
	}
	return due, true
}

// waitTimer waits d on the pacer's timer; false once ctx ended.
func (p *pacer) waitTimer(ctx context.Context, d time.Duration) bool {
	p.timer.Reset(d)
	select {
	case <-p.timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// preciseSleep sleeps d with nanosleep(2), resumed with what is left when a signal interrupts it
// (the Go runtime's preemption signals do).
func preciseSleep(d time.Duration) {
	ts := unix.NsecToTimespec(int64(d))
	for unix.Nanosleep(&ts, &ts) == unix.EINTR {
	}
}

// watches measures the gaps the faults open: from a fault to the first confirmation that shows the
// stream serving again. Producers report every confirmation; a watch is armed by the fault.
type watches struct {
	mu     sync.Mutex
	active []*watch
}

// watch is one gap: armed at since, it ends at the first confirmation at an epoch above epochAbove
// (a failover: the old owner cannot confirm at a newer epoch) or, with appendedAfter set, of a record
// appended after since (a pause). onEnd, if set, hears the end (once, from the confirming producer).
type watch struct {
	since         time.Time
	epochAbove    uint32
	appendedAfter bool
	// stream and lost, when stream is set, also end the watch at the first batch of stream that a
	// node other than lost reports written (writtenBy: the Kafka driver's answers carry no epoch).
	stream string
	lost   uint16
	onEnd  func(end time.Time)
	end    time.Time // zero until it ended
	done   chan struct{}
}

func (w *watches) arm(since time.Time, epochAbove uint32, appendedAfter bool, onEnd func(time.Time)) *watch {
	wt := &watch{since: since, epochAbove: epochAbove, appendedAfter: appendedAfter, onEnd: onEnd,
		done: make(chan struct{})}
	w.mu.Lock()
	w.active = append(w.active, wt)
	w.mu.Unlock()
	return wt
}

// armKill is arm for an owner kill of stream's owner lost at epoch: the watch ends at a confirmation
// at a newer epoch, or a batch of stream written by another node (writtenBy).
func (w *watches) armKill(since time.Time, epoch uint32, stream string, lost uint16, onEnd func(time.Time)) *watch {
	wt := &watch{since: since, epochAbove: epoch, stream: stream, lost: lost, onEnd: onEnd, done: make(chan struct{})}
	w.mu.Lock()
	w.active = append(w.active, wt)
	w.mu.Unlock()
	return wt
}

// writtenBy ends every kill watch of stream whose lost owner is not node: a batch of the stream
// written by another node.
func (w *watches) writtenBy(now time.Time, stream string, node uint16) {
	w.mu.Lock()
	defer w.mu.Unlock()
	kept := w.active[:0]
	for _, wt := range w.active {
		if wt.stream != "" && wt.stream == stream && node != wt.lost {
			wt.finish(now)
			continue
		}
		kept = append(kept, wt)
	}
	w.active = kept
}

// finish ends wt at now (w.mu held).
func (wt *watch) finish(now time.Time) {
	wt.end = now
	close(wt.done)
	if wt.onEnd != nil {
		wt.onEnd(now)
	}
}

// confirmed ends every armed watch this confirmation satisfies; oldest is when its first record was
// appended.
func (w *watches) confirmed(now, oldest time.Time, epoch uint32) {
	w.mu.Lock()
	defer w.mu.Unlock()
	kept := w.active[:0]
	for _, wt := range w.active {
		ok := epoch > wt.epochAbove
		if wt.appendedAfter {
			ok = oldest.After(wt.since)
		}
		if ok {
			wt.finish(now)
			continue
		}
		kept = append(kept, wt)
	}
	w.active = kept
}

// gapMs is the watch's gap in milliseconds, or nil if it never ended.
func (wt *watch) gapMs() *float64 {
	select {
	case <-wt.done:
		return ptr(msSince(wt.since, wt.end))
	default:
		return nil
	}
}
