package engine

import (
	"context"
	"sync"
	"time"

	"github.com/ringstream/ringstream/engine/streamhost"
	"github.com/ringstream/ringstream/wire"
)

// reapEvery is how often a node with a metadata replica looks for copies of deleted incarnations.
const reapEvery = 200 * time.Millisecond

// copyKey names one incarnation of a stream.
type copyKey struct {
	stream      uint64
	incarnation uint32
}

// reaper deletes this node's copies of the stream incarnations its metadata replica records as
// deleted (meta.State.Deleted), through streamhost.Host.DeleteIncarnation: the copy stops serving,
// its directory is renamed and removed through the ring, and its group leaves the shard, so requests
// naming the stream are then answered from the replica's state (CodeUnknownStream). It looks at the
// copies that serve (their published tails) and at the failed ones (streamhost's failures): a failed
// copy of a deleted stream stops its heal retries and its files are removed the same way, and it
// leaves the failures list. Runs on a background goroutine of its own; the state is read on shard 0.
type reaper struct {
	n        *Node
	tails    []wire.CopyTail
	failures []streamhost.Failure
	doomed   []copyKey
	mu       sync.Mutex
	pending  map[copyKey]bool // deletes started and not yet reported
	deleted  uint64           // copies deleted (Status, tests)
}

func newReaper(n *Node) *reaper { return &reaper{n: n, pending: map[copyKey]bool{}} }

// run looks every reapEvery until ctx ends.
func (r *reaper) run(ctx context.Context) {
	if r.n.meta == nil {
		return
	}
	t := time.NewTicker(reapEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		r.pass(ctx)
	}
}

// pass deletes the copies of deleted incarnations that are not being deleted already.
func (r *reaper) pass(ctx context.Context) {
	r.tails = r.n.streams.AppendCopyTails(r.tails[:0])
	r.failures = r.n.streams.AppendFailures(r.failures[:0])
	if len(r.tails) == 0 && len(r.failures) == 0 {
		return
	}
	r.doomed = r.doomed[:0]
	err := r.n.metaSvc.OnShard0(ctx, func() {
		state := r.n.meta.State()
		for _, t := range r.tails {
			if state.Deleted(t.Stream, t.Incarnation) {
				r.doomed = append(r.doomed, copyKey{t.Stream, t.Incarnation})
			}
		}
		for _, f := range r.failures {
			if state.Deleted(f.Stream, f.Incarnation) {
				r.doomed = append(r.doomed, copyKey{f.Stream, f.Incarnation})
			}
		}
	})
	if err != nil {
		return
	}
	for _, k := range r.doomed {
		r.mu.Lock()
		busy := r.pending[k]
		r.pending[k] = true
		r.mu.Unlock()
		if busy {
			continue
		}
		r.n.log.Info("deleting the copy of a deleted stream", "stream", k.stream, "incarnation", k.incarnation)
		err := r.n.streams.DeleteIncarnation(k.stream, k.incarnation, func(err error) { r.done(k, err) })
		if err != nil {
			r.done(k, err)
		}
	}
}

// done hears a delete's outcome (on the copy's shard goroutine).
func (r *reaper) done(k copyKey, err error) {
	r.mu.Lock()
	delete(r.pending, k)
	if err == nil {
		r.deleted++
	}
	r.mu.Unlock()
	if err != nil {
		r.n.log.Warn("copy of a deleted stream not deleted", "stream", k.stream, "incarnation", k.incarnation, "err", err)
		return
	}
	r.n.log.Info("copy of a deleted stream deleted", "stream", k.stream, "incarnation", k.incarnation)
}

// Deleted is the number of copies of deleted streams this node deleted.
func (r *reaper) Deleted() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.deleted
}
