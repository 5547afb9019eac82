package meta

import (
	"fmt"
	"slices"

	"github.com/ringstream/ringstream/internal/assert"
)

// applyCommitRecovery is the one guarded write that ends a sealed recovery (stream-failover spec,
// "One guarded consensus write commits the new assignment, clears the pending recovery and appends
// where the new owner's history starts").
func (s *State) applyCommitRecovery(o CommitRecovery) Result {
	e, r, ok := s.liveStream(o.Stream, o.Incarnation)
	if !ok {
		return r
	}
	if r, ok := checkPendingRecovery(e, o.Recovery); !ok {
		return r
	}
	if r, ok := checkEpoch(e, o.ExpectedEpoch); !ok {
		return r
	}
	if e.starts.Version != o.ExpectedStartsVersion {
		return refuse(ResultStartsVersionMismatch, "stream %d history starts are at version %d, op expects %d",
			o.Stream, e.starts.Version, o.ExpectedStartsVersion)
	}
	old := e.assignment
	assert.True(old.Epoch == e.recovery.FromEpoch, "meta: assignment moved under a recorded recovery")
	for _, n := range o.Sealed {
		if !old.Includes(n) {
			return refuse(ResultSealedNotCopy, "sealed node %d holds no copy of stream %d at epoch %d",
				n, o.Stream, old.Epoch)
		}
	}
	if len(o.Sealed) < int(e.recovery.SealThreshold) {
		return refuse(ResultTooFewSealed, "stream %d: %d sealed copies, recovery %d needs %d",
			o.Stream, len(o.Sealed), o.Recovery, e.recovery.SealThreshold)
	}
	if start, ok := e.starts.Latest(); ok && o.RecordTail < start.RecordStart {
		return refuse(ResultBelowConfirmedPrefix,
			"stream %d: owner %d record tail %d is below the history start %d of epoch %d (node %d)",
			o.Stream, o.Owner, o.RecordTail, start.RecordStart, start.Epoch, start.Node)
	}
	followers := recoveredFollowers(o.Owner, o.Sealed, e.recovery.Members, old)
	if 1+len(followers) > CopiesMax {
		return refuse(ResultTooManyCopies, "stream %d: owner and %d followers exceed %d copies",
			o.Stream, len(followers), CopiesMax)
	}
	next := Assignment{Epoch: old.Epoch + 1, Owner: o.Owner, Followers: followers, Policy: e.recovery.Policy}
	e.assignment = next
	e.recovery, e.hasRecovery = Recovery{}, false
	e.appendStart(HistoryStart{Epoch: next.Epoch, RecordStart: o.RecordTail, CursorStart: o.CursorTail, Node: o.Owner})
	return done("recovery %d of stream %d committed: epoch %d, owner %d at records %d cursor events %d, %d followers",
		o.Recovery, o.Stream, next.Epoch, o.Owner, o.RecordTail, o.CursorTail, len(followers))
}

// recoveredFollowers is the follower set a sealed recovery commits: the sealed copies other than the
// new owner, and the proposed members that held no copy of the old assignment. Proposed members that
// held a copy but were not sealed stay out; they stay sealed until a later assignment includes them.
func recoveredFollowers(owner uint16, sealed, proposed []uint16, old Assignment) []uint16 {
	followers := make([]uint16, 0, len(sealed)+len(proposed))
	for _, n := range sealed {
		if n != owner {
			followers = append(followers, n)
		}
	}
	for _, n := range proposed {
		if n != owner && !old.Includes(n) {
			followers = append(followers, n)
		}
	}
	slices.Sort(followers)
	return slices.Compact(followers)
}

// applyAcceptOwnerLoss moves a stream without a seal, on an operator's word (stream-failover spec,
// known limits: the start recorded is the new owner's tails as last published in its heartbeats, or
// none when it published none).
func (s *State) applyAcceptOwnerLoss(o AcceptOwnerLoss) Result {
	e, r, ok := s.liveStream(o.Stream, o.Incarnation)
	if !ok {
		return r
	}
	if r, ok := checkPendingRecovery(e, o.Recovery); !ok {
		return r
	}
	if !slices.Contains(e.recovery.Members, o.Owner) {
		return refuse(ResultOwnerNotProposedMember, "node %d is not a proposed member of recovery %d",
			o.Owner, o.Recovery)
	}
	old := e.assignment
	assert.True(old.Epoch == e.recovery.FromEpoch, "meta: assignment moved under a recorded recovery")
	followers := make([]uint16, 0, len(e.recovery.Members))
	for _, n := range e.recovery.Members {
		if n != o.Owner {
			followers = append(followers, n)
		}
	}
	next := Assignment{Epoch: old.Epoch + 1, Owner: o.Owner, Followers: followers, Policy: e.recovery.Policy}
	e.assignment = next
	e.recovery, e.hasRecovery = Recovery{}, false
	if !o.TailsPublished {
		return Result{Code: ResultOKNoStart, Message: fmt.Sprintf(
			"owner loss of stream %d accepted: epoch %d, owner %d; no history start recorded, "+
				"the owner published no tails", o.Stream, next.Epoch, o.Owner)}
	}
	latest, hadStart := e.starts.Latest()
	e.appendStart(HistoryStart{Epoch: next.Epoch, RecordStart: o.RecordTail, CursorStart: o.CursorTail, Node: o.Owner})
	if hadStart && o.RecordTail < latest.RecordStart {
		return done("owner loss of stream %d accepted: epoch %d, owner %d at published records %d; "+
			"warning: below the confirmed prefix %d of epoch %d, confirmed records may be lost",
			o.Stream, next.Epoch, o.Owner, o.RecordTail, latest.RecordStart, latest.Epoch)
	}
	return done("owner loss of stream %d accepted: epoch %d, owner %d at published records %d cursor events %d",
		o.Stream, next.Epoch, o.Owner, o.RecordTail, o.CursorTail)
}

// appendStart records where a new owner's history begins and bumps the starts version.
func (e *streamEntry) appendStart(start HistoryStart) {
	if latest, ok := e.starts.Latest(); ok {
		assert.True(start.Epoch > latest.Epoch, "meta: history start epochs must grow")
	}
	e.starts.List = append(e.starts.List, start)
	e.starts.Version++
}
