package streamhost

import (
	"cmp"
	"errors"
	"fmt"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/ringstream/ringstream/engine/stream"
	"github.com/ringstream/ringstream/segment"
	"github.com/ringstream/ringstream/shard"
	"github.com/ringstream/ringstream/wire"
)

// Cause names why a copy's storage failed (Failure.Cause, the metric's label).
type Cause uint8

const (
	CauseOther    Cause = iota // an error not named below
	CauseNoSpace               // ENOSPC or EDQUOT: the file system is full
	CauseIO                    // EIO: the disk failed an operation
	CauseReadOnly              // EROFS: the file system went read-only
	CauseCorrupt               // bytes on disk are not what segment wrote (checksum, format, order)
	CauseRefused               // segment refused what the copy asked (their states disagree)
	CauseCount                 // the number of causes
)

var causeNames = [CauseCount]string{"other", "enospc", "eio", "erofs", "corrupt", "refused"}

func (c Cause) String() string {
	if c < CauseCount {
		return causeNames[c]
	}
	return fmt.Sprintf("cause(%d)", uint8(c))
}

// CauseOf classifies a storage error.
func CauseOf(err error) Cause {
	switch {
	case errors.Is(err, unix.ENOSPC), errors.Is(err, unix.EDQUOT):
		return CauseNoSpace
	case errors.Is(err, unix.EIO):
		return CauseIO
	case errors.Is(err, unix.EROFS):
		return CauseReadOnly
	case errors.Is(err, segment.ErrCorrupt), errors.Is(err, segment.ErrDigestMismatch),
		errors.Is(err, segment.ErrShortBatch), errors.Is(err, stream.ErrBatchOrder):
		return CauseCorrupt
	case errors.Is(err, segment.ErrEpochOrder), errors.Is(err, segment.ErrOffsetOrder),
		errors.Is(err, segment.ErrInvalidBatch), errors.Is(err, segment.ErrBelowHead),
		errors.Is(err, segment.ErrNotBoundary), errors.Is(err, segment.ErrFenced):
		return CauseRefused
	}
	return CauseOther
}

// errnoOf is the errno err wraps, or 0.
func errnoOf(err error) unix.Errno {
	var e unix.Errno
	if errors.As(err, &e) {
		return e
	}
	return 0
}

// healWork is a copy whose storage failed: it is closed, then reopened through recovery (segment's
// open, torn tail cut) after a backoff, and serves again in the role its assignment gives it.
type healWork struct {
	active    bool
	closeWait bool // its close waits for another rare operation to end (Done and OnTick try again)
	cause     Cause
	err       error
	role      stream.Role // the role it had when it failed
	auto      bool        // reopened by itself; false: corrupt data waits for an operator (RetryCopy)
	attempts  int         // reopens tried since it failed
	backoff   uint64      // ticks between the last attempt and the next
	retryAt   uint64      // tick of the next reopen; 0: none armed
}

// healsByItself says whether a reopen may end the failure err: not for corrupt data, nor for a cut
// below the retained head (the spec's emptied copy is not built), which reopening repeats.
func healsByItself(err error) bool {
	return CauseOf(err) != CauseCorrupt && !errors.Is(err, segment.ErrBelowHead)
}

// healBaseTicks and healMaxTicks are the first wait before a failed copy's reopen and its bound; the
// wait doubles after each reopen that fails, and after each failure that comes back within
// healMaxTicks of a heal (a full disk that an open does not notice).
func (h *Host) healBaseTicks() uint64 { return h.cfg.HealBaseTicks }
func (h *Host) healMaxTicks() uint64  { return h.cfg.HealMaxTicks }

// storageFailed takes a failure of the copy's storage while it serves or applies an assignment: a
// log's write, fsync or reopen, a refused append or log epoch, a seal's fence or digest, a cut, a
// read that failed with EIO. The protocol copy is told at once (LogFailed: an owner refuses what
// waits and confirms nothing more, since its own durable tail caps the confirmed tail and no longer
// moves), the failure is reported (Status, the metric, one ERROR line), and once the Ready with the
// refusals went out (carryOut) the storage is closed and reopened later (heal).
func (cg *copyGroup) storageFailed(err error) {
	if cg.fail.active {
		return
	}
	cg.failed(ErrLogFailed, err)
	if cg.c != nil && cg.state == stateServing {
		cg.c.LogFailed(wire.LogRecords)
		cg.h.markDirty(cg) // carryOut sends the refusals, then closes the storage
		return
	}
	cg.closeForHeal()
}

// failed starts the failure state and reports it.
func (cg *copyGroup) failed(kind, err error) {
	cg.wake()
	h := cg.h.h
	backoff := h.healBaseTicks()
	if cg.healedAt != 0 && cg.h.tick-cg.healedAt < h.healMaxTicks() {
		backoff = min(2*cg.lastBackoff, h.healMaxTicks()) // it failed again soon after a heal
	}
	cg.fail = healWork{active: true, err: fmt.Errorf("%w: %w", kind, err), cause: CauseOf(err), backoff: backoff}
	cg.fail.auto = healsByItself(err)
	if cg.c != nil {
		cg.fail.role = cg.c.Role()
	}
	h.copyFailed(cg)
}

// closeForHeal closes the failed copy's storage (segment.Copy.Close waits for its operations), or
// waits for the rare operation running to end first. The copy is offline from here on: the shard
// sends no Commit for it, so an owner's followers and the controller see it gone.
func (cg *copyGroup) closeForHeal() {
	cg.c = nil
	cg.epochWait = false
	cg.readWait = nil // the protocol copy that asked for them is gone
	cg.releaseHeld()
	cg.fail.closeWait = false
	if cg.seg == nil {
		cg.state = stateFailed
		cg.armRetry()
		return
	}
	switch err := cg.seg.Close(tagClose); {
	case err == nil:
		cg.state = stateClosing
	case errors.Is(err, segment.ErrBusy):
		cg.state = stateClosing // offline; Done of the operation running, or OnTick, closes it
		cg.fail.closeWait = true
	default: // closed already
		cg.state = stateFailed
		cg.armRetry()
	}
}

// releaseHeld drops an owner's encoded appends: they will never be reported durable.
func (cg *copyGroup) releaseHeld() {
	for i, b := range cg.held {
		cg.h.pool.unref(b)
		cg.held[i] = nil
	}
	cg.held = cg.held[:0]
}

// armRetry schedules the next reopen of a failed copy (unless it waits for an operator) and
// publishes its state.
func (cg *copyGroup) armRetry() {
	f := &cg.fail
	f.retryAt = 0
	if f.auto {
		f.retryAt = cg.h.tick + f.backoff
	}
	cg.h.h.setFailure(cg)
}

// healTick moves a failed copy on at each tick: a close that waited, a reopen that is due.
func (cg *copyGroup) healTick(tick uint64) {
	f := &cg.fail
	switch {
	case f.closeWait:
		cg.closeForHeal()
	case cg.state == stateFailed && f.retryAt != 0 && tick >= f.retryAt && !cg.h.stopping:
		cg.reopenForHeal()
	}
}

// reopenForHeal opens the copy's storage again through recovery (segment.Open: its torn tail cut);
// Done(OpOpen) goes on as at boot, and openDone ends the failure.
func (cg *copyGroup) reopenForHeal() {
	f := &cg.fail
	f.attempts++
	f.retryAt = 0
	cg.h.h.healAttempts.Add(1)
	cg.state = stateOpening
	seg, err := segment.Open(cg.h.jobs, cg.h.send.Ring(), cg.dir, cg.h.h.cfg.Segment, cg, tagOpen)
	if err != nil {
		cg.healAttemptFailed(err)
		return
	}
	cg.seg = seg
}

// healAttemptFailed: the reopen failed (its open, its scan, its cut): the wait doubles, bounded.
func (cg *copyGroup) healAttemptFailed(err error) {
	f := &cg.fail
	f.err, f.cause = fmt.Errorf("%w: %w", ErrLogFailed, err), CauseOf(err)
	f.auto = f.auto && healsByItself(err)
	f.backoff = min(2*f.backoff, cg.h.h.healMaxTicks())
	cg.state = stateFailed
	cg.armRetry()
	cg.h.h.log.Warn("streamhost: reopen of a failed copy failed", "stream", cg.spec.Stream, "incarnation", cg.spec.Incarnation,
		"attempt", f.attempts, "cause", f.cause.String(), "errno", errnoOf(err), "retry_in_ticks", f.retryAt-min(f.retryAt, cg.h.tick),
		"err", err)
}

// healed ends the failure once the reopened copy serves (openDone).
func (cg *copyGroup) healed() {
	if !cg.fail.active {
		return
	}
	attempts := cg.fail.attempts
	cg.lastBackoff, cg.healedAt = cg.fail.backoff, max(cg.h.tick, 1)
	cg.fail = healWork{}
	cg.h.h.copyHealed(cg, attempts)
}

// retryNow is the operator's retry (Host.RetryCopy): a failed copy reopens at once, corrupt or not.
func (cg *copyGroup) retryNow() error {
	f := &cg.fail
	if !f.active {
		return fmt.Errorf("%w: %d", ErrNotFailed, cg.spec.Stream)
	}
	f.backoff = cg.h.h.healBaseTicks()
	switch cg.state {
	case stateFailed:
		cg.reopenForHeal()
	default: // closing, or an attempt runs: reopen as soon as the copy is closed
		f.retryAt = max(cg.h.tick, 1)
	}
	return nil
}

// RetryCopy reopens the failed copy of streamID at once (the operator's retry, for a corrupt copy
// too, after a repair). done hears, on the shard goroutine, nil once the reopen started (its outcome
// shows in Status), ErrUnknownStream or ErrNotFailed.
func (h *Host) RetryCopy(streamID uint64, done func(error)) error {
	i := shard.ShardOf(streamID, len(h.shards))
	return h.node.Run(i, func(*shard.Shard) {
		cg := h.shards[i].copies[streamID]
		if cg == nil {
			done(fmt.Errorf("%w: %d", ErrUnknownStream, streamID))
			return
		}
		done(cg.retryNow())
	})
}

// HealStats counts the node's storage failures and heals (for the metrics).
type HealStats struct {
	Failures [CauseCount]uint64 // copies whose storage failed, by Cause
	Attempts uint64             // reopens of failed copies tried
	Healed   uint64             // failed copies that reopened and serve again
}

// HealStats returns the node's counts. Safe from any goroutine.
func (h *Host) HealStats() HealStats {
	var s HealStats
	for i := range s.Failures {
		s.Failures[i] = h.failCounts[i].Load()
	}
	s.Attempts, s.Healed = h.healAttempts.Load(), h.heals.Load()
	return s
}

// copyFailed reports a copy's new failure: one ERROR line naming the copy, its directory, the cause,
// the errno and the error (which names the file), the count by cause, and its entry in Status.
func (h *Host) copyFailed(cg *copyGroup) {
	f := &cg.fail
	heal := "reopened by itself after a backoff"
	if !f.auto {
		heal = "waits for an operator: POST /v1/copies/{stream}/retry after a repair, or delete"
	}
	h.log.Error("streamhost: copy's storage failed", "stream", cg.spec.Stream, "incarnation", cg.spec.Incarnation,
		"dir", cg.dir, "role", f.role.String(), "cause", f.cause.String(), "errno", errnoOf(f.err), "heal", heal, "err", f.err)
	h.failCounts[f.cause].Add(1)
	h.setFailure(cg)
}

// setFailure lists (or updates) the copy's entry in Status.
func (h *Host) setFailure(cg *copyGroup) {
	f := &cg.fail
	e := Failure{Stream: cg.spec.Stream, Incarnation: cg.spec.Incarnation, Dir: cg.dir, Err: f.err, Cause: f.cause,
		Retrying: f.auto, Attempts: f.attempts, Role: f.role, Epoch: cg.spec.Assignment.Epoch}
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := range h.failures {
		if h.failures[i].Stream == e.Stream && h.failures[i].Incarnation == e.Incarnation {
			h.failures[i] = e
			return
		}
	}
	h.failures = append(h.failures, e)
	slices.SortFunc(h.failures, func(a, b Failure) int { return cmp.Compare(a.Stream, b.Stream) })
}

// clearFailure takes the copy's entry out of Status.
func (h *Host) clearFailure(streamID uint64, incarnation uint32) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.failures = slices.DeleteFunc(h.failures, func(f Failure) bool {
		return f.Stream == streamID && f.Incarnation == incarnation
	})
}

// copyHealed reports a failed copy that serves again.
func (h *Host) copyHealed(cg *copyGroup, attempts int) {
	h.heals.Add(1)
	h.clearFailure(cg.spec.Stream, cg.spec.Incarnation)
	h.log.Info("streamhost: failed copy reopened and serves again", "stream", cg.spec.Stream,
		"incarnation", cg.spec.Incarnation, "attempts", attempts)
}
