package bench

import (
	"strings"
	"testing"
	"time"
)

// The progress line's phase follows the run's events: warmup and steady before any fault, then the
// owner kill's story (killed, recovering, failed over, catching up, caught up, rejoined), or a
// pause's.
func TestPhaseFollowsTheEvents(t *testing.T) {
	kill := Event{Name: EventKill, Node: 1, Note: ownerKillNote + "bench-0 at epoch 1"}
	assign := Event{Name: EventAssignment, Node: 2}
	first := Event{Name: EventFirstConfirm}
	restart := Event{Name: EventRestart, Node: 1}
	caught := Event{Name: EventCaughtUp, Node: 1}
	rejoined := Event{Name: EventRejoined, Node: 1}
	pause := Event{Name: EventPause, Node: 1}
	resume := Event{Name: EventResume, Node: 1}
	cases := []struct {
		evs     []Event
		elapsed time.Duration
		want    string
	}{
		{nil, 500 * time.Millisecond, PhaseWarmup},
		{nil, 2 * time.Second, PhaseSteady},
		{[]Event{kill}, 9 * time.Second, PhaseKilled},
		{[]Event{kill, assign}, 9 * time.Second, PhaseRecovering},
		{[]Event{kill, assign, first}, 9 * time.Second, PhaseFailedOver},
		{[]Event{kill, assign, first, restart}, 15 * time.Second, PhaseCatchingUp},
		{[]Event{kill, assign, first, restart, caught}, 16 * time.Second, PhaseCaughtUp},
		{[]Event{kill, assign, first, restart, caught, rejoined}, 16 * time.Second, PhaseRejoined},
		{[]Event{{Name: EventKill, Node: 2, Note: "follower"}}, 5 * time.Second, PhaseDegraded},
		{[]Event{pause}, 5 * time.Second, PhasePaused},
		{[]Event{pause, resume}, 5 * time.Second, PhaseResumed},
		{[]Event{pause, resume, first}, 5 * time.Second, PhaseResumed}, // no failover: the stall ended at the resume
		{[]Event{pause, assign, first, resume}, 9 * time.Second, PhaseCatchingUp},
	}
	for i, tc := range cases {
		if got := phaseOf(tc.evs, tc.elapsed, time.Second); got != tc.want {
			t.Errorf("case %d: phase %q, want %q", i, got, tc.want)
		}
	}
}

// The line names the phase, the elapsed and total time and what is left, the rate, the p99 of the
// last interval ("-" when nothing was confirmed in it) and the records confirmed.
func TestProgressTextHasEveryFigure(t *testing.T) {
	s := progressState{phase: PhaseKilled, elapsed: 8200 * time.Millisecond, total: 20 * time.Second, rate: 0,
		confirmed: 123456}
	got := s.text()
	for _, want := range []string{"killed", "8.2s/20s", "11.8s left", "0 rec/s", "p99 -", "123456 confirmed"} {
		if !strings.Contains(got, want) {
			t.Errorf("line %q has no %q", got, want)
		}
	}
	s.phase, s.rate, s.p99Ms, s.p99OK = PhaseSteady, 91374, 27.46, true
	if got := s.text(); !strings.Contains(got, "91374 rec/s") || !strings.Contains(got, "p99 27.5 ms") {
		t.Errorf("line %q", got)
	}
}

// The live p99 is of the confirmations since the last take only.
func TestLiveStatsP99IsOfTheLastInterval(t *testing.T) {
	l := newLiveStats()
	if _, ok := l.takeP99(); ok {
		t.Fatal("a p99 with nothing confirmed")
	}
	l.add(100_000, 100) // 100 ms
	if p, ok := l.takeP99(); !ok || p < 99.9 || p > 100.1 {
		t.Fatalf("p99 %v %v, want 100 ms", p, ok)
	}
	l.add(2_000, 10)
	if p, ok := l.takeP99(); !ok || p < 1.99 || p > 2.01 {
		t.Fatalf("p99 %v %v, want 2 ms: the earlier interval left out", p, ok)
	}
	if l.confirmed.Load() != 110 {
		t.Fatalf("confirmed %d", l.confirmed.Load())
	}
}

// Recording a confirmation for the progress line allocates nothing.
func TestLiveStatsAddAllocatesNothing(t *testing.T) {
	l := newLiveStats()
	if n := testing.AllocsPerRun(1000, func() { l.add(1234, 16) }); n != 0 {
		t.Fatalf("%v allocations per confirmed batch", n)
	}
}

// lineWriter hands each write to the test, in order.
type lineWriter chan string

func (w lineWriter) Write(b []byte) (int, error) { w <- string(b); return len(b), nil }

// Without a terminal the progress is plain lines, one a second, each with its phase.
func TestProgressLinesWithoutATerminal(t *testing.T) {
	w := make(lineWriter, 4)
	start := time.Now()
	stats := newLiveStats()
	evs := &events{start: start}
	stats.add(5000, 1000)
	stop := showProgress(w, false, start, 3*time.Second, 0, stats, evs)
	first := <-w
	evs.add(EventKill, 1, time.Now(), ownerKillNote+"s at epoch 1")
	second := <-w
	stop()
	close(w)
	for rest := range w {
		t.Fatalf("more output after stop: %q", rest)
	}
	if !strings.Contains(first, "steady") || !strings.Contains(first, "p99 5.0 ms") ||
		!strings.Contains(second, "killed") || !strings.Contains(second, "p99 -") {
		t.Fatalf("lines:\n%s%s", first, second)
	}
	for _, l := range []string{first, second} {
		if strings.Contains(l, "\r") || strings.Count(l, "\n") != 1 {
			t.Fatalf("not one plain line: %q", l)
		}
	}
}
