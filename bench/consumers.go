package bench

import (
	"cmp"
	"context"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringstream/ringstream/client"
)

// startConsumers starts --consumers readers, consumer i reading stream i mod the stream count from
// offset 0 with long polls until ctx ends; the count is of the records they read.
func (r *run) startConsumers(ctx context.Context, names []string, wg *sync.WaitGroup) *atomic.Int64 {
	var n atomic.Int64
	for i := range r.cfg.Consumers {
		name := names[i%len(names)]
		wg.Go(func() {
			cs, err := r.cl.Consumer(name, 0, client.FetchOptions{Wait: 100 * time.Millisecond})
			if err != nil {
				return
			}
			for ctx.Err() == nil {
				recs, err := cs.Poll(ctx)
				if err != nil {
					continue // a failover: the client finds the new owner on the next poll
				}
				for recs.Next() {
					n.Add(1)
				}
			}
		})
	}
	return &n
}

// profiles collects --profile: a CPU profile of every node over the load, and a heap profile at
// the end; and the bench process's own CPU profile over the same load (bench-cpu.pprof: the client
// side of cpu_us_per_record). A profile that could not be saved is an event of its node at the time it failed (a node
// killed during its CPU profile fails at the kill).
type profiles struct {
	r       *run
	targets []profileTarget
	wg      sync.WaitGroup
	mu      sync.Mutex
	failed  []Event
	// self is the bench process's own CPU profile file while it runs (nil when not started).
	self *os.File
}

// selfProfileName is the file, in --profile's directory, of the bench process's own CPU profile.
const selfProfileName = "bench-cpu.pprof"

// profileTarget is one node whose profiles are taken: its id and admin address.
type profileTarget struct {
	node uint16
	addr string
}

// profileTargets is every node with its admin address: the local cluster's nodes, or with --cluster
// the node id each admin address reports in its status (0 when it does not answer).
func (r *run) profileTargets(ctx context.Context) []profileTarget {
	var out []profileTarget
	if r.lc != nil {
		for _, n := range r.lc.Nodes() {
			out = append(out, profileTarget{node: n.ID, addr: n.AdminAddr})
		}
		return out
	}
	for _, addr := range r.admins {
		t := profileTarget{addr: addr}
		if st, err := r.admin.status(ctx, addr); err == nil {
			t.node = st.Node
		}
		out = append(out, t)
	}
	return out
}

// startProfiles starts each node's CPU profile for the load's duration (nothing without --profile).
func (r *run) startProfiles(ctx context.Context) *profiles {
	p := &profiles{r: r}
	if r.cfg.ProfileDir == "" {
		return p
	}
	p.startSelf()
	p.targets = r.profileTargets(ctx)
	secs := int(r.cfg.Duration.Seconds())
	for _, t := range p.targets {
		p.wg.Go(func() {
			if err := r.admin.profileCPU(ctx, t.addr, profileFile(r.cfg.ProfileDir, t, "cpu"), secs); err != nil {
				p.note(t, "cpu", err)
			}
		})
	}
	return p
}

// startSelf starts the bench process's own CPU profile; one that cannot start is an event (node 0).
func (p *profiles) startSelf() {
	var f *os.File
	err := os.MkdirAll(p.r.cfg.ProfileDir, 0o755)
	if err == nil {
		f, err = os.Create(filepath.Join(p.r.cfg.ProfileDir, selfProfileName))
	}
	if err == nil {
		if err = pprof.StartCPUProfile(f); err != nil {
			f.Close()
		}
	}
	if err != nil {
		p.note(profileTarget{}, "bench cpu", err)
		return
	}
	p.self = f
}

// stopSelf ends the bench process's CPU profile, when it started, and closes its file.
func (p *profiles) stopSelf() {
	if p.self == nil {
		return
	}
	pprof.StopCPUProfile()
	if err := p.self.Close(); err != nil {
		p.note(profileTarget{}, "bench cpu", err)
	}
	p.self = nil
}

// note records that node t's profile of kind was not saved, now.
func (p *profiles) note(t profileTarget, kind string, err error) {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.failed = append(p.failed, Event{Name: EventProfileNotSaved, Node: t.node, AtMs: msSince(p.r.events.start, now),
		Note: kind + ": " + err.Error()})
}

// finish waits for the CPU profiles, takes the heap profiles, and adds to the report's events, in
// time order, what could not be saved.
func (p *profiles) finish(ctx context.Context, rep *Report) {
	if p.r.cfg.ProfileDir == "" {
		return
	}
	p.stopSelf()
	p.wg.Wait()
	for _, t := range p.targets {
		if err := p.r.admin.profileHeap(ctx, t.addr, profileFile(p.r.cfg.ProfileDir, t, "heap")); err != nil {
			p.note(t, "heap", err)
		}
	}
	rep.Events = append(rep.Events, p.failed...)
	slices.SortStableFunc(rep.Events, func(a, b Event) int { return cmp.Compare(a.AtMs, b.AtMs) })
}
