// Package allocs counts the heap allocations a piece of code makes, for allocation tests whose
// code runs on a goroutine locked to its OS thread or beside running shard or ring threads.
//
// testing.AllocsPerRun reads the process's malloc count, so it also counts what the Go runtime
// allocates on its own behalf meanwhile: under load a goroutine locked to its thread (a ring's rule)
// that blocks makes the scheduler hand its P to a new OS thread, and starting that thread allocates
// six objects (the m, its g0 and gsignal, profiling stacks); the scavenger grows its timer heap. None
// of that is the measured code's cost, and it failed steady-state tests about one run in ten on a
// loaded machine. The same goes for the runtime's caches of type assertions and type switches: on a
// cache miss the runtime builds a bigger cache one time in 1024, drawn at random, so a steady loop
// that asserts an interface's type allocates once at an unforeseeable call. In records every
// allocation with its call stack (MemProfileRate 1) and leaves out only those whose every frame is
// in package runtime and those made inside the runtime's type assertion or type switch cache
// builders, its channel waiter cache (acquireSudog, emptied by every GC) or a P's timer heap (grown
// the first time that P holds more timers): anything else reached from the measured function, or
// from any other goroutine of the test, still counts.
//
// Decisions where the design is silent:
//   - Which tests use In: every allocation test in a package whose test binary starts rings, shard
//     threads or locked goroutines (ring, segment, shard, engine, engine/stream). Packages whose
//     tests run pure code alone (wire, shard/heartbeat, engine/vsr over its in-memory harness,
//     engine/control) keep testing.AllocsPerRun, which has no runtime work beside it to count.
//   - In returns the total over one run of n calls, not an average: dividing by the run count would
//     hide an allocation made once every few calls.
//   - In makes n warm-up calls first (a ring slot grows its iovec memory at its first use; reused
//     buffers reach their steady size), so f is called 2n times in all.
//   - runtime/... subpackages (runtime/pprof and the like) are not package runtime: their
//     allocations count.
//   - The runtime's own work reached from the measured code is left out by name, a short list
//     (ownFunctions), not by "innermost frames in runtime": a map, slice or conversion the measured
//     code makes also allocates inside runtime frames, and that must count.
//   - So is one report of ours that marks the end of a steady state rather than part of it: a
//     shard's log line for ticks a stall skipped (shard.(*Shard).reportStall, made when the process
//     was starved of CPU for half a quorum window, as a loaded test machine does now and then).
package allocs

import (
	"runtime"
	"strings"
	"testing"
)

// In returns the heap allocations made by n calls of f, after n warm-up calls, leaving out those
// the Go runtime makes for itself. Each counted allocation site is logged with its stack through t.
// In sets runtime.MemProfileRate while it runs and puts it back; it must not run in parallel with
// another In or with a test that reads the memory profile.
func In(t testing.TB, n int, f func()) int64 {
	t.Helper()
	for i := 0; i < n; i++ {
		f()
	}
	defer func(rate int) { runtime.MemProfileRate = rate }(runtime.MemProfileRate)
	runtime.MemProfileRate = 1
	// The snapshot before the loop is taken right after a collection that published every allocation
	// made so far, both snapshots' slices included: nothing between it and the loop allocates.
	var before, after []runtime.MemProfileRecord
	for {
		runtime.GC()
		m, ok := runtime.MemProfile(before, true)
		if ok {
			before = before[:m]
			break
		}
		before, after = make([]runtime.MemProfileRecord, m+256), make([]runtime.MemProfileRecord, m+512)
	}
	for i := 0; i < n; i++ {
		f()
	}
	runtime.GC() // publishes the loop's allocations
	for {
		m, ok := runtime.MemProfile(after, true)
		if ok {
			after = after[:m]
			break
		}
		after = make([]runtime.MemProfileRecord, m+256)
	}
	old := make(map[[32]uintptr]int64, len(before))
	for _, r := range before {
		old[r.Stack0] += r.AllocObjects
	}
	var count, left int64
	for _, r := range after {
		d := r.AllocObjects - old[r.Stack0]
		switch {
		case d <= 0:
		case runtimesOwn(r.Stack()):
			left += d
		default:
			count += d
			t.Logf("%d allocations at %s", d, frames(r.Stack()))
		}
	}
	if left > 0 {
		t.Logf("left out %d allocations the runtime made for itself", left)
	}
	return count
}

// runtimesOwn reports whether the allocation with stack is the runtime's own work.
func runtimesOwn(stack []uintptr) bool {
	var fns []string
	fr := runtime.CallersFrames(stack)
	for {
		f, more := fr.Next()
		fns = append(fns, f.Function)
		if !more {
			return ownFunctions(fns)
		}
	}
}

// ownFunctions reports whether a stack of the functions fns, innermost first, allocates for the
// runtime itself: every frame is in package runtime (not runtime/...), or one is a cache builder.
func ownFunctions(fns []string) bool {
	all := true
	for _, fn := range fns {
		switch {
		case fn == "runtime.buildTypeAssertCache", fn == "runtime.buildInterfaceSwitchCache":
			return true // the runtime's own caches, grown at calls drawn at random
		case fn == "github.com/ringstream/ringstream/shard.(*Shard).reportStall":
			return true // a stall's report: the steady state ended (see the package doc)
		case fn == "runtime.acquireSudog", fn == "runtime.(*timers).addHeap":
			// a channel operation's waiter records, whose central cache each GC empties, and a P's timer
			// heap, grown the first time that P holds more timers: refilled by whichever P runs the code
			return true
		case fn != "" && !strings.HasPrefix(fn, "runtime."):
			all = false
		}
	}
	return all
}

// frames names the functions of stack, innermost first, for the log of a failing count.
func frames(stack []uintptr) string {
	var b strings.Builder
	fr := runtime.CallersFrames(stack)
	for {
		f, more := fr.Next()
		b.WriteString(f.Function)
		if !more {
			return b.String()
		}
		b.WriteString(" < ")
	}
}
