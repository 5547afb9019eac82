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
		"assignment waiting to run": func(cg *copyGroup) { cg.apply.phase = applyWaiting },
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
