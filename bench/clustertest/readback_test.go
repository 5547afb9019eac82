package clustertest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringstream/ringstream/bench"
	"github.com/ringstream/ringstream/client"
)

// Issue 22, finding 8: the node that had just become owner answered fetches with confirmed tail 0
// (or a part of it) though hundreds of records were confirmed before the fetch began. These tests
// hammer the owner with fetches through an owner kill and restart, and through an owner pause long
// enough for a failover, and check every fetch against what finished before it began.

// readWatch is what the readers of one run saw: the highest confirm acknowledged to its producer,
// the highest confirmed tail any fetch answered, and every fetch that came back below either.
type readWatch struct {
	acked    atomic.Uint64 // end of the highest batch acknowledged to the watch's producer
	seen     atomic.Uint64 // the highest confirmed tail a fetch was answered with
	fetched  atomic.Int64  // fetches answered
	failed   atomic.Int64  // fetches that ended in an error (the owner down, a retry budget spent)
	late     atomic.Int64  // fetches answered after the fault began
	faultAt  atomic.Int64  // unix nanoseconds of the first fault; 0 before
	start    time.Time     // the load's start (the script's), set before any reader runs
	mu       sync.Mutex
	backward []string // fetches answered below their floor, the first few
	count    int
	epochs   []string // the stream's epoch changes as the metadata showed them
}

func raise(v *atomic.Uint64, x uint64) {
	for {
		old := v.Load()
		if x <= old || v.CompareAndSwap(old, x) {
			return
		}
	}
}

// floor is what a fetch starting now must see at least.
func (w *readWatch) floor() uint64 { return max(w.acked.Load(), w.seen.Load()) }

func (w *readWatch) wentBack(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.count++
	if len(w.backward) < 10 {
		w.backward = append(w.backward, fmt.Sprintf(format, args...))
	}
}

// readerScript runs, beside the bench's load, one producer whose confirms it records and readers
// that fetch from the stream's owner without pause (at the confirmed tail, a record below it, and
// long polls), each fetch checked against the floor taken when it started.
func readerScript(w *readWatch, readers int) func(ctx context.Context, c bench.Controls) {
	return func(ctx context.Context, c bench.Controls) {
		v, err := c.Stream(ctx)
		if err != nil {
			c.Fail("reader: stream: %v", err)
			return
		}
		lc := c.Cluster()
		cl, err := client.Dial(ctx, client.Config{Addrs: lc.ClientAddrs(), Cluster: lc.ClusterID(), Secret: []byte(lc.Secret()),
			BackoffMin: time.Millisecond, BackoffMax: 20 * time.Millisecond, Retries: 200, RequestTimeout: 300 * time.Millisecond})
		if err != nil {
			c.Fail("reader: dial: %v", err)
			return
		}
		defer cl.Close()
		var wg sync.WaitGroup
		wg.Go(func() { watchEpochs(ctx, c, w, v.Epoch) })
		wg.Go(func() { produceWatched(ctx, cl, v.Name, w) })
		for i := range readers {
			wg.Go(func() { readWatched(ctx, cl, v.Name, w, i) })
		}
		wg.Wait()
	}
}

// watchEpochs notes each epoch change of the stream, with its owner, for the test's log.
func watchEpochs(ctx context.Context, c bench.Controls, w *readWatch, epoch uint32) {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		v, err := c.Stream(ctx)
		if err != nil || v.Epoch == epoch {
			continue
		}
		epoch = v.Epoch
		w.mu.Lock()
		w.epochs = append(w.epochs, fmt.Sprintf("epoch %d owner %d followers %v at %.2f s", v.Epoch, v.Owner, v.Followers,
			time.Since(w.start).Seconds()))
		w.mu.Unlock()
	}
}

// produceWatched appends small records until ctx ends, recording each confirm.
func produceWatched(ctx context.Context, cl *client.Client, name string, w *readWatch) {
	for ctx.Err() == nil {
		p, err := cl.Producer(client.ProducerConfig{Stream: name, Linger: time.Millisecond, InFlight: 2,
			OnConfirm: func(c client.Confirmed) { raise(&w.acked, c.BaseOffset+uint64(c.Count)) }})
		if err != nil {
			return
		}
		for ctx.Err() == nil {
			if err := p.Append(ctx, []byte("readback")); err != nil {
				break // a retry budget spent while the owner was down: a new producer goes on
			}
		}
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		_ = p.Close(closeCtx)
		cancel()
	}
}

// readWatched fetches until ctx ends: reader i at the tail it knows (i%3 == 0), one record below it
// (1), or as a long poll at the tail (2).
func readWatched(ctx context.Context, cl *client.Client, name string, w *readWatch, i int) {
	for ctx.Err() == nil {
		floor := w.floor()
		start := time.Now()
		off, opt := floor, client.FetchOptions{RecordsMax: 1}
		switch i % 3 {
		case 1:
			off = max(floor, 1) - 1
		case 2:
			opt.Wait = 200 * time.Millisecond
		}
		fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		r, err := cl.Fetch(fctx, name, off, opt)
		cancel()
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) {
				w.failed.Add(1)
			}
			continue
		}
		w.fetched.Add(1)
		if at := w.faultAt.Load(); at != 0 && start.UnixNano() > at {
			w.late.Add(1)
		}
		if r.ConfirmedTail < floor {
			w.wentBack("fetch at %d started at %.3f s answered confirmed tail %d, below %d confirmed before it began",
				off, start.Sub(w.start).Seconds(), r.ConfirmedTail, floor)
		}
		raise(&w.seen, r.ConfirmedTail)
	}
}

// markFault records the moment the first fault began (the bench marks it on its timeline too).
func markFault(w *readWatch, after time.Duration) func(ctx context.Context, c bench.Controls) {
	return func(ctx context.Context, c bench.Controls) {
		t := time.NewTimer(after)
		defer t.Stop()
		select {
		case <-t.C:
			w.faultAt.Store(time.Now().UnixNano())
		case <-ctx.Done():
		}
	}
}

func checkReads(t *testing.T, w *readWatch) {
	t.Helper()
	w.mu.Lock()
	t.Logf("epoch changes: %v", w.epochs)
	w.mu.Unlock()
	t.Logf("reads: %d answered (%d after the fault began), %d failed, highest confirm acknowledged %d, highest confirmed tail read %d",
		w.fetched.Load(), w.late.Load(), w.failed.Load(), w.acked.Load(), w.seen.Load())
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.count > 0 {
		t.Fatalf("%d fetches went back in time, the first ones:\n%s", w.count, joinLines(w.backward))
	}
	if w.late.Load() < 100 || w.acked.Load() == 0 {
		t.Fatalf("the readers did too little to prove anything: %d fetches after the fault, %d acknowledged",
			w.late.Load(), w.acked.Load())
	}
}

func joinLines(lines []string) string {
	out := ""
	for _, l := range lines {
		out += "  " + l + "\n"
	}
	return out
}

// watched starts w's clock with the load (the script starts with it), then runs f.
func watched(w *readWatch, f func(context.Context, bench.Controls)) func(context.Context, bench.Controls) {
	return func(ctx context.Context, c bench.Controls) {
		w.start = time.Now()
		f(ctx, c)
	}
}

func both(fs ...func(context.Context, bench.Controls)) func(context.Context, bench.Controls) {
	return func(ctx context.Context, c bench.Controls) {
		var wg sync.WaitGroup
		for _, f := range fs {
			wg.Go(func() { f(ctx, c) })
		}
		wg.Wait()
	}
}

// TestReadback_OwnerKillAndRestart_NoReadGoesBack: the owner is SIGKILLed under load and restarted
// 1.5 s later (two epoch changes: the failover, and the old owner's return as a follower); fetches
// hammer the owner throughout and none answers a confirmed tail below a confirm acknowledged, or a
// fetch answered, before it began.
func TestReadback_OwnerKillAndRestart_NoReadGoesBack(t *testing.T) {
	cfg := shortBench(t, 7*time.Second)
	cfg.KillOwnerAt, cfg.RestartAfter = 1.5, 1.5
	w := &readWatch{}
	cfg.Script = watched(w, both(readerScript(w, 6), markFault(w, 1500*time.Millisecond)))
	rep := runBench(t, cfg)
	if rep.FailoverGapMs == nil {
		t.Fatal("no failover measured")
	}
	checkReads(t, w)
}

// TestReadback_OwnerPause_NoReadGoesBack: the owner is SIGSTOPped for 8 s (past the 3 s liveness
// timeout and a metadata view change when it also holds the primary: the stream fails over, and
// the old owner returns as a follower after SIGCONT), with the same readers and the same check.
func TestReadback_OwnerPause_NoReadGoesBack(t *testing.T) {
	cfg := shortBench(t, 12*time.Second)
	cfg.PauseOwnerAt, cfg.PauseFor = 1.5, 8
	w := &readWatch{}
	cfg.Script = watched(w, both(readerScript(w, 6), markFault(w, 1500*time.Millisecond)))
	runBench(t, cfg)
	checkReads(t, w)
}
