// Package streamhost runs stream copies (engine/stream) on a node's shards (shard) over their
// storage (segment): it feeds each copy its inputs (frames, ticks, storage reports) and carries out
// its effects, in the order engine/stream's Effects states.
//
// It owns, per node, the copies' directories under Dir/streams/<id>-<incarnation>, and per shard the
// segment Jobs of its copies, the buffers its copies share (owner appends, reads) and the table of
// data frames in flight. It never interprets the protocol (engine/stream does), never drives a ring
// from a completion, and never starts a goroutine.
//
// A copy is a shard.Group on shard ShardOf(stream id) of each node that holds one: the owner is the
// primary of the group (members: the owner as member 0, then the followers in ascending node order;
// the view is the assignment's epoch) and its Commit is the confirmed tail, so the shard's heartbeat
// schedule carries it (busy while it moves, idle otherwise); followers are backups and hear the
// owner's commit from its Commit entries (CommitSeen).
//
// Decisions where the design is silent:
//   - Each shard gets one more group, the shard host: offline (never scheduled, never addressed), at
//     the highest id below the metadata group's that ShardOf puts on that shard. Its turn hook is the
//     one per-turn call the shard's copies need: it carries out the effects of every copy that had
//     inputs in the turn (one Ready per copy per turn), then runs Jobs.Poll, which resumes the rare
//     operations and flushes every copy's group commit. So a turn's appends go into one group commit
//     per log and the frames queued for them leave in the same turn.
//   - Frames (prepare, prepare-ok) and client requests (Host.Step, Host.StepAll) are carried out at
//     once, inside the call: the message aliases a receive buffer or the caller's bytes, and the
//     appends copy them into the log's group buffer before it returns. StepAll carries out several
//     requests as one Ready, so the owner sends each follower one prepare for all of them: one data
//     frame per record per follower cost the 3-copy stream more than half its rate.
//   - The owner encodes the record batches of one Ready once (segment.AppendBatch, the host stamps
//     both timestamps with the turn's wall clock) into its newest held buffer while it has room (a
//     pooled one otherwise; encoded bytes never move), appends each batch from it
//     (segment.Copy.AppendEncoded) and sends the prepares that name those appends from the same bytes
//     with shard.SendData: header and body leave as two slices, with no copy. The buffer is held until
//     the log reports its last batch durable (a follower catching up past the durable tail is sent
//     those bytes: SourceUnsynced) and until every send of it completed. SourceUnsynced bytes that lie
//     in more than one held buffer are joined into one (counted, Stats.UnsyncedCopies).
//   - Reads go into pooled buffers sized for the read plus segment's index spacing. A read's buffer is
//     kept until the Ready after its ReadDone was carried out and the sends aliasing it completed.
//     Client replies are handed to Config.Replies inside that Ready: a fetch reply's batches must be
//     used or copied before it returns.
//   - Buffers are per shard (a free list of at most 16 MiB), never per copy: an idle copy holds none.
//   - Descriptors: a copy parks its storage (segment.Copy.Park: its four descriptors closed) right
//     after its open, and again once segment.Copy.Activity stayed unchanged for IdleCloseTicks
//     (checked on the copy's tick; a busy copy refuses and is asked again the next tick). Its next
//     append or seal reopens through the ring; reads do not. At boot every copy opens at once, and
//     one that kept its files open through its scan and log epoch would hold four descriptors while
//     thousands queue behind it: 10,000 idle copies then needed 40,000, twice this machine's limit.
//     Stats.Parks and Stats.Parked count them.
//   - Open runs segment.Open as a job on the shard's ring (all copies of a node open at once, interleaved),
//     then reads every retained batch through the ring to feed the copy its headers (ObserveBatch),
//     and the cursors segment recovered (ObserveCursor, in name order), then OpenDone. A copy whose open
//     or scan fails is logged, listed by Status, and left closed until its reopen (below); the other
//     copies serve.
//   - Delete is segment.Copy.Delete (rename, then removals through the ring), then the group goes.
//     A failed copy is deleted the same way, between two reopens: its closed storage (closed for the
//     heal, or the copy whose open failed, which segment deletes too) is deleted, its retries end and
//     it leaves the failures list. While its reopen or close is in flight the delete is refused and the
//     caller (the node's reaper) tries again. A failed copy that never had storage (segment.Open refused
//     it at once) is only dropped, with a warning naming its directory.
//   - Retention runs every RetainEveryTicks with the spec's bytes and age, never past the copy's
//     RetainLimit (segment.Copy.RetainBelow). segment moves the head when the job starts (inside
//     Jobs.Poll), so the host reports the head to the copy (HeadMoved) before every input that can
//     make it read: a fetch racing the retention is refused as below the head, not failed by a read.
//   - A prepare-ok or empty probe goes through the outbox (SendFrame, a copy of a small frame); a frame
//     the shard refuses (link down, outbox full) is counted and left to the copy's resend timer.
//   - Stop: each copy's OnStop starts its Close job and the shard host's polls the jobs through the
//     shard's drain turns.
//   - Each byte is hashed once per hop. The owner verifies a produce frame's body checksum and stores
//     it as the batch's payload checksum (wire.Produce.BatchSum: the body is the payload exactly); it
//     appends its own encoding with AppendEncoded, which checks headers only; it hashes each prepare's
//     body once for all the followers it goes to. A follower verifies the prepare's body checksum (the
//     shard's FrameReader), then checks each batch's header, not its payload again (the copy's
//     DecodeHeader, segment.DecodeBatchHeader: a bad header is refused with the log unchanged, and a
//     flipped byte anywhere fails the body checksum: TestPrepare_EveryFlippedByteIsRefused). Bytes
//     read from the disk are checked once, at ReadDone (checkRead, payload checksums included): a batch that
//     fails there is corrupt data below the durable tail, and fails the copy as corrupt (reported,
//     failed over if it owns the stream, reopened by the operator's retry) rather than being read
//     as the end of the data, which left fetches and catch-ups answering nothing forever. Hashing was
//     three passes over every byte on each node before (8.5% of the CPU of a 3-copy produce run).
//   - Failover (the stream-failover spec; engine/sim/streamsim's host carries out the same rules in
//     memory). Seals, seal replies and assignments are frames addressed to the stream's group: they
//     reach the copy's group, or Host.OnUnroutedFrame on a node without a copy (shard.UnroutedHandler,
//     passed on by engine/controlhost.Host), or Host.OnControlFrame from the controller on this node.
//   - Busy is not broken, and a storage error is a state with a name. Every refusal or error segment
//     returns to the host is one of three things:
//     retried or queued: ErrBusy and ErrBackpressure on a seal (kept queued, tried at each tick), on
//     a cut (at each tick), on a delete (at each tick) and on a log epoch (AppendEpoch refused while
//     another rare operation of the copy runs: a retention, a cursor snapshot, the previous epoch's
//     append when two assignments come back to back, as issue 22's wedged new owner had it; queued
//     and asked for again at that operation's Done and at each tick, Stats.EpochsQueued); a read
//     the log refuses as busy (ErrBackpressure: its ReadsMax slots in use) waits, in order, for a
//     slot (started at each read's end and at each tick, Stats.ReadsQueued; answered as a failed
//     read if the protocol copy stops first); a read refused otherwise (ErrBelowHead,
//     ErrBeyondTail) or failed, but for EIO, goes to the protocol copy, which reads again
//     (catch-up) or refuses that one fetch; a retention that finds
//     a seal running is tried at its next turn; ErrFenced on a log epoch or a seal's repeat is the
//     seal's business (the copy is sealed, the next assignment reopens it); ErrClosed on a copy
//     going away ends the step.
//     an error of the copy, which fails it (storageFailed): a failed group commit (writev, short
//     write, fdatasync: ErrFailed, the page cache can no longer be trusted), a failed reopen of a
//     parked log, a failed log-epoch write, a seal whose fence or digest failed on failed storage,
//     a failed cut or retention, a read that failed with EIO, and an append segment refused
//     (ErrOffsetOrder, ErrInvalidBatch, ErrFenced, ErrBusy, ErrBackpressure: none is reachable
//     while the copy serves, since the protocol copy checks offsets, epochs and room first and the
//     rare operations that hold a log run only while it is stopped or sealed; an append cannot be
//     retried, the protocol copy counts it appended, so one that is refused is a failure of the
//     copy, not a silent gap); a log epoch refused for another reason (ErrEpochOrder: the protocol
//     copy's epochs and storage's disagree).
//     and at open: an open or scan that fails (ErrDamaged), retried the same way.
//   - A failed copy is reported at once: listed in Status (Failure: its cause, CauseOf: enospc,
//     eio, erofs, corrupt, refused, other; the role it had; whether it is retried; attempts), counted
//     by cause (HealStats), and logged once at ERROR with its directory, cause, errno and the error,
//     which names the file. The protocol copy is told first (LogFailed): an owner refuses what waits
//     (log_failed) and confirms nothing more, since its own durable tail caps the confirmed tail and
//     no longer moves. Then, once that Ready went out, its storage is closed (segment.Copy.Close
//     waits for the operations in flight; one that waits for a rare operation to end is closed at
//     that operation's Done) and the copy is offline: no Commit entries, no frames, no tails
//     published, so its followers and the controller see it gone.
//   - A failed copy heals by itself: after HealBaseTicks it is reopened through recovery
//     (segment.Open, the torn tail cut), as at boot, in the role its assignment gives it (one that
//     came meanwhile is applied then, with its cut); a reopen that fails waits twice as long, up to
//     HealMaxTicks, and so does a copy that fails again within HealMaxTicks of a heal (a full disk
//     that an open does not notice). A follower reopened catches up as a returning follower; an owner
//     reopens in its own epoch as a restarted owner and serves nothing until a recovery moves the
//     stream on (engine/stream's Restarted, flagged in the heartbeats). Corrupt data, and a cut below
//     the retained head, are not retried: they wait for RetryCopy (POST /v1/copies/{stream}/retry)
//     after a repair, or a delete. Seals that reach a failed copy wait, queued, for its reopen (the
//     controller seals again meanwhile and learns of the failure from Status in the heartbeats).
//   - A seal is one storage operation in steps, each reported back and never driving the ring from a
//     completion: the protocol copy is sealed at once (waiting produces refused as fenced), then
//     segment.Seal makes the fence durable and commits what was queued; then, if meta.CutPoint puts a
//     cut below the tails (the copy's own epoch is its last log epoch, not the fence), the cut runs as
//     a job and segment.Seal runs again at the same fence for the digest and tails of the cut logs;
//     then the reply goes to the seal's sender (to Config.SealReplies on this node). A seal at or below
//     the copy's assignment or fence, or an older transition at its fence, is answered stale; the same
//     transition again gets the kept reply; a newer transition at the same fence, or a higher fence,
//     takes the seal over (after the step running). A copy opening or busy with another rare
//     operation (ErrBusy, ErrBackpressure) keeps the seal queued and tries at each tick.
//   - An assignment that leaves this node out changes nothing (a sealed copy stays sealed); one at or
//     below the copy's epoch or fence is stale. Otherwise, once no seal step runs: the protocol copy
//     stops (what waits is refused), its reads end and its queued appends become durable (the next
//     copy starts at tails that no longer move), the copy is cut onto meta.CutPoint at
//     the new epoch (a longer divergent suffix goes; the cursor events cut are forgotten; cursors
//     above the record tail are clamped), and the copy starts its new role: in place when its logs
//     were not cut since it read them (stream.Copy.Reassign keeps what it knows: no reread, so the
//     failover's apply does not grow with the log), else as at boot (a new protocol copy fed every
//     retained batch header); then OpenDone and its log epoch. A sealed copy is released in place, the
//     chosen copy becomes owner at its own tails, the others follow, and a member that held no copy is
//     created on its shard and starts empty. The stream keeps one group: the shard sees the new view
//     and members at its next tick. A copy promoted with its record tail below the latest history
//     start of an earlier epoch (only an accepted owner loss does that) logs a warning and counts it.
//   - The cut of an assignment runs before any role change at the new epoch, so a restarted old owner
//     (reopened in its own epoch, refusing everything) rejoins as a follower by the next assignment
//     that names it, with no recovery of its own. A cut that falls inside a batch (segment refuses
//     it) reads that batch and cuts at its start: the copy fetches the rest from its owner. A cut
//     below the retained head is refused by segment: a seal is then not answered, an assignment
//     reports the copy and leaves it closed (the spec's emptied copy that fetches everything again is
//     not built).
//   - Each shard publishes its copies' roles, epochs and durable tails every few ticks for the node
//     heartbeats (Host.AppendCopyTails, engine.CopyTailSource); a follower whose owner went silent
//     (OnPrimarySilent) carries wire.CopyOwnerSilent until its owner is heard again. OnQuorumLost is
//     counted, and an owner then refuses produces, fetches and cursor requests as unavailable (R24)
//     until shard/heartbeat passes on the reply that brings W copies back within the window (replies
//     count as of the tick their Commit was sent, so stale ones restore nothing); its role does not
//     change: the controller decides whether it stays owner. A second loss in the same epoch is
//     reported again (TestQuorum_SecondLossInTheSameEpochStopsServing).
package streamhost
