package streamsim

import (
	"github.com/ringstream/ringstream/engine/stream"
	"github.com/ringstream/ringstream/wire"
)

// R24 on the simulated owners, as engine/streamhost and the shard's heartbeat run it: an owner
// sends its Commit (its confirmed tail) to its followers every commitEveryTicks as a real wire
// Commit batch; a follower takes it (stream.Copy.CommitSeen) and answers with a CommitReply; an
// owner that heard fewer than W copies, itself included, within the quorum window is told
// QuorumLost and serves nothing until W-1 followers are heard within the window again, by Commits
// sent since the loss (QuorumHeard);
// from then on the window watches again, and a second loss in the same epoch is reported too. The
// frames cross the simulated network (loss, delay, partitions, pauses), so a partitioned or paused
// owner loses its quorum.
//
// The broker runs R24 the same way since issue 22's fix (shard/heartbeat.Primary, streamhost's
// copyGroup.OnCommitReply). Two options keep the broker's behaviour from before it, to show what the
// simulator's read checks find when R24 is run that way:
//
// Options.QuorumOncePerEpoch reports a lost quorum once per epoch, as Primary did (QuorumLost
// returned false for good once it returned true), so an owner that heard its quorum again and then
// lost it a second time in the same epoch was never told and served on. Seed 5 then fails at tick
// 186 (node 4, owner of stream 2 at epoch 2, lost its quorum at 56, heard it again at 58, was
// partitioned from its follower at 116, and answered a fetch with confirmed tail 22 after the epoch
// 3 owner confirmed 23: a read went back in time; seeds 31 and 35 the same). Primary now reports a
// loss again once a quorum was heard since (shard/heartbeat TestR24_SecondLossInTheSameViewIsReported,
// streamhost TestQuorum_SecondLossInTheSameEpochStopsServing).
//
// Options.QuorumReplyAtArrival counts a CommitReply as hearing its member at the reply's arrival, as
// Primary did (OnReply stamped the member heard with now), so replies that waited for a paused owner,
// answering Commits sent before the pause, brought its quorum back at once when it woke. Seed 961
// then fails at tick 412 (node 5, owner of stream 2 at epoch 2, paused from 328 to 407 while the
// stream moved to epochs 3 and 4, lost its quorum on waking and heard it again in the same tick from
// replies queued during the pause, then answered a fetch with confirmed tail 87 below the 93
// confirmed since; seeds 1215 and 1253 the same). Here, and in Primary now, a reply counts as of the
// tick its Commit was sent (Primary maps the echoed timestamp back to its send tick), and brings the
// quorum back only while that is within the window and after the loss: seed 10593 found an owner
// that lost its quorum at tick 442, was paused from 445 to 540, and heard it back on waking from
// replies to Commits it sent at 442-444 (after the loss, so counted), then served a read below its
// successor's confirm before its next window check. copyGroup.OnCommitReply counted replies since
// the loss with no window; it now serves again on the reply Primary forwards as the one that brings
// W copies back (shard/heartbeat TestR24_ReplyToCommitOlderThanWindowDoesNotRestoreQuorum).
//
// Two differences remain, both of time rather than of counting:
//
//   - The window opens here when the copy took the owner role. Primary opens it at Start, on the
//     shard's next tick after the copy's role or epoch changed, so an owner paused between the two
//     would wake with a fresh window and serve for all of it: seed 8182 found that here when the
//     window opened at the owner's first tick (node 2, owner of stream 1 at epoch 2, paused from
//     tick 40 to 81 right after it applied, answered a fetch sent at 85 with confirmed tail 0 below
//     the 2 confirmed at epoch 3).
//   - A simulated node's ticks are the simulation's: a paused node wakes with the ticks of its
//     pause behind it. A broker's shard counted one tick per firing of its tick timer, so a process
//     that was stopped (SIGSTOP, a stall) woke one tick later whatever the time it lost, its window
//     still showing its followers heard a tick ago. The shard now skips the ticks whose time passed
//     when its timer comes back half a window late or more (shard's timerTick,
//     TestR24_StoppedPrimaryWakesWithItsQuorumWindowPassed), so a stopped owner serves at most one
//     and a half windows past the last reply it heard; shorter delays still run every tick.

// commitEveryTicks is how often an owner sends its Commit to each follower.
const commitEveryTicks = 2

// defaultQuorumWindowTicks is the quorum window when Options.QuorumWindowTicks is 0: shorter than
// the quickest failover the controller can make (eager failover grace, a seal round trip, a
// metadata commit, the new owner's open), so that an owner cut off from its followers stops serving
// before a new owner confirms anything.
//
// A longer window lets a cut-off owner serve reads below what its successor confirmed: over seeds
// 1..200, windows of 10, 16 and 24 ticks pass, 32 ticks fail 3 seeds, 40 fail 7, 48 fail 10 and 60
// fail 14 (seed 42 at 60: node 3, owner of stream 3, partitioned at tick 383, eager failover
// recorded at 393, node 2 owner at 398, and node 3 answered a fetch sent at 409 with confirmed
// tail 126 below 132). The nodes' defaults have the same shape: commit_heartbeat_timeout 5000 ms
// against eager_failover_grace 200 ms and node_liveness_timeout 3000 ms.
//
// A window too short for the network is a liveness fault of its own: with 6 ticks, a round trip at
// the largest drawn delay (2 x 4 ticks) plus the Commit interval (2) never fits, an owner loses and
// regains its quorum every few ticks through the heal phase, and the liveness check finds its
// producers waiting (TestSim seed 44, TestSimDiskErrors seeds 78 and 115). 12 ticks hold a whole
// round trip at every drawn delay and stay below the 24 that still passes the read checks.
const defaultQuorumWindowTicks = 12

// quorumWatch is an owner copy's R24 state at one epoch.
type quorumWatch struct {
	epoch  uint32
	start  uint64            // tick the window opened: when the copy took the owner role at this epoch
	heard  map[uint16]uint64 // follower -> the tick the Commit its latest reply answers was sent
	lost   bool              // QuorumLost reported at this epoch
	lostAt uint64            // tick it was
	sentAt uint64
}

func (s *Sim) quorumWindow() uint64 {
	if s.opt.QuorumWindowTicks > 0 {
		return uint64(s.opt.QuorumWindowTicks)
	}
	return defaultQuorumWindowTicks
}

// quorumOf is the count of copies an owner must hear (the broker's copyGroup.Quorum: the stamped
// assignment's W), or 1 in the OwnerQuorumOne variant.
func (s *Sim) quorumOf(hc *hostCopy) int {
	if s.opt.Variant == OwnerQuorumOne {
		return 1
	}
	return hc.asg.ConfirmCount()
}

// tickQuorum sends node n's owner copy of stream si its Commit when due and reports a lost quorum.
func (s *Sim) tickQuorum(n *node, si int, hc *hostCopy) {
	if hc.c.Role() != stream.RoleOwner || hc.c.Restarted() {
		return
	}
	q := &hc.quorum
	if q.epoch != hc.asg.Epoch || q.heard == nil {
		// The window opens when the copy took the role, not at its first tick: an owner paused
		// right after it applied its assignment has heard no one since when it wakes.
		*q = quorumWatch{epoch: hc.asg.Epoch, start: hc.opened, heard: map[uint16]uint64{}, sentAt: s.now}
		s.sendCommits(n, si, hc)
	}
	if s.now-q.sentAt >= commitEveryTicks {
		q.sentAt = s.now
		s.sendCommits(n, si, hc)
	}
	if q.lost && !hc.c.LostQuorum() && !s.opt.QuorumOncePerEpoch {
		q.lost = false // heard again: the window watches on (see QuorumOncePerEpoch)
	}
	window := s.quorumWindow()
	if q.lost || s.now-q.start < window {
		return
	}
	heard := 1 + s.heardWithin(hc, 0)
	if heard >= s.quorumOf(hc) {
		return
	}
	q.lost, q.lostAt = true, s.now
	s.counts.quorumLost++
	s.logf("node %d: owner of stream %d epoch %d lost its quorum (%d of %d heard)", n.id, s.strs[si].st.ID,
		hc.asg.Epoch, heard, s.quorumOf(hc))
	hc.c.QuorumLost()
	s.drive(n, si)
}

// heardWithin counts the followers of hc heard within the quorum window as of now, by Commits sent
// at or after tick from: an owner that lost its quorum is back only when W copies are heard now,
// not when replies to Commits from before (waiting in the network, or for a paused owner) arrive.
func (s *Sim) heardWithin(hc *hostCopy, from uint64) int {
	n, window := 0, s.quorumWindow()
	for _, f := range hc.asg.Followers {
		if t, ok := hc.quorum.heard[f]; ok && t >= from && s.now-t < window {
			n++
		}
	}
	return n
}

func (s *Sim) sendCommits(n *node, si int, hc *hostCopy) {
	st := s.strs[si].st
	e := []wire.CommitEntry{{Group: st.ID, Incarnation: st.Incarnation, View: hc.asg.Epoch, Commit: hc.c.Confirmed(),
		TimestampMonotonic: s.now, HeartbeatState: wire.HeartbeatBusy}}
	for _, f := range hc.asg.Followers {
		frame := wire.AppendCommitBatch(nil, 1, n.id, e)
		s.send(envelope{from: n.id, to: f, kind: kindPrepare, stream: st.ID, frame: frame})
	}
}

// onCommitFrame takes a Commit batch (a follower: CommitSeen, and a reply) or a CommitReply batch
// (an owner: the follower heard; QuorumHeard once W-1 were since the loss). It reports whether the
// frame was one of the two.
func (s *Sim) onCommitFrame(n *node, e envelope, h *wire.Header, body []byte) bool {
	switch h.Command {
	case wire.CommandCommit:
		b, err := wire.DecodeCommitBatch(h, body)
		if err != nil {
			s.fail("commit batch from %d does not decode: %v", e.from, err)
			return true
		}
		for i := range b.Len() {
			c, err := b.Entry(i)
			if err == nil {
				s.onCommitEntry(n, e.from, c)
			}
		}
		return true
	case wire.CommandCommitReply:
		b, err := wire.DecodeCommitReplyBatch(h, body)
		if err != nil {
			s.fail("commit reply batch from %d does not decode: %v", e.from, err)
			return true
		}
		for i := range b.Len() {
			r, err := b.Entry(i)
			if err == nil {
				s.onCommitReply(n, e.from, r)
			}
		}
		return true
	}
	return false
}

func (s *Sim) onCommitEntry(n *node, from uint16, c wire.CommitEntry) {
	si, ok := s.streamIndex(c.Group)
	if !ok || n.copies[si] == nil || c.Incarnation != s.strs[si].st.Incarnation {
		return
	}
	hc := n.copies[si]
	if hc.c.Role() != stream.RoleFollower || hc.asg.Epoch != c.View || hc.asg.Owner != from {
		return
	}
	hc.c.CommitSeen(c.View, c.Commit)
	r := []wire.CommitReplyEntry{{Group: c.Group, Incarnation: c.Incarnation, View: c.View,
		TimestampMonotonic: c.TimestampMonotonic}}
	s.send(envelope{from: n.id, to: from, kind: kindPrepareOK, stream: c.Group,
		frame: wire.AppendCommitReplyBatch(nil, 1, n.id, r)})
}

func (s *Sim) onCommitReply(n *node, from uint16, r wire.CommitReplyEntry) {
	si, ok := s.streamIndex(r.Group)
	if !ok || n.copies[si] == nil || r.Incarnation != s.strs[si].st.Incarnation {
		return
	}
	hc := n.copies[si]
	q := &hc.quorum
	if hc.c.Role() != stream.RoleOwner || hc.asg.Epoch != r.View || q.epoch != r.View || q.heard == nil {
		return
	}
	// The reply vouches for the follower as of the Commit it answers (its echoed timestamp is the
	// tick that Commit was sent), not as of its arrival: a reply that waited in the network, or for
	// a paused owner, says nothing about now (see QuorumReplyAtArrival).
	at := r.TimestampMonotonic
	if s.opt.QuorumReplyAtArrival {
		at = s.now
	}
	q.heard[from] = max(q.heard[from], at)
	if !hc.c.LostQuorum() || at < q.lostAt || s.now-at >= s.quorumWindow() {
		return
	}
	if 1+s.heardWithin(hc, q.lostAt) >= s.quorumOf(hc) || s.opt.Variant == QuorumBackAfterOneReply {
		s.logf("node %d: owner of stream %d epoch %d heard its quorum again", n.id, r.Group, r.View)
		hc.c.QuorumHeard()
		s.drive(n, si)
	}
}
