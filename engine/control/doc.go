// Package control is the controller and recovery worker of the metadata primary (DESIGN sections 7
// and 9, the stream-failover spec). It owns node liveness, the decision that a stream's owner is
// lost, placement of replacement followers, the seal of a pending recovery, the choice of the new
// owner, the delivery of assignments, and attention: everything that waits for an operator or a
// node, with why. It decides; engine/meta checks and records its decisions as guarded ops.
//
// It is a pure state machine: it never reads the clock, does no I/O, starts no goroutine, never
// blocks and walks no map. Time is ticks. All methods run on the goroutine that applies committed ops
// to the meta.State the controller was given (shard 0 of the metadata replica); the controller only
// reads that state.
//
// Inputs: Tick; OnHeartbeat (a node heartbeat: every copy's published record and cursor tails, a
// follower's silent-owner flag, and a failed log's flag and cause); OnLinkDown and OnLinkUp (the
// node's links, for eager failover); OnSealReply; OnOwnerSilent; StateChanged (committed ops were
// applied); ProposalDone and ProposalDropped (the outcome of each proposal); BecomePrimary and
// StepDown. Operator actions, AcceptOwnerLoss and Withdraw, return the op for the host to propose.
// Output: Ready returns Effects: ops to propose, seals to send and assignments to deliver (see
// Effects for the host's order). Attention lists the waits. The host reports the links of every node
// when it becomes primary (OnLinkDown for those that are down).
//
// What it does:
//   - A node is lost when no heartbeat came for NodeLivenessTimeoutTicks, at once on a heartbeat
//     flagged as a shutdown notice, or when its links closed and stayed closed for
//     EagerFailoverGraceTicks. A heartbeat makes it alive again, once its links are up.
//   - A replicated stream whose owner is lost gets a RecordRecovery op, not a move. A stream whose
//     assignment has one copy waits for that node (attention).
//   - The recovery worker seals every copy of the old assignment at once at FromEpoch+1 with the
//     recovery's id as transition id, the seal carrying the stream's history starts. Copies that have
//     not answered are sealed again every SealRetryTimeoutTicks. Answers count only for the current
//     transition and fence; late answers are kept. Once at least R copies answered and every live
//     copy answered (or SealTimeoutTicks passed) it picks the furthest copy (record tail, then cursor
//     tail, then lowest node id). Below the latest history start it waits (the confirmed-prefix
//     guard), reading the starts and their version from one snapshot; the version goes into the
//     CommitRecovery op whose guard checks it. Streams recover independently and at once.
//   - A withdrawn recovery is replaced (RecordRecovery with Replaces) before anything else changes.
//   - A stream whose owner is alive gets the changes that need no recovery (meta.NeedsNoRecovery):
//     replacement followers up to its copy count (a returning old owner among them, rejoining as a
//     follower), and the cluster assignment policy stamped on a replicated assignment.
//   - Every assignment reaches its members as a wire.StreamAssignment carrying the history starts:
//     at once when its epoch or starts version moves, and again every SealRetryTimeoutTicks to a
//     live member whose heartbeat does not show the copy at that epoch.
//   - A new primary rebuilds from the replicated state and fresh heartbeats: every node gets a full
//     liveness window, pending recoveries seal again at the same fence with the same transition id.
//
// What a broker does with them (the copy's side, engine/stream and segment): on a seal, fence at the
// seal's epoch durably, then cut onto meta.CutPoint(node, log epochs, fence epoch, starts), then
// answer with the tails after the cut; a newer transition at the same fence takes over the seal. On
// an assignment, cut onto meta.CutPoint(node, log epochs, assignment epoch, starts) before the role
// change, then record the log epoch; a frame whose starts do not decode is not applied. Copies left
// out of an assignment stay sealed.
//
// Decisions where the design is silent:
//   - The worker waits for every live copy's answer up to SealTimeoutTicks before deciding, so a
//     decision keeps as many sealed copies as followers as it can; lost nodes are not waited for, so
//     a crash of the owner costs no seal timeout.
//   - The proposed members of a recovery are the old followers, the old owner if it is alive (a
//     replacement after a withdraw), and replacement followers on live nodes up to the stream's copy
//     count. New copies are placed on nodes heard from since this primary started, fewest copies
//     first, then lowest id. The proposed owner is the live old follower with the furthest published
//     tails; it is only the default for an accepted loss, the seal answers choose the real owner.
//   - A follower addition that would raise W (local_durable grows with E; a stream shrunk to one copy
//     under majority) is a change that needs a recovery: the controller records one with reason
//     placement, proposing the live owner and members that include the new copies. Its seal fences
//     the live owner for one round trip. A stricter cluster policy alone reaches an existing
//     assignment only at its next recovery.
//   - A replacement for a withdrawn recovery carries reason operator.
//   - Ops are batched per Ready (issue 25): every RecordRecovery, every CommitRecovery and every
//     SetAssignment decided in one Ready go out as meta.RecordRecoveries, CommitRecoveries and
//     SetAssignments of at most meta.BatchEntriesMax entries, sorted by stream; a kind with one op
//     left stays a single op. So 1,000 streams losing their owner cost 10 record ops and 10 commit
//     ops, which fit the metadata pipeline at once, instead of 2,000 ops queued for it. The
//     bookkeeping stays per stream: each entry holds its stream's proposal slot, and
//     ProposalApplied hands each stream its entry's code, so a refused entry backs off and is
//     looked at again as a refused single op is. Operator actions (Withdraw, AcceptOwnerLoss) stay
//     single ops: the host proposes them on their own.
//   - One proposal per stream is out at a time. A refused one is looked at again after
//     SealRetryTimeoutTicks; one never reported back is forgotten after ProposalTimeoutTicks.
//   - A seal answer with status "no copy" (the node lost its copy) never counts toward R: a copy that
//     lost its data may have lost confirmed records.
//   - Only OnLinkUp ends a link-down; a heartbeat does not. A heartbeat handled after OnLinkDown may
//     have been sent before the links closed (it arrives on the node's own connection, not on the
//     link that closed, and carries no send time), so letting it clear the link-down would cancel
//     eager failover and leave the node to liveness expiry. For the same reason a lost node's
//     heartbeats do not make it alive while its links are down. The cost: a node that returns while
//     the host's link to it waits out its reconnect backoff is counted alive only at its first
//     heartbeat after OnLinkUp, and a node this host cannot reach but that reaches it is lost after
//     the grace (seals and assignments could not reach it either).
//   - An owner whose node restarted before anyone saw it lost reopens in its own epoch and may have
//     lost records a follower holds (engine/stream). It flags its heartbeat entry
//     (wire.CopyOwnerRestarted); the controller then records a recovery with reason owner_restarted
//     (members keep the owner), exactly as for a lost owner, so the seal chooses the furthest copy.
//     The flag counts at the assignment's epoch, or at an older one while no history start was
//     recorded at the assignment's (a change without recovery the copy refused to apply as owner);
//     once a recovery chose it, a stale flag from before is ignored. This also moves a lone copy
//     whose node restarted: sealed and promoted at a new epoch, it serves again.
//   - A copy whose log failed (ENOSPC, EIO, EROFS, a checksum, a copy that did not open) is known
//     from its node's heartbeat, flagged wire.CopyLogFailed with a wire.LogFailCause; nothing is
//     asked. An owner so flagged is failed over like a lost owner: a recovery with reason
//     owner_log_failed whose members leave it out (a lone copy has nothing to fail over to and waits
//     for its heal under attention). A follower so flagged is taken out of the assignment by a
//     recovery with reason placement whose members are the owner, the healthy followers and
//     replacements on other live nodes, but only when the healthy copies reach the assignment's R
//     (else nothing is proposed: the stream confirms while W healthy copies hold). No new copy of a
//     stream is placed on a node whose copy of it is flagged; once the flag clears (the copy healed)
//     placement adds it back as a follower, which catches up. Attention lists every flagged copy
//     with its cause (copy_log_failed).
//   - What a recovery may do with a failed copy, for R = E - W + 1 (the proof is on decide, in
//     worker.go): it never waits for its answer, and never promotes it. A heartbeat flag is no
//     answer (published tails are not fenced: a copy that heals could take more from the old owner).
//     A sealed answer from a flagged copy (a host answers only once its fence is durable) counts
//     toward R as evidence: with R healthy answers the failed ones are left out of the sealed set;
//     with fewer, the furthest healthy copy is promoted only if no failed answer is past its record
//     tail, since the records between could be confirmed on the old owner and that copy alone; else
//     the recovery waits for the copy to heal (failed_copy_ahead) or for an operator's accept. With
//     fewer than R answers in all it waits, as before, and attention names the failed copy and says
//     it is not waited for. So for E = 3, W = 2 a failed follower and a lost owner wait for one of
//     them to come back (R = 2 answers are needed, and only one healthy copy can give one), which is
//     why the failed follower is taken out of the assignment as soon as the owner and the other
//     follower can seal without it: then E = 2, W = 2, R = 1, and a later owner loss fails over to
//     the healthy follower alone.
//   - An operator's accept is refused (ErrOwnerCannotServe) when the owner it names has not answered
//     the seal and its heartbeat flags its copy failed or restarted within its epoch: promoted
//     without a seal it would serve nothing, and no recovery would be left to end the wait.
//   - A follower reports a silent owner with the wire.CopyOwnerSilent flag on its heartbeat entry. The
//     report is kept for one liveness timeout; a report about an older epoch does not replace a newer
//     one.
//   - A backup's controller keeps views of the registered nodes (synced at StateChanged) and counts
//     their silence and the time their links have been down, without losing any: a node whose links
//     closed at the same time as the old primary's is lost at the new primary's first tick, not a
//     whole grace after it became primary. Heartbeats and silence start afresh at BecomePrimary.
//   - Heartbeat tails are kept per node, sorted by stream, in memory that is reused: the heartbeat
//     path allocates nothing in steady state.
//
// The stream-failover spec's known limits that remain: right after a failover the new owner may be
// the only copy holding records confirmed under the old assignment, and losing it then waits (under
// attention) for a copy holding the confirmed prefix or for an operator to accept the loss; an
// accepted loss records the new owner's seal answer, else the tails it last published, which can lag
// its log, so a returning copy may cut lower than needed and fetch again, and the promotion can land
// below the confirmed prefix (meta's result warns). An owner with neither is refused (operator.go):
// the spec's accept without a start let a returning copy keep a suffix the new owner overwrote. The controller runs on real nodes through engine/controlhost and
// in engine/sim/streamsim. Not built here: operator accept-loss for a one-copy stream, which has no
// recovery to accept.
package control
