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
//   - Open runs segment.Open as a job on the shard's ring (all copies of a node open at once, interleaved),
//     then reads every retained batch through the ring to feed the copy its headers (ObserveBatch),
//     and the cursors segment recovered (ObserveCursor, in name order), then OpenDone. A copy whose open
//     or scan fails is logged, listed by Status, and left closed; the other copies serve.
//   - Delete is segment.Copy.Delete (rename, then removals through the ring), then the group goes.
//   - Retention runs every RetainEveryTicks with the spec's bytes and age, never past the copy's
//     RetainLimit (segment.Copy.RetainBelow). segment moves the head when the job starts (inside
//     Jobs.Poll), so the host reports the head to the copy (HeadMoved) before every input that can
//     make it read: a fetch racing the retention is refused as below the head, not failed by a read.
//   - A prepare-ok or empty probe goes through the outbox (SendFrame, a copy of a small frame); a frame
//     the shard refuses (link down, outbox full) is counted and left to the copy's resend timer.
//   - Stop: each copy's OnStop starts its Close job and the shard host's polls the jobs through the
//     shard's drain turns.
//   - A follower's batches are checked three times: the frame's body checksum (the shard's
//     FrameReader), the copy's Decode (segment.DecodeBatch, so a bad batch is refused with the log
//     unchanged) and segment's AppendEncoded. None is dropped: without the copy's check a bad batch
//     would fail the log instead of being refused, and AppendEncoded has no form that trusts its
//     caller. All hashing together was 8.5% of the CPU of a 3-copy produce run. The owner builds
//     the header (and body checksum) of a prepare once for all the followers it goes to.
//   - OnPrimarySilent and OnQuorumLost are counted: failover (seal, promotion) is not hosted here yet.
package streamhost
