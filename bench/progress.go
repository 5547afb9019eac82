package bench

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/schollz/progressbar/v3"
)

// Progress intervals: the terminal line is redrawn twice a second, a plain line written once a
// second; each shows the rate and the p99 of the confirmations since the one before.
const (
	progressBarEvery  = 500 * time.Millisecond
	progressLineEvery = time.Second
)

// liveStats is what the progress line reads while the load runs: the records confirmed so far and a
// histogram of the latencies confirmed since the line's last interval. Producers add to it on each
// confirmed batch (no allocation); the progress goroutine takes the histogram's p99 and resets it.
type liveStats struct {
	confirmed atomic.Int64
	mu        sync.Mutex
	hist      *hdrhistogram.Histogram
}

func newLiveStats() *liveStats {
	return &liveStats{hist: hdrhistogram.New(latencyMinUs, latencyMaxUs, latencySigFigs)}
}

// add counts count records confirmed with latency us (µs).
func (l *liveStats) add(us int64, count int) {
	l.confirmed.Add(int64(count))
	l.mu.Lock()
	l.hist.RecordValues(us, int64(count))
	l.mu.Unlock()
}

// takeP99 is the p99 (ms) of what was confirmed since the last take, and false when nothing was.
func (l *liveStats) takeP99() (float64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.hist.TotalCount() == 0 {
		return 0, false
	}
	p99 := float64(l.hist.ValueAtQuantile(99)) / 1000
	l.hist.Reset()
	return p99, true
}

// Phases of a run, as the progress line names them.
const (
	PhaseWarmup     = "warmup"
	PhaseSteady     = "steady"
	PhaseKilled     = "killed"      // the owner was SIGKILLed: nothing confirms until the failover
	PhaseRecovering = "recovering"  // the metadata names a new owner; not confirming yet
	PhaseFailedOver = "failed over" // confirming again at a newer epoch
	PhaseCatchingUp = "catching up" // the old owner was restarted or resumed and copies what it missed
	PhaseCaughtUp   = "caught up"
	PhaseRejoined   = "rejoined"
	PhasePaused     = "paused"   // the owner was SIGSTOPped
	PhaseResumed    = "resumed"  // SIGCONT, and no failover to catch up from
	PhaseDegraded   = "degraded" // a follower or another node is down
)

// phaseOf is the run's phase elapsed into the load, from the events so far: the last event that
// changes it, or warmup / steady before any.
func phaseOf(evs []Event, elapsed, warmup time.Duration) string {
	phase := PhaseSteady
	if elapsed < warmup {
		phase = PhaseWarmup
	}
	failedOver := false
	for _, e := range evs {
		switch e.Name {
		case EventKill:
			phase = PhaseDegraded
			if strings.HasPrefix(e.Note, ownerKillNote) {
				phase = PhaseKilled
			}
		case EventPause:
			phase = PhasePaused
		case EventAssignment:
			if phase == PhaseKilled || phase == PhasePaused {
				phase = PhaseRecovering
			}
		case EventFirstConfirm:
			if phase == PhaseKilled || phase == PhaseRecovering || phase == PhasePaused {
				phase, failedOver = PhaseFailedOver, true
			}
		case EventRestart:
			phase = PhaseCatchingUp
		case EventResume:
			phase = PhaseResumed
			if failedOver {
				phase = PhaseCatchingUp
			}
		case EventCaughtUp:
			phase = PhaseCaughtUp
		case EventRejoined:
			phase = PhaseRejoined
		}
	}
	return phase
}

// progressState is one progress line's figures.
type progressState struct {
	phase     string
	elapsed   time.Duration
	total     time.Duration
	rate      float64 // records/s over the last interval
	p99Ms     float64 // of the last interval's confirmations
	p99OK     bool    // false: nothing was confirmed in the last interval
	confirmed int64
}

// text is the line: phase, elapsed / total and what remains, rate, p99 and the records confirmed.
func (s progressState) text() string {
	p99 := "p99 -"
	if s.p99OK {
		p99 = fmt.Sprintf("p99 %.1f ms", s.p99Ms)
	}
	left := max(s.total-s.elapsed, 0)
	return fmt.Sprintf("%-11s %5.1fs/%.0fs (%4.1fs left)  %8.0f rec/s  %-13s %10d confirmed", s.phase,
		s.elapsed.Seconds(), s.total.Seconds(), left.Seconds(), s.rate, p99, s.confirmed)
}

// showProgress shows the run's progress on w over the load's duration: with bar, one terminal line
// redrawn (a progress bar and the figures); without, a plain line a second, for a log or a pipe. The
// returned func stops it. A nil w shows nothing.
func showProgress(w io.Writer, bar bool, start time.Time, d, warmup time.Duration, stats *liveStats,
	evs *events) func() {
	if w == nil {
		return func() {}
	}
	every := progressLineEvery
	var pb *progressbar.ProgressBar
	if bar {
		every = progressBarEvery
		pb = progressbar.NewOptions64(d.Milliseconds(), progressbar.OptionSetWriter(w),
			progressbar.OptionSetWidth(12), progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionSetPredictTime(false), progressbar.OptionClearOnFinish(),
			progressbar.OptionSetElapsedTime(false), progressbar.OptionShowDescriptionAtLineEnd())
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		var last int64
		lastAt := start
		for {
			select {
			case <-stop:
				if pb != nil {
					pb.Finish()
				}
				return
			case now := <-t.C:
				n := stats.confirmed.Load()
				s := progressState{phase: phaseOf(evs.all(), now.Sub(start), warmup), elapsed: now.Sub(start),
					total: d, rate: float64(n-last) / now.Sub(lastAt).Seconds(), confirmed: n}
				s.p99Ms, s.p99OK = stats.takeP99()
				last, lastAt = n, now
				if pb == nil {
					fmt.Fprintln(w, "bench", s.text())
					continue
				}
				pb.Describe(s.text())
				pb.Set64(min(s.elapsed.Milliseconds(), d.Milliseconds()))
			}
		}
	}()
	return func() {
		close(stop)
		<-done
		if bar {
			fmt.Fprintln(w)
		}
	}
}
