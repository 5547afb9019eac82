package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/ringstream/ringstream/engine/adminapi"
	"github.com/ringstream/ringstream/localcluster"
)

// faultWait bounds each watcher of a fault (new assignment, catch-up) past the end of load.
const faultWait = 30 * time.Second

// resumeGrace is how long after a SIGCONT the bench still looks for the failover of a pause: a
// recovery the controller started while the owner was stopped may commit its assignment just after.
const resumeGrace = 3 * time.Second

// faults carries out the run's faults on the first stream and measures what they open.
type faults struct {
	r      *run
	stream string
	wg     sync.WaitGroup

	mu         sync.Mutex
	failures   []string
	gap        *watch
	stall      *watch
	assignMs   *float64
	catchUpMs  *float64
	killedNode uint16 // the old owner, once restarted (or resumed after a failover): checked for its rejoin
	returnedBy string // how it came back: "restart" or "resume"
	failEpoch  uint32 // the epoch of the assignment after the owner kill
	failOwner  uint16 // the owner it named
	ctlNode    uint16 // the active controller's node just before the old owner's restart
	ctlSeals   uint64 // the seals it had started then
	ctlKnown   bool
	restarted  bool
}

// schedule starts a goroutine per fault, each waiting for its time since start.
func (f *faults) schedule(ctx context.Context, start time.Time) {
	c := f.r.cfg
	at := func(s float64, name string, do func(context.Context)) {
		if s <= 0 {
			return
		}
		f.wg.Go(func() {
			t := time.NewTimer(time.Until(start.Add(secs(s))))
			defer t.Stop()
			select {
			case <-t.C:
				do(ctx)
			case <-ctx.Done():
				f.fail("%s at %.1f s: not carried out: %v", name, s, context.Cause(ctx))
			}
		})
	}
	at(c.KillOwnerAt, "owner kill", f.killOwner)
	at(c.KillFollowerAt, "follower kill", f.killFollower)
	at(c.KillNodeAt, "node kill", func(ctx context.Context) { f.killAndRestart(ctx, c.KillNode, "node") })
	at(c.PauseOwnerAt, "owner pause", f.pauseOwner)
	if c.Script != nil {
		f.wg.Go(func() { c.Script(ctx, Controls{f: f}) })
	}
}

// Controls is what a Config.Script may do during the load: act on the local cluster's nodes, read
// the first stream's metadata, mark events on the report and fail the run.
type Controls struct{ f *faults }

// Cluster is the local cluster.
func (c Controls) Cluster() *localcluster.Cluster { return c.f.r.lc }

// Stream is the first stream as the cluster's metadata has it now.
func (c Controls) Stream(ctx context.Context) (adminapi.Stream, error) { return c.f.view(ctx) }

// Event marks an event on the report's timeline, now.
func (c Controls) Event(name string, node uint16, note string) {
	c.f.r.events.add(name, node, time.Now(), note)
}

// Fail fails the run with a reason.
func (c Controls) Fail(format string, args ...any) { c.f.fail(format, args...) }

// wait waits for every fault and its watchers.
func (f *faults) wait() { f.wg.Wait() }

func (f *faults) fail(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failures = append(f.failures, fmt.Sprintf(format, args...))
}

// view is the first stream as the metadata has it now.
func (f *faults) view(ctx context.Context) (adminapi.Stream, error) {
	return f.r.admin.streamView(ctx, f.r.liveAdmins(), f.stream)
}

// killOwner SIGKILLs the first stream's owner, measures the gap to the first confirmation at a newer
// epoch and the time to the new assignment, and restarts the node after --restart-after-secs.
func (f *faults) killOwner(ctx context.Context) {
	v, err := f.view(ctx)
	if err != nil || v.Owner == 0 {
		f.fail("owner kill: the stream has no owner to kill (%v)", err)
		return
	}
	now := time.Now()
	gap := f.r.watches.armKill(now, v.Epoch, f.stream, v.Owner, func(end time.Time) {
		f.r.events.add(EventFirstConfirm, 0, end, fmt.Sprintf("at a newer epoch than %d, after the kill", v.Epoch))
	})
	if err := f.r.lc.Kill(v.Owner); err != nil {
		f.fail("owner kill: %v", err)
		return
	}
	f.r.events.add(EventKill, v.Owner, now, fmt.Sprintf("%s%s at epoch %d", ownerKillNote, f.stream, v.Epoch))
	f.mu.Lock()
	f.gap = gap
	f.mu.Unlock()
	f.wg.Go(func() { f.watchAssignment(ctx, now, v.Owner, v.Epoch, faultWait) })
	f.restartLater(ctx, now, v.Owner, true)
}

// watchAssignment waits up to wait for the metadata to name another owner at a newer epoch; after an
// owner kill (wait faultWait) none is a failure.
func (f *faults) watchAssignment(ctx context.Context, killed time.Time, lost uint16, epoch uint32, wait time.Duration) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), wait)
	defer cancel()
	var got adminapi.Stream
	ok := pollUntil(ctx, func() bool {
		v, err := f.view(ctx)
		if err != nil || v.Owner == 0 || v.Owner == lost || v.Epoch <= epoch {
			return false
		}
		got = v
		return true
	})
	if !ok {
		if wait == faultWait {
			f.fail("owner kill: no new owner of %s within %v: the stream did not fail over", f.stream, faultWait)
		}
		return
	}
	now := time.Now()
	f.r.events.add(EventAssignment, got.Owner, now, fmt.Sprintf("epoch %d", got.Epoch))
	f.mu.Lock()
	f.assignMs = ptr(msSince(killed, now))
	f.failEpoch, f.failOwner = got.Epoch, got.Owner
	f.mu.Unlock()
}

// killFollower SIGKILLs a follower of the first stream and restarts it later.
func (f *faults) killFollower(ctx context.Context) {
	v, err := f.view(ctx)
	if err != nil || len(v.Followers) == 0 {
		f.fail("follower kill: the stream has no follower (%v)", err)
		return
	}
	f.killAndRestart(ctx, v.Followers[0], "follower")
}

// killAndRestart SIGKILLs node id and restarts it later.
func (f *faults) killAndRestart(ctx context.Context, id uint16, what string) {
	now := time.Now()
	if err := f.r.lc.Kill(id); err != nil {
		f.fail("%s kill: %v", what, err)
		return
	}
	f.r.events.add(EventKill, id, now, what)
	f.restartLater(ctx, now, id, false)
}

// restartLater restarts node id --restart-after-secs after killed, unless that is -1.
func (f *faults) restartLater(ctx context.Context, killed time.Time, id uint16, owner bool) {
	after := f.r.cfg.RestartAfter
	if after < 0 {
		return
	}
	f.wg.Go(func() {
		t := time.NewTimer(time.Until(killed.Add(secs(after))))
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		// The restart happens even after the end of load: the rejoin is part of what is checked.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), faultWait)
		defer cancel()
		target := f.catchUpTarget(rctx)
		if owner {
			ctl, seals, known := f.r.admin.controllerSeals(rctx, f.r.liveAdmins())
			f.mu.Lock()
			f.ctlNode, f.ctlSeals, f.ctlKnown = ctl, seals, known
			f.mu.Unlock()
		}
		now := time.Now()
		if err := f.r.lc.Restart(rctx, id); err != nil {
			f.fail("restart of node %d: %v", id, err)
			return
		}
		f.r.events.add(EventRestart, id, now, "")
		if owner {
			f.mu.Lock()
			f.killedNode, f.restarted, f.returnedBy = id, true, "restart"
			f.mu.Unlock()
		}
		f.watchCatchUp(rctx, now, id, target)
	})
}

// catchUpTarget is the first stream's confirmed tail on its owner now (0 if unknown).
func (f *faults) catchUpTarget(ctx context.Context) uint64 {
	v, err := f.view(ctx)
	if err != nil || v.Owner == 0 {
		return 0
	}
	n := f.r.lc.Node(v.Owner)
	if n == nil {
		return 0
	}
	c, ok, err := f.r.admin.copyOf(ctx, n.AdminAddr, v.ID)
	if err != nil || !ok {
		return 0
	}
	return c.Confirmed
}

// watchCatchUp waits until node id's copy of the first stream is durable up to target.
func (f *faults) watchCatchUp(ctx context.Context, restarted time.Time, id uint16, target uint64) {
	v, err := f.view(ctx)
	if err != nil {
		f.fail("catch-up of node %d: %v", id, err)
		return
	}
	addr := f.r.lc.Node(id).AdminAddr
	ok := pollUntil(ctx, func() bool {
		c, ok, err := f.r.admin.copyOf(ctx, addr, v.ID)
		return err == nil && ok && c.Durable >= target
	})
	if !ok {
		f.fail("node %d did not catch up to offset %d of %s within %v of its restart", id, target, f.stream, faultWait)
		return
	}
	now := time.Now()
	f.r.events.add(EventCaughtUp, id, now, fmt.Sprintf("durable tail >= %d", target))
	f.mu.Lock()
	f.catchUpMs = ptr(msSince(restarted, now))
	f.mu.Unlock()
}

// pauseOwner SIGSTOPs the first stream's owner and SIGCONTs it after --pause-for-secs; the stall is
// from the SIGSTOP to the first confirmation of a record appended after it. A failover while the
// owner is stopped is marked and timed, not required; when there was one (seen by the SIGCONT or
// within resumeGrace of it), the resumed old owner is checked like a restarted one: it catches up
// and rejoins as a follower without another recovery. While stopped, the owner's admin HTTP is left
// out of the bench's reads (it would answer nothing).
func (f *faults) pauseOwner(ctx context.Context) {
	v, err := f.view(ctx)
	if err != nil || v.Owner == 0 {
		f.fail("owner pause: the stream has no owner (%v)", err)
		return
	}
	now := time.Now()
	stall := f.r.watches.arm(now, 0, true, func(end time.Time) {
		f.r.events.add(EventFirstConfirm, 0, end, "of a record appended after the pause")
	})
	f.r.paused.Store(uint32(v.Owner))
	if err := f.r.lc.Pause(v.Owner); err != nil {
		f.r.paused.Store(0)
		f.fail("owner pause: %v", err)
		return
	}
	f.r.events.add(EventPause, v.Owner, now, fmt.Sprintf("SIGSTOP, owner of %s", f.stream))
	f.mu.Lock()
	f.stall = stall
	f.mu.Unlock()
	resumeAt := now.Add(secs(f.r.cfg.PauseFor))
	f.watchAssignment(ctx, now, v.Owner, v.Epoch, time.Until(resumeAt))
	sleepCtx(ctx, time.Until(resumeAt)) // the assignment may come early; the pause lasts its time
	// Past the end of load too: the node must not stay stopped, and its return is checked.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), faultWait)
	defer cancel()
	f.mu.Lock()
	failedOver := f.failEpoch != 0
	f.mu.Unlock()
	var target uint64
	if failedOver {
		target = f.catchUpTarget(rctx)
		ctl, seals, known := f.r.admin.controllerSeals(rctx, f.r.liveAdmins())
		f.mu.Lock()
		f.ctlNode, f.ctlSeals, f.ctlKnown = ctl, seals, known
		f.mu.Unlock()
	}
	resumed := time.Now()
	err = f.r.lc.Resume(v.Owner)
	f.r.paused.Store(0)
	if err != nil {
		f.fail("owner resume: %v", err)
		return
	}
	f.r.events.add(EventResume, v.Owner, resumed, "SIGCONT")
	if !failedOver {
		// A recovery started while the owner was stopped may commit just after the SIGCONT; its seals
		// are then not counted against the rejoin (the controller's count was not taken before it).
		f.watchAssignment(rctx, now, v.Owner, v.Epoch, resumeGrace)
		f.mu.Lock()
		failedOver = f.failEpoch != 0
		f.mu.Unlock()
		if !failedOver {
			return
		}
		target = f.catchUpTarget(rctx)
	}
	f.mu.Lock()
	f.killedNode, f.restarted, f.returnedBy = v.Owner, true, "resume"
	f.mu.Unlock()
	f.watchCatchUp(rctx, resumed, v.Owner, target)
}

// rejoined checks, after the faults, that the old owner, restarted after its kill or resumed after a
// pause that failed it over, rejoined as a follower without
// another recovery: the owner the failover chose still owns the stream with no recovery pending, the
// old owner's copy is a follower at the stream's current epoch (a follower's return moves the epoch
// without a recovery), and the active controller, if it is still the one that ran before the restart,
// started no seal since the restart (or resume). nil when no old owner came back after a failover.
func (f *faults) rejoined(ctx context.Context) *bool {
	f.mu.Lock()
	id, restarted, epoch, owner, by := f.killedNode, f.restarted, f.failEpoch, f.failOwner, f.returnedBy
	ctlNode, ctlSeals, ctlKnown := f.ctlNode, f.ctlSeals, f.ctlKnown
	f.mu.Unlock()
	if !restarted || epoch == 0 {
		return nil
	}
	v, err := f.view(ctx)
	if err != nil {
		f.fail("rejoin check: %v", err)
		return ptr(false)
	}
	c, ok, err := f.r.admin.copyOf(ctx, f.r.lc.Node(id).AdminAddr, v.ID)
	node, seals, known := f.r.admin.controllerSeals(ctx, f.r.liveAdmins())
	switch {
	case err != nil || !ok:
		f.fail("rejoin check: node %d has no open copy of %s (%v)", id, f.stream, err)
	case v.Owner != owner || v.Recovery != "":
		f.fail("rejoin check: %s is owned by node %d at epoch %d (recovery %q); the failover chose node %d at "+
			"epoch %d: another recovery ran", f.stream, v.Owner, v.Epoch, v.Recovery, owner, epoch)
	case c.Role != "follower" || c.Epoch != v.Epoch:
		f.fail("rejoin check: node %d's copy of %s is %s at epoch %d, want follower at the stream's epoch %d", id,
			f.stream, c.Role, c.Epoch, v.Epoch)
	case ctlKnown && known && node == ctlNode && seals != ctlSeals:
		f.fail("rejoin check: the controller on node %d started %d seals after the old owner's %s: another recovery ran",
			node, seals-ctlSeals, by)
	default:
		f.r.events.add(EventRejoined, id, time.Now(), fmt.Sprintf("follower at epoch %d (failover epoch %d)", v.Epoch, epoch))
		return ptr(true)
	}
	return ptr(false)
}
