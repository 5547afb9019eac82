package sim

import (
	"fmt"

	"github.com/ringstream/ringstream/wire"
)

// check runs every safety check on node n after a step.
func (s *Sim) check(n *node) error {
	r := n.replica
	r.CheckInvariants()
	if r.View() != n.view {
		n.view, n.viewAt = r.View(), s.now
	}
	// No two replicas commit different ops at one op number.
	for op := n.checked + 1; op <= r.Commit(); op++ {
		head, ok := r.Head(op)
		if !ok {
			continue // below the checkpoint this replica installed; its head is checked at the commit
		}
		if want, seen := s.committed[op]; seen && want != head {
			return s.violation("replica %d committed op %d with checksum %x, another replica %x", n.index, op,
				head, want)
		}
		s.committed[op] = head
	}
	if r.Commit() > n.checked {
		n.checked = r.Commit()
		if r.Commit() >= s.maxCommitted {
			s.maxCommitted = r.Commit()
			s.maxCommittedView = max(s.maxCommittedView, r.View())
		}
		s.stats.Committed = s.maxCommitted
	}
	if n.recovering && r.Normal() && !n.disk.saysRecovering() {
		n.recovering = false
		s.trace("r%d recovered: view=%d op=%d commit=%d", n.index, r.View(), r.Op(), r.Commit())
	}
	if err := s.checkDigest(n); err != nil {
		return err
	}
	if err := s.checkPrimary(n); err != nil {
		return err
	}
	return s.firstErr
}

// checkApplied: replicas that applied one op hold equal state machines right after it (checked
// inside Apply, so every op is compared, however many one step commits).
func (s *Sim) checkApplied(n *node, op, digest uint64) {
	if want, seen := s.opDigests[op]; seen && want != digest {
		if s.firstErr == nil {
			s.firstErr = s.violation("replica %d after applying op %d has state digest %x, another replica %x",
				n.index, op, digest, want)
		}
		return
	}
	s.opDigests[op] = digest
}

// checkDigest: replicas at one commit hold equal state, client table included. Compared at every
// commit a replica stops at between steps.
func (s *Sim) checkDigest(n *node) error {
	r := n.replica
	if n.digestAt == r.Commit()+1 {
		return nil
	}
	n.digestAt = r.Commit() + 1
	digest := r.Digest()
	if want, seen := s.digests[r.Commit()]; seen && want != digest {
		return s.violation("replica %d at commit %d has digest %x (state and client table), another replica %x",
			n.index, r.Commit(), digest, want)
	}
	s.digests[r.Commit()] = digest
	return nil
}

// checkPrimary: a primary of a view at or past the one in which the highest commit was seen holds
// every committed op: committed ops survive view changes and crashes. (A primary of an older view, say
// a replica that restarted with nothing durable, can commit nothing: a quorum has left its view.)
func (s *Sim) checkPrimary(n *node) error {
	r := n.replica
	if r.IsPrimary() && r.View() >= s.maxCommittedView {
		if r.Op() < s.maxCommitted {
			return s.violation("primary %d of view %d has op %d, below committed op %d", n.index, r.View(),
				r.Op(), s.maxCommitted)
		}
		if head, ok := r.Head(s.maxCommitted); ok {
			if want, seen := s.committed[s.maxCommitted]; seen && want != head {
				return s.violation("primary %d of view %d holds op %d with checksum %x, committed %x", n.index,
					r.View(), s.maxCommitted, head, want)
			}
		}
	}
	return nil
}

// checkDurable: a message that vouches for durable state (start-view-change, do-view-change,
// start-view, prepare-ok) leaves only once the sender's disk holds what it claims: the view, and the
// log up to its op in its log view. Checked as the message leaves, so a message sent too early fails
// the run whether or not a crash later turns it into a lost op.
func (s *Sim) checkDurable(n *node, m *wire.VSRMessage) error {
	if s.opts.NoDurabilityCheck {
		return nil
	}
	d := &n.disk.durable
	ok, name := true, ""
	switch m.Command {
	case wire.CommandVSRStartViewChange:
		ok, name = d.view >= m.View, "start_view_change"
	case wire.CommandVSRPrepareOK:
		ok, name = d.covers(m.View, m.View, m.Op), "prepare_ok"
	case wire.CommandVSRDoViewChange:
		ok, name = d.covers(m.View, m.LogView, m.Op), "do_view_change"
	case wire.CommandVSRStartView:
		ok, name = d.covers(m.View, m.LogView, m.Op), "start_view"
	}
	if !ok {
		return s.violation("replica %d sent %s (view %d, log view %d, op %d) before it was durable: its disk "+
			"holds view %d, log view %d, op %d", n.index, name, m.View, m.LogView, m.Op, d.view, d.logView, d.op)
	}
	return nil
}

// describe summarizes the replicas for a failure message.
func (s *Sim) describe() string {
	out := ""
	for _, n := range s.nodes {
		if !n.up {
			out += fmt.Sprintf("[r%d down] ", n.index)
			continue
		}
		r := n.replica
		out += fmt.Sprintf("[r%d view=%d log_view=%d normal=%v op=%d commit=%d] ", n.index, r.View(), r.LogView(),
			r.Normal(), r.Op(), r.Commit())
	}
	for _, c := range s.clients {
		out += fmt.Sprintf("[c%d req=%d waiting=%v done=%d] ", c.id, c.request, c.waiting, c.completed)
	}
	return out
}
