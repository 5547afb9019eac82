package streamhost_test

import (
	"runtime"
	"strings"
	"testing"
)

// allocPaths sorts the allocations made between two memory profiles by the path that made them:
// the owner taking produces (Host.StepAll), a copy handling a frame (copyGroup.OnFrame: a follower
// storing a prepare, the owner counting a prepare-ok), the per-turn hook (shardHost.OnTurn: group
// commits, their completions, the Readies carried out at the turn), the load generator, and the
// rest (the shard loop, links, the runtime).
type allocPaths struct {
	owner, frame, turn, loadgen, other int64
}

var allocPathNames = []struct {
	fn   string
	slot func(p *allocPaths) *int64
}{
	{"streamhost.(*Host).StepAll", func(p *allocPaths) *int64 { return &p.owner }},
	{"streamhost.(*copyGroup).OnFrame", func(p *allocPaths) *int64 { return &p.frame }},
	{"streamhost.(*shardHost).OnTurn", func(p *allocPaths) *int64 { return &p.turn }},
	{"streamhost_test.(*loadGen)", func(p *allocPaths) *int64 { return &p.loadgen }},
}

func memProfile() []runtime.MemProfileRecord {
	runtime.GC()
	var recs []runtime.MemProfileRecord
	for {
		n, ok := runtime.MemProfile(recs, true)
		if ok {
			return recs[:n]
		}
		recs = make([]runtime.MemProfileRecord, n+512)
	}
}

// classify adds the allocations of after not in before to p, by the innermost path frame.
func (p *allocPaths) classify(before, after []runtime.MemProfileRecord) {
	old := make(map[[32]uintptr]int64, len(before))
	for _, r := range before {
		old[r.Stack0] += r.AllocObjects
	}
	for _, r := range after {
		d := r.AllocObjects - old[r.Stack0]
		if d <= 0 {
			continue
		}
		slot := &p.other
		fr := runtime.CallersFrames(r.Stack())
	frames:
		for {
			f, more := fr.Next()
			for _, pn := range allocPathNames {
				if strings.Contains(f.Function, pn.fn) {
					slot = pn.slot(p)
					break frames
				}
			}
			if !more {
				break
			}
		}
		*slot += d
	}
}

// BenchmarkProduce3CopiesAllocs: (c) allocations per record of a 3-copy stream in steady state, by
// path, every allocation recorded with its stack (MemProfileRate 1, so records/s is not a figure
// here). owner is the produce path on the owner, frame the prepare and prepare-ok handling (the
// follower's storing path and the owner's ack path), turn the group commits and Readies of the
// per-turn hook.
func BenchmarkProduce3CopiesAllocs(b *testing.B) {
	c := newCluster(b, majority(1, 2, 3))
	g := newLoadGen(c)
	g.run(b, 0, 20000) // warm the pools, the links and the buffers to their steady sizes
	defer func(rate int) { runtime.MemProfileRate = rate }(runtime.MemProfileRate)
	runtime.MemProfileRate = 1
	before := memProfile()
	b.ResetTimer()
	g.run(b, 20000, b.N)
	b.StopTimer()
	var p allocPaths
	p.classify(before, memProfile())
	n := float64(b.N)
	b.ReportMetric(float64(p.owner)/n, "owner-allocs/record")
	b.ReportMetric(float64(p.frame)/n, "frame-allocs/record")
	b.ReportMetric(float64(p.turn)/n, "turn-allocs/record")
	b.ReportMetric(float64(p.loadgen)/n, "loadgen-allocs/record")
	b.ReportMetric(float64(p.other)/n, "other-allocs/record")
}
