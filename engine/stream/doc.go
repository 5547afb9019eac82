// Package stream is one copy of one stream at one assignment, as a pure state machine: the owner's
// appends, replication to followers, the confirm rule, producer deduplication, consumer fetches with
// long polls, and cursor commits.
//
// It owns a copy's protocol state: its role (owner, follower, sealed), the tails it appended and the
// host reported durable, the epochs of its records, each follower's progress as the owner sees it, the
// confirmed tail, the produces waiting for it, the producer table, parked fetches and the cursor map.
// It never reads the clock, never starts a goroutine, never blocks, never touches ring or segment and
// never ranges over a map where the order could show. Time is Tick; the same code runs on a shard
// (through segment) and in engine/sim.
//
// Inputs: New, then ObserveBatch and ObserveCursor for the retained log, then OpenDone; Step for
// replication messages (prepare, prepare-ok) and client requests (produce, fetch, cursor commit, read,
// list and delete); Tick; the host's storage reports: EpochDone, AppendDone (a log's durable tail), ReadDone,
// LogFailed, Sealed, HeadMoved (retention, never past RetainLimit); and CommitSeen (the owner's
// commit from its Commit entries, on a follower). Output: Ready's Effects, whose slices keep their
// capacity. CheckInvariants asserts the whole state; tests and engine/sim run it after every input.
//
// The host keeps the order Effects states: log epochs durable first, appends queued in order, reads,
// then sends and replies. A follower's acknowledgement leaves only after AppendDone covered it, and
// an owner counts only acknowledged durable tails, so no ack vouches for bytes not yet fsynced.
// storage_test.go carries the effects out on real segment logs and rings, as a shard would.
//
// The owner appends each produce and, in the same step, sends it to every live follower as a prepare
// naming the appended run (the host sends the bytes it appended, not a second encoding). Each copy's
// durable tail counts; the confirmed tail is the W-th highest of them, the owner's included, W from
// meta.Assignment.ConfirmCount (meta.StreamConfirmPolicy, the one rule the controller also uses), and
// a produce is answered once the confirmed tail passes it. The owner's Heartbeat gives the shard its
// commit (the confirmed tail) and its state (busy while anything is unconfirmed).
//
// Protocol scenarios live in testdata/scripts (go test -run TestScripts, -rewrite to regenerate).
//
// Decisions where the design is silent:
//   - The confirmed tail is also capped at the owner's own durable tail: the owner serves fetches from
//     its log, which reads durable bytes only, and so it never acknowledges before its own fsync.
//   - The epoch log matching compares is a record's batch epoch (the epoch of the owner that appended
//     it first, stored in its batch header and so the same on every copy), not the copy's log epochs
//     (its role changes). The host feeds the retained batch headers on open (ObserveBatch); the copy
//     keeps them as runs, one entry per epoch change, together with the producer table.
//   - Batches are segment's format; the copy reads them through Config.Decode and never encodes one.
//     Owner appends carry header and payload for the host to encode (it stamps the timestamps);
//     follower appends carry the owner's bytes as they came. The host needs the bytes its log
//     encoded for each owner append (to send them) and keeps them until the send completes; segment
//     does not hand them out yet, so that is part of the shard's integration.
//   - Epochs are 32 bits here as in meta and wire; segment stores 64. The host's Decode refuses a
//     batch epoch above 32 bits (input, not an assert).
//   - A follower answers PrepareAppended with min(durable tail, end of the prepares it accepted):
//     records it held from before but has not matched with this owner are not vouched for.
//   - A follower refuses a gap, a wrong predecessor epoch or a held record with another epoch with
//     PrepareMismatch and its tails; a batch that does not decode, is above BatchBytesMax or breaks
//     the prepare's framing, and a prepare its log has no room for (PendingBytesMax not yet durable),
//     are dropped without an answer (the owner's ResendTicks probe tries again). A divergent suffix is
//     never overwritten here: the owner leaves that follower stalled, and cutting the suffix is the
//     seal's job (the failover issue).
//   - The owner finds agreement by probes (empty prepares): first at the follower's tail, and after a
//     refused probe at the start of its own epoch run below it. The answer carries the prepare's base
//     (wire.StreamPrepareOK.BaseOffset), so late answers to older prepares do not move the probe.
//   - A new owner probes its followers the moment its own log-epoch entry is durable, which races
//     with theirs. A follower not ready for the probe's epoch (assignment not taken, reopening, its
//     entry not durable; its host not serving yet) keeps the first record prepare of the newest
//     epoch (OwedProbe) and answers it as a probe once its entry is durable, so the failover's first
//     confirm does not wait ResendTicks for the owner's next probe.
//   - An owner whose link to a follower's node comes up again (the host's shard.LinkWatcher) probes
//     at once a follower there that owes it an answer (PeerUp): what it sent while the link was down
//     was dropped, and waiting ResendTicks (500 ms) delayed a restarted follower's catch-up.
//   - Produces that reach a new owner while its log-epoch entry is being made durable (one
//     fdatasync) wait for it, their batches copied, within ProducesMax and PendingBytesMax, and are
//     taken in arrival order at EpochDone; a refusal would send the client into a backoff step
//     longer than the fdatasync. Sealed, reassigned or failed meanwhile, they are refused with what
//     waits. Only a produce whose one refusal would be the pending entry is held.
//   - A follower is live (it gets appends in the step that makes them) or catching up (the owner reads
//     its log, ReadBytes at a time). In-flight bytes and batches per follower are bounded
//     (InflightBytesMax, InflightPreparesMax): a follower past either drops to catch-up and is read
//     for later, so the owner never buffers for it and the others confirm without it. A catch-up
//     follower whose reads reached the durable tail gets the records past it from the host's
//     unsynced groups (SourceUnsynced) and is live again, so constant load does not keep it one
//     group commit behind on reads.
//   - The host feeds every retained batch header on open (ObserveBatch; batches out of order are
//     ErrBatchOrder, a damaged log). A copy with records but none retained (head at its tail above
//     0) knows no predecessor epoch and refuses every prepare: not reachable while retention stays
//     below RetainLimit and segment keeps its active segment.
//   - An owner that reopens in its own epoch (its newest log epoch is the assignment's) may have lost
//     records its followers hold, confirmed ones included; it refuses everything with CodeUnavailable
//     and waits for a new assignment instead of appending at that epoch again. Its host publishes
//     Restarted (wire.CopyOwnerRestarted) so that the controller records a recovery, and applies no
//     assignment that keeps it owner before a seal at that assignment's epoch reached it.
//   - Produces waiting for the confirmed tail when the copy is sealed or its log fails are refused
//     (CodeFenced, CodeLogFailed). Their records may still be confirmed by a later owner: a producer
//     retrying with the same sequence is answered from that owner's table.
//   - The producer table remembers each producer's last five batches; an older retry is refused with
//     CodeSequenceGap. A producer the table does not know may start at any sequence. Past
//     ProducersMax the producer whose last batch is oldest is forgotten.
//   - A batch whose Sequence carries KafkaSequenceFlag is a Kafka producer's (engine/kafka): its
//     Sequence holds the producer epoch and base sequence, and the table checks it by Kafka's rule
//     (producers.go): the next base sequence is the last one plus the last batch's record count,
//     modulo 2^31, within an epoch; a retry is a duplicate when its base sequence and record count
//     match one of the last five batches; an older epoch is refused with CodeProducerFenced, a newer
//     one starts at 0. Our clients' sequences (from 0, one per batch) never carry the flag. A
//     producer whose last batch followed the other rule is taken as unknown.
//   - Fetch answers whole batches from the one holding the offset asked for (at least one, even past
//     BytesMax or RecordsMax), and never a batch past the confirmed tail. A fetch at or past the
//     confirmed tail waits WaitMs (in ticks, capped at FetchWaitTicksMax), then gets an empty reply.
//     Only the owner serves fetches and cursors.
//   - A new owner serves reads only from a confirmed tail it proved (issue 22, finding 8). When it
//     takes the role (OpenDone, after a boot, a promotion or an in-place Reassign) its confirmed
//     tail counts only copies heard in its epoch and starts at 0, while a reader may have seen its
//     predecessor's. Every tail an earlier owner could have confirmed is at or below this copy's
//     own record tail at that moment (the seal promotes the furthest copy of a set meeting every
//     W-set), so the owner holds reads until its confirmed tail reaches that tail, as Raft's new
//     leader serves no read before its first commit in its term: a long poll waits (and is refused
//     as unavailable if its wait runs out first), a fetch that does not wait and a cursor commit
//     past the confirmed tail are refused as unavailable (retryable), never answered with a lower
//     tail. An owner of W = 1 confirms its own durable tail once its epoch entry is durable.
//     It also holds reads until W-1 followers answered a prepare at its epoch: an owner that takes
//     the role at an epoch already superseded (away through the failover, it opens from the
//     assignment it last knew) has a read floor of its own tail, which can be below what its
//     successor confirmed; a sealed follower never answers it, so it never serves a read.
//   - A cursor commit is answered at once and appended without an fsync of its own; the owner asks
//     the host to commit queued cursor events CursorSyncTicks after the first. Followers get cursor
//     events by reads of the owner's durable cursor log, matched by offset only (no predecessor
//     epoch), and commit them at once. Only the owner keeps the cursor map (fed on open).
//   - Commits may move a cursor backwards: the last commit wins (an operator's reset is a commit of the
//     offset it computed). A cursor list and a cursor read show the owner's cursor map, every commit it
//     answered, durable or not, so what a list shows is what the consumer's next Cursor read returns.
//   - A cursor list is served in name order (the map's names sorted per request: lists are rare and
//     an operator's), at most wire.CursorListMax entries a reply, with the confirmed tail and the head
//     the lags count from; an owner that has not proven its confirmed tail (readable) refuses it as
//     unavailable, so a lag is never counted from a tail below one a reader saw.
//   - A cursor delete appends a tombstone, asks for a cursor sync at once, and is answered once the
//     W-th highest of the copies' durable cursor tails (the owner's and its followers' acknowledged
//     ones, capped at the owner's) passes it, as a produce is. At most 64 wait (then CodeOverloaded);
//     a sealed, failed or reassigned copy refuses those waiting, as it refuses waiting produces. A
//     delete of a consumer with no cursor writes nothing and answers not found at once. A recovery
//     picks the longest record log first and the longest cursor log only among equals, so a copy
//     without the tombstone can still become owner when it holds more records: the delete is then lost
//     as a commit can be (F18), and the operator sees the cursor again in the list.
//   - Client refusals carry a constant text copied into the effects' buffer, so refusing allocates
//     nothing in steady state; replication messages that cannot be used are counted (Stats), never
//     answered with an error.
//   - R24 for an owner (the host calls QuorumLost when it heard fewer than W copies within
//     commit_heartbeat_timeout): it keeps its role and refuses produces, fetches and cursor requests
//     as unavailable until QuorumHeard, so clients look the stream up again; stepping down for good
//     is the controller's call, as it is for a silent owner.
package stream
