package bench

import (
	"context"
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
// the end.
type profiles struct {
	r    *run
	wg   sync.WaitGroup
	mu   sync.Mutex
	errs []string
}

// startProfiles starts each node's CPU profile for the load's duration (nothing without --profile).
func (r *run) startProfiles(ctx context.Context) *profiles {
	p := &profiles{r: r}
	if r.cfg.ProfileDir == "" {
		return p
	}
	secs := int(r.cfg.Duration.Seconds())
	for i, addr := range r.admins {
		p.wg.Go(func() {
			if err := r.admin.profileCPU(ctx, addr, profileFile(r.cfg.ProfileDir, i+1, "cpu"), secs); err != nil {
				p.note(err)
			}
		})
	}
	return p
}

func (p *profiles) note(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.errs = append(p.errs, err.Error())
}

// finish waits for the CPU profiles, takes the heap profiles, and notes in the report's events what
// could not be saved (a node killed during its profile has none).
func (p *profiles) finish(ctx context.Context, rep *Report) {
	if p.r.cfg.ProfileDir == "" {
		return
	}
	p.wg.Wait()
	for i, addr := range p.r.admins {
		if err := p.r.admin.profileHeap(ctx, addr, profileFile(p.r.cfg.ProfileDir, i+1, "heap")); err != nil {
			p.note(err)
		}
	}
	for _, e := range p.errs {
		rep.Events = append(rep.Events, Event{Name: "profile not saved", Note: e})
	}
}
