package streamhost

import (
	"testing"

	"github.com/ringstream/ringstream/engine/stream"
)

// SleepUntil lets a serving copy sleep only when nothing of its own waits for a tick: each kind of
// pending work keeps it on every tick's poll, and a quiet copy sleeps until its next idle check (not
// parked yet) or retention pass (a spec with limits).
func TestSleepUntil_PendingWorkKeepsACopyAwake(t *testing.T) {
	sh := &shardHost{h: &Host{cfg: Config{IdleCloseTicks: 1000}}}
	quiet := func() *copyGroup {
		return &copyGroup{h: sh, c: new(stream.Copy), state: stateServing, parked: true, stagger: 3, retainAt: 50}
	}
	const now = 10
	if got := quiet().SleepUntil(now); got != ^uint64(0) {
		t.Fatalf("a quiet parked copy sleeps until %d, want the largest tick (the next send tick decides)", got)
	}
	for name, work := range map[string]func(*copyGroup){
		"effects to carry out":      func(cg *copyGroup) { cg.dirty = true },
		"storage failed":            func(cg *copyGroup) { cg.fail.active = true },
		"no protocol copy":          func(cg *copyGroup) { cg.c = nil },
		"applying an assignment":    func(cg *copyGroup) { cg.state = stateApplying },
		"opening":                   func(cg *copyGroup) { cg.opening = true },
		"protocol timers":           func(cg *copyGroup) { cg.ticking = true },
		"retention running":         func(cg *copyGroup) { cg.retain = true },
		"delete waiting":            func(cg *copyGroup) { cg.delWait = true },
		"log epoch waiting":         func(cg *copyGroup) { cg.epochWait = true },
		"park to retry":             func(cg *copyGroup) { cg.parkNow = true },
		"reads waiting":             func(cg *copyGroup) { cg.readWait = []readReq{{}} },
		"seal queued":               func(cg *copyGroup) { cg.seal.phase = sealQueued },
		"seal fencing":              func(cg *copyGroup) { cg.seal.phase = sealFencing },
		"seal cutting":              func(cg *copyGroup) { cg.seal.phase = sealCutting },
		"seal digesting":            func(cg *copyGroup) { cg.seal.phase = sealDigesting },
		"assignment waiting to run": func(cg *copyGroup) { cg.apply.phase = applyWaiting },
		"assignment cutting":        func(cg *copyGroup) { cg.apply.phase = applyCutting },
	} {
		cg := quiet()
		work(cg)
		if got := cg.SleepUntil(now); got > now+1 {
			t.Errorf("%s: the copy sleeps until tick %d", name, got)
		}
		if cg.sleeping {
			t.Errorf("%s: the copy thinks it sleeps", name)
		}
	}
	cg := quiet()
	cg.seal.phase = sealAnswered
	if got := cg.SleepUntil(now); got != ^uint64(0) {
		t.Fatalf("a copy whose seal was answered sleeps until %d, want the largest tick", got)
	}
	cg = quiet()
	cg.parked = false
	if got := cg.SleepUntil(now); got != 13 { // (13 + stagger 3) is a multiple of parkCheckTicks
		t.Fatalf("an unparked copy sleeps until %d, want its next idle check 13", got)
	}
	for _, limit := range []func(*copyGroup){
		func(cg *copyGroup) { cg.spec.RetainBytes = 1 << 20 },
		func(cg *copyGroup) { cg.spec.RetainAgeMs = 60_000 },
	} {
		cg = quiet()
		limit(cg)
		if got := cg.SleepUntil(now); got != 50 || !cg.sleeping {
			t.Fatalf("a copy with retention sleeps until %d (sleeping %v), want its pass at 50", got, cg.sleeping)
		}
	}
	off := &shardHost{h: &Host{cfg: Config{IdleCloseTicks: -1}}}
	cg = quiet()
	cg.h, cg.parked = off, false
	if got := cg.SleepUntil(now); got != ^uint64(0) {
		t.Fatalf("parking off: an unparked copy sleeps until %d, want no idle check", got)
	}
}

// The published tails keep one entry per copy on the shard: a removed copy's entry goes, the last
// entry takes its place and its copy learns its new slot.
func TestTails_TableKeepsOneEntryPerCopy(t *testing.T) {
	sh := &shardHost{h: &Host{}}
	a, b, c := &copyGroup{h: sh}, &copyGroup{h: sh}, &copyGroup{h: sh}
	for _, cg := range []*copyGroup{a, b, c, a} { // a twice: added once
		sh.addTail(cg)
	}
	if len(sh.tails) != 3 || a.tailSlot != 1 || b.tailSlot != 2 || c.tailSlot != 3 {
		t.Fatalf("%d entries, slots %d %d %d", len(sh.tails), a.tailSlot, b.tailSlot, c.tailSlot)
	}
	sh.removeTail(a)
	if len(sh.tails) != 2 || a.tailSlot != 0 || c.tailSlot != 1 || sh.tailCopies[0] != c || sh.tailCopies[1] != b {
		t.Fatalf("after removing the first: %d entries, slots a %d b %d c %d", len(sh.tails), a.tailSlot, b.tailSlot, c.tailSlot)
	}
	sh.removeTail(a) // not on the table any more: nothing
	sh.removeTail(b)
	if len(sh.tails) != 1 || len(sh.tailCopies) != 1 || c.tailSlot != 1 {
		t.Fatalf("after removing the last: %d entries, c's slot %d", len(sh.tails), c.tailSlot)
	}
	sh.markTail(c)
	sh.markTail(b) // removed after its mark: skipped
	sh.publish()
	if len(sh.tailsMarked) != 0 || c.tailMarked {
		t.Fatalf("marks left after a publish: %d", len(sh.tailsMarked))
	}
}
