package control

import (
	"cmp"
	"slices"

	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/wire"
)

// reconcile looks at every stream against the current state and node liveness: it starts or resumes
// the recovery worker of each pending recovery, replaces withdrawn recoveries, records a recovery for
// each replicated stream whose owner is lost, and proposes the changes that need no recovery
// (replacement followers, the cluster policy).
func (c *Controller) reconcile() {
	c.dirty = false
	c.gen++
	c.syncNodes()
	streams := c.state.Streams()
	c.countLoad(streams)
	c.updateDeliveries(streams)
	for _, st := range streams {
		c.reconcileStream(st)
	}
	kept := c.works[:0]
	for _, w := range c.works {
		if w.gen == c.gen {
			kept = append(kept, w)
		}
	}
	clear(c.works[len(kept):])
	c.works = kept
}

func (c *Controller) reconcileStream(st meta.Stream) {
	a, ok := c.state.Assignment(st.ID)
	if !ok {
		return
	}
	if rec, ok := c.state.RecoveryOf(st.ID); ok {
		if rec.Status == meta.RecoveryWithdrawn {
			// A withdrawn recovery is followed by a replacement before any assignment change.
			c.proposeRecovery(st, a, rec.ID, meta.ReasonOperator)
			return
		}
		c.resumeWork(st, a, rec)
		return
	}
	owner := c.node(a.Owner)
	if owner != nil && owner.alive() && c.ownerRestarted(st, a, owner) {
		// One copy or more: even a lone copy is sealed and promoted at a new epoch, which is what
		// lets it serve again.
		c.proposeRecovery(st, a, 0, meta.ReasonOwnerRestarted)
		return
	}
	if owner != nil && owner.alive() {
		if _, failed := owner.logFailed(st.ID, st.Incarnation); failed && a.Copies() > 1 {
			// The owner confirms nothing more: failed over as a lost owner. A lone copy has nothing to
			// fail over to; it waits for its log to heal (attention).
			c.proposeRecovery(st, a, 0, meta.ReasonOwnerLogFailed)
			return
		}
	}
	if owner == nil || owner.alive() {
		c.proposePlacement(st, a)
		return
	}
	if a.Copies() == 1 {
		// Nothing else holds the stream: it waits for its node (listed under attention).
		return
	}
	c.proposeRecovery(st, a, 0, owner.lostReason)
}

// ownerRestarted reports whether a's owner published that its copy reopened within its own epoch
// (wire.CopyOwnerRestarted) and no recovery has sealed it since. A copy flags the epoch it reopened in,
// which is below a's when a change without recovery (a follower addition) came after: the copy does not
// apply that change as owner, so the flag still counts unless a recovery chose the owner of a's epoch
// (a history start at a's epoch, whose seal released the flag).
func (c *Controller) ownerRestarted(st meta.Stream, a meta.Assignment, owner *nodeView) bool {
	t, ok := owner.tail(st.ID, st.Incarnation)
	if !ok || t.Role != wire.RoleOwner || t.Flags&wire.CopyOwnerRestarted == 0 || t.Epoch > a.Epoch {
		return false
	}
	if t.Epoch == a.Epoch {
		return true
	}
	latest, ok := c.state.LatestStart(st.ID)
	return !ok || latest.Epoch < a.Epoch
}

// proposeRecovery records a pending recovery of a's owner instead of moving the stream at once
// (replacing the withdrawn recovery replaces, when not 0). The proposed members are the old
// followers, the old owner if it is alive, and replacement followers on live nodes up to the
// stream's copy count; a copy whose log failed is not among them (it is replaced, and rejoins once
// it heals), nor is a replacement placed on a node whose copy of the stream failed. The proposed
// owner is the live old follower with the furthest published tails; the worker chooses the real one
// from the seal answers.
func (c *Controller) proposeRecovery(st meta.Stream, a meta.Assignment, replaces uint64, reason meta.RecoveryReason) {
	if c.proposing(st.ID) {
		return
	}
	members := slices.DeleteFunc(slices.Clone(a.Followers), func(n uint16) bool {
		_, failed := c.logFailed(n, st.ID, st.Incarnation)
		return failed
	})
	if c.healthy(a.Owner, st.ID, st.Incarnation) {
		members = append(members, a.Owner)
	}
	if len(members) == 0 {
		members = append(members, a.Owner)
	}
	exclude := append(append(slices.Clone(a.Followers), a.Owner), c.failedNodes(st)...)
	members = append(members, c.place(int(st.Copies)-len(members), exclude)...)
	slices.Sort(members)
	members = members[:min(len(members), meta.CopiesMax)]
	c.propose(st.ID, meta.RecordRecovery{
		Stream:        st.ID,
		Incarnation:   st.Incarnation,
		ExpectedEpoch: a.Epoch,
		Replaces:      replaces,
		ProposedOwner: c.furthestPublished(st, a, members),
		Members:       members,
		Policy:        c.cfg.AssignmentPolicy,
		Reason:        reason,
	})
}

// furthestPublished picks, among the members that held a copy of a, the live one whose published
// tails are furthest (record tail, then cursor tail, then lowest id); failing that, the first old
// copy among the members; failing that, the first member.
func (c *Controller) furthestPublished(st meta.Stream, a meta.Assignment, members []uint16) uint16 {
	best, found := uint16(0), false
	var bestRecord, bestCursor uint64
	for _, m := range members {
		n := c.node(m)
		if !a.Includes(m) || n == nil || !n.alive() {
			continue
		}
		var rec, cur uint64
		if t, ok := n.tail(st.ID, st.Incarnation); ok {
			rec, cur = t.RecordTail, t.CursorTail
		}
		if !found || rec > bestRecord || rec == bestRecord && cur > bestCursor {
			best, bestRecord, bestCursor, found = m, rec, cur, true
		}
	}
	if found {
		return best
	}
	for _, m := range members {
		if a.Includes(m) {
			return m
		}
	}
	return members[0]
}

// proposePlacement proposes the change that needs no recovery for a stream whose owner is alive:
// replacement followers on live nodes up to the stream's copy count, and the cluster policy stamped
// on a replicated assignment. It proposes only what meta.NeedsNoRecovery allows (no dropped copy, W
// not growing). Additions that would raise W (local_durable, or a stream shrunk to one copy) go
// through a recovery with reason placement, whose members include the new copies.
func (c *Controller) proposePlacement(st meta.Stream, a meta.Assignment) {
	if c.proposing(st.ID) {
		return
	}
	if c.replaceFailedFollowers(st, a) {
		return
	}
	var added []uint16
	if need := int(st.Copies) - a.Copies(); need > 0 {
		added = c.place(need, append(append(slices.Clone(a.Followers), a.Owner), c.failedNodes(st)...))
	}
	next := a
	next.Followers = append(slices.Clone(a.Followers), added...)
	slices.Sort(next.Followers)
	stamp := func(x meta.Assignment) meta.Assignment {
		if x.Copies() > 1 {
			x.Policy = c.cfg.AssignmentPolicy
		}
		return x
	}
	for _, cand := range []meta.Assignment{stamp(next), stamp(a)} {
		if sameAssignment(cand, a) {
			continue
		}
		if _, ok := meta.NeedsNoRecovery(a, cand); !ok {
			continue
		}
		c.propose(st.ID, meta.SetAssignment{Stream: st.ID, Incarnation: st.Incarnation, ExpectedEpoch: a.Epoch,
			Owner: cand.Owner, Followers: cand.Followers, Policy: cand.Policy})
		return
	}
	if len(added) == 0 {
		return
	}
	members := append(append(slices.Clone(a.Followers), a.Owner), added...)
	slices.Sort(members)
	c.propose(st.ID, meta.RecordRecovery{
		Stream:        st.ID,
		Incarnation:   st.Incarnation,
		ExpectedEpoch: a.Epoch,
		ProposedOwner: a.Owner,
		Members:       members,
		Policy:        c.cfg.AssignmentPolicy,
		Reason:        meta.ReasonPlacement,
	})
}

// replaceFailedFollowers takes the followers whose logs failed out of a stream whose owner is alive
// and healthy, through a recovery with reason placement whose members are the owner, the healthy
// followers and replacements on other live nodes up to the stream's copy count. It reports whether
// it proposed one. It does so only when the healthy copies (the owner among them) reach the seal
// threshold R of the assignment, so that the recovery commits without the failed copies' answers;
// otherwise the stream keeps its assignment (it confirms while W healthy copies hold, and a failed
// copy that heals catches up in place).
//
// Why take a failed follower out rather than keep it: a copy that cannot fence or answer a seal
// counts for nothing when the owner is lost next, and with it in the assignment that recovery needs
// R answers among fewer copies that can give one (E = 3, W = 2: R = 2, so the one healthy follower
// waits for the old owner to come back). Without it (E = 2, W = 2: R = 1) the healthy follower alone
// is a valid seal set. W does not change for majority_durable (3 copies and 2 confirm alike), so
// nothing confirms on fewer copies than before; under local_durable W follows E, and a stream that
// could confirm nothing while a copy of its every-copy set was broken confirms on the others. The
// cost is one seal round trip that fences the owner.
func (c *Controller) replaceFailedFollowers(st meta.Stream, a meta.Assignment) bool {
	members := []uint16{a.Owner} // alive; a failed owner was failed over before placement is looked at
	dropped := false
	for _, f := range a.Followers {
		if _, failed := c.logFailed(f, st.ID, st.Incarnation); failed {
			dropped = true
			continue
		}
		members = append(members, f)
	}
	if !dropped {
		return false
	}
	healthy := 0
	for _, m := range members {
		if c.healthy(m, st.ID, st.Incarnation) {
			healthy++
		}
	}
	if healthy < a.SealThreshold() {
		return false
	}
	exclude := append(append(slices.Clone(a.Followers), a.Owner), c.failedNodes(st)...)
	members = append(members, c.place(int(st.Copies)-len(members), exclude)...)
	slices.Sort(members)
	c.propose(st.ID, meta.RecordRecovery{
		Stream:        st.ID,
		Incarnation:   st.Incarnation,
		ExpectedEpoch: a.Epoch,
		ProposedOwner: a.Owner,
		Members:       members,
		Policy:        c.cfg.AssignmentPolicy,
		Reason:        meta.ReasonPlacement,
	})
	return true
}

// failedNodes lists the nodes whose last heartbeat flags their copy of st as failed: no new copy of
// st is placed there until it heals.
func (c *Controller) failedNodes(st meta.Stream) []uint16 {
	var out []uint16
	for i := range c.nodes {
		if _, failed := c.nodes[i].logFailed(st.ID, st.Incarnation); failed {
			out = append(out, c.nodes[i].id)
		}
	}
	return out
}

func sameAssignment(x, y meta.Assignment) bool {
	return x.Owner == y.Owner && x.Policy == y.Policy && slices.Equal(x.Followers, y.Followers)
}

// place chooses up to need live nodes that have been heard from since this controller became primary
// and are not in exclude: fewest copies held first, then lowest id. It counts the chosen copies in the
// load, so streams placed in one pass spread out.
func (c *Controller) place(need int, exclude []uint16) []uint16 {
	if need <= 0 {
		return nil
	}
	var cands []int
	for i := range c.nodes {
		n := &c.nodes[i]
		if n.alive() && n.heard && !slices.Contains(exclude, n.id) {
			cands = append(cands, i)
		}
	}
	slices.SortFunc(cands, func(x, y int) int {
		return cmp.Or(cmp.Compare(c.load[x], c.load[y]), cmp.Compare(c.nodes[x].id, c.nodes[y].id))
	})
	out := make([]uint16, 0, min(need, len(cands)))
	for _, i := range cands[:min(need, len(cands))] {
		out = append(out, c.nodes[i].id)
		c.load[i]++
	}
	slices.Sort(out)
	return out
}

// countLoad fills load with the number of copies each node holds under the current assignments.
func (c *Controller) countLoad(streams []meta.Stream) {
	c.load = append(c.load[:0], make([]int, len(c.nodes))...)
	for _, st := range streams {
		a, _ := c.state.Assignment(st.ID)
		for i := range c.nodes {
			if a.Includes(c.nodes[i].id) {
				c.load[i]++
			}
		}
	}
}
