package streamsim

import (
	"slices"

	"github.com/ringstream/ringstream/engine/meta"
)

// forceRefused is the BatchCommitsAll variant's metadata group: every entry of a batch op that was
// refused (by a guard or a check) takes effect anyway, as decided, and the controller hears it did:
// the meta a batch apply that looked at one entry's guards and committed them all would be. meta
// exports no seam to skip a guard, so the variant is made with real ops: a refused record replaces
// the stream's recovery (withdrawing a pending one); a refused commit or assignment records a
// recovery whose members are the entry's copies and has it accepted with the entry's owner (and, for
// a commit, the entry's tails as the history start), which moves the stream as the entry decided,
// with no guard and no check.
func (m *metaGroup) forceRefused(s *Sim, op meta.Op, r meta.Result) meta.Result {
	r.Entries = slices.Clone(r.Entries)
	for i, e := range r.Entries {
		if e.OK() {
			continue
		}
		var forced meta.Result
		switch o := op.(type) {
		case meta.CommitRecoveries:
			c := o.Entries[i]
			forced = m.forceMove(c.Stream, c.Owner, c.Sealed, nil, true, c.RecordTail, c.CursorTail)
		case meta.RecordRecoveries:
			forced = m.forceRecord(o.Entries[i])
		case meta.SetAssignments:
			a := o.Entries[i]
			members := append([]uint16{a.Owner}, a.Followers...)
			slices.Sort(members)
			forced = m.forceMove(a.Stream, a.Owner, members, &a.Policy, false, 0, 0)
		}
		s.logf("batch commits all: stream %d entry refused (%s), forced: %s", e.Stream, e.Code, forced)
		if forced.OK() {
			r.Entries[i].Code = meta.ResultOK
		}
	}
	return r
}

// forceMove moves stream to owner with the other members as followers at the next epoch, without a
// seal: a recovery replacing any recorded one, accepted at once.
func (m *metaGroup) forceMove(stream uint64, owner uint16, members []uint16, policy *meta.Policy, published bool,
	record, cursor uint64) meta.Result {
	st, ok := m.state.StreamByID(stream)
	if !ok {
		return meta.Result{Code: meta.ResultStreamNotFound}
	}
	a, _ := m.state.Assignment(stream)
	p := a.Policy
	if policy != nil {
		p = *policy
	}
	r := m.forceRecord(meta.RecordRecovery{Stream: stream, Incarnation: st.Incarnation, ExpectedEpoch: a.Epoch,
		ProposedOwner: owner, Members: members, Policy: p, Reason: meta.ReasonOperator})
	if !r.OK() {
		return r
	}
	rec, _ := m.state.RecoveryOf(stream)
	return m.apply(meta.AcceptOwnerLoss{Stream: stream, Incarnation: st.Incarnation, Recovery: rec.ID, Owner: owner,
		TailsPublished: published, RecordTail: record, CursorTail: cursor})
}

func (m *metaGroup) forceRecord(o meta.RecordRecovery) meta.Result {
	st, ok := m.state.StreamByID(o.Stream)
	if !ok {
		return meta.Result{Code: meta.ResultStreamNotFound}
	}
	a, _ := m.state.Assignment(o.Stream)
	o.Incarnation, o.ExpectedEpoch, o.Replaces = st.Incarnation, a.Epoch, 0
	if rec, has := m.state.RecoveryOf(o.Stream); has {
		if rec.Status == meta.RecoveryPending {
			if r := m.apply(meta.WithdrawRecovery{Stream: o.Stream, Incarnation: st.Incarnation, Recovery: rec.ID}); !r.OK() {
				return r
			}
		}
		o.Replaces = rec.ID
	}
	return m.apply(o)
}
