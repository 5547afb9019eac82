package allocs

import (
	"runtime"
	"testing"
)

// sink keeps each allocation reachable past escape analysis.
type sink struct{ p *[64]byte }

func TestIn_CountsOneAllocationPerCall(t *testing.T) {
	var s sink
	for _, n := range []int{1, 10, 100} {
		if got := In(t, n, func() { s.p = new([64]byte) }); got != int64(n) {
			t.Errorf("n %d: counted %d allocations, want %d", n, got, n)
		}
	}
}

func TestIn_CountsNothingForCodeThatAllocatesNothing(t *testing.T) {
	x := 0
	if got := In(t, 100, func() { x++ }); got != 0 {
		t.Errorf("counted %d allocations, want 0", got)
	}
}

// An allocation made once every few calls is counted, not averaged away.
func TestIn_CountsARareAllocation(t *testing.T) {
	var s sink
	i := 0
	got := In(t, 10, func() {
		if i++; i%10 == 0 {
			s.p = new([64]byte)
		}
	})
	if got != 1 {
		t.Errorf("counted %d allocations, want 1", got)
	}
}

// Allocations on another goroutine of the test count too: only stacks wholly in the runtime are
// left out.
func TestIn_CountsAnotherGoroutinesAllocations(t *testing.T) {
	var s sink
	work, done := make(chan struct{}), make(chan struct{})
	go func() {
		for range work {
			s.p = new([64]byte)
			done <- struct{}{}
		}
	}()
	defer close(work)
	got := In(t, 5, func() {
		work <- struct{}{}
		<-done
	})
	if got != 5 {
		t.Errorf("counted %d allocations, want 5", got)
	}
}

func TestIn_PutsTheProfileRateBack(t *testing.T) {
	rate := runtime.MemProfileRate
	In(t, 1, func() {})
	if runtime.MemProfileRate != rate {
		t.Fatalf("MemProfileRate %d after In, want %d", runtime.MemProfileRate, rate)
	}
}

func TestOwnFunctions(t *testing.T) {
	for _, c := range []struct {
		fns  []string
		want bool
	}{
		{[]string{"runtime.mallocgc", "runtime.allocm", "runtime.newm", "runtime.startm", "runtime.mstart"}, true},
		{[]string{"runtime.mallocgc", "runtime.newobject", "x.f", "runtime.goexit"}, false},
		{[]string{"runtime.mallocgc", "runtime.makeslice", "x.f"}, false},
		{[]string{"runtime.mallocgc", "runtime/pprof.f", "runtime.goexit"}, false},
		{[]string{"runtime.mallocgc", "runtime.buildTypeAssertCache", "runtime.typeAssert", "x.f"}, true},
		{[]string{"runtime.mallocgc", "runtime.buildInterfaceSwitchCache", "runtime.interfaceSwitch", "x.f"}, true},
		{[]string{"runtime.mallocgc", "runtime.newobject", "runtime.acquireSudog", "runtime.selectgo", "x.f"}, true},
		{[]string{"runtime.mallocgc", "runtime.growslice", "runtime.(*timers).addHeap", "runtime.(*timer).maybeAdd",
			"runtime.blockTimerChan", "runtime.selectgo", "x.f"}, true},
		{[]string{"runtime.mallocgc", "log/slog.(*Logger).Warn", "github.com/ringstream/ringstream/shard.(*Shard).reportStall",
			"github.com/ringstream/ringstream/shard.(*Shard).timerTick"}, true},
		{[]string{"runtime.mallocgc", "log/slog.(*Logger).Warn", "github.com/ringstream/ringstream/shard.(*Shard).timerTick"}, false},
	} {
		if got := ownFunctions(c.fns); got != c.want {
			t.Errorf("%v: own %v, want %v", c.fns, got, c.want)
		}
	}
}
