// Package segment keeps one stream copy's logs on disk and does all of that disk I/O through the
// owning shard's ring (either backend): the record log and the cursor event log, each a list of
// segment files with a sparse index; group commit with a durable tail; reads by offset; log
// epochs; cut; seal digest and verify mode; recovery on open; retention; cursor snapshots; and the
// fence epoch of a sealed copy.
//
// It owns the files under the copy's directory (records/, cursors/, epochs, fence, cursors.snap)
// and the buffers it hands to the ring. It never reads the clock (retention ages come from a
// caller-supplied now in unix ms), never starts a goroutine, and never retains a caller's slice
// after a call returns, except a Read's buffer, which belongs to the read until ReadDone. Every
// method runs on the owning shard's goroutine, the locked OS thread that owns the ring.
//
// Nothing in the package blocks the shard. Steady state (appends and their group commits, reads
// for consumers and followers, the digest of a segment that just rolled, with its sidecar, and
// the seal: fence write and digest) is queued on the ring and finishes in Handler completions.
// The rare operations (Open with recovery, Cut, AppendEpoch, Retain, WriteCursorSnapshot, Close,
// Delete) run as jobs of the shard's Jobs and report through Events.Done.
//
// The host contract: one Jobs per shard, made and used on the ring's thread. Once per loop turn,
// after Dispatch has run the turn's completions and outside Dispatch, the shard calls Jobs.Poll
// (the per-turn hook): it resumes the jobs whose operations completed, reports those that ended,
// and flushes every copy opened on it that has work (an idle copy costs a turn nothing). Poll queues ring operations and never waits, submits or
// dispatches. Any method but the ...Sync ones may be called from inside a completion handler or
// an Events callback. The ...Sync forms (OpenSync, CutSync, ..., VerifySync) drive the ring with
// Wait and Dispatch: for tools and tests only, never from inside a handler.
//
// Decisions where the design is silent:
//
//   - Rare operations are coroutines (iter.Pull) over the same sequential code the ...Sync forms
//     run. Where that code needs the ring, it queues one operation with its job as Handler and
//     suspends; the completion only records the result and marks the job ready; Poll resumes it.
//     A coroutine switches on the same locked OS thread and never runs beside its caller, so the
//     ring's single-issuer rule and the race detector hold; an explicit state machine per
//     operation would have duplicated the tested recovery code.
//   - A job that finds the ring full, or waits for its logs to go quiet (cut, close), waits for
//     the next Poll. A copy runs one rare operation at a time (ErrBusy). Open, Cut, Close and
//     Delete hold the copy: appends, reads and seals get ErrBusy until Done. Retain, AppendEpoch
//     and WriteCursorSnapshot let appends and reads go on: retention detaches the segments it
//     removes when it starts, and skips those a read, digest or seal uses.
//   - Jobs.Abandon (a Stop whose ring goes away) ends every job with ErrClosed; late completions
//     are ignored and files a job held may stay open.
//   - Delete renames the copy directory to <dir>.deleted and fsyncs the parent before removing
//     anything, so a crash never leaves a partial copy that would open.
//   - Group commit: Append copies the batch into the pending group's buffer (the one copy) and
//     Flush, called by Jobs.Poll once per loop turn, hands the group to the ring as one WRITEV per
//     segment file linked to one FSYNC(datasync); a group that crosses a roll creates the new file
//     with an async OPENAT first and adds a directory fsync. One group is in flight at a time;
//     the next starts when it completes. The durable tail moves, and AppendDone fires for each
//     append in order, only when every fsync of the group has completed. Before queueing a chain
//     the log checks that the ring has room for all of it even if everything in flight were still
//     unsubmitted, so ErrQueueFull can never split a linked chain; without room it waits for the
//     next Flush. Append refuses (ErrBackpressure) a batch that would take the pending group past
//     PendingBytesMax or past the ring operations one group may use (two per file plus one), and
//     a ring with fewer than four submission entries is refused at Open.
//   - The bytes a follower receives are the bytes the owner appended, encoded once: the owner
//     encodes each batch with AppendBatch (BaseOffset set to Records().NextOffset()) into its own
//     buffer, appends it with AppendEncoded, and sends from that buffer, which it keeps until its
//     sends complete; followers store the frame with AppendEncoded. The log copies the batch into
//     its group buffer (the one copy on the write path) and hands out no view of that buffer, so
//     no pin or release can hold a group commit back. AppendEncoded checks the header again (not the
//     payload's checksum: each byte is hashed once per hop, and reads and recovery check it). Pinned by TestAppend_OwnerSendsTheBytesItAppended.
//   - Reads go to the caller's buffer (the one copy of a payload) and start at the sparse index
//     entry at or below the offset asked for; BatchIter skips to it. Reads see durable bytes only.
//   - The cursor log commits only when asked (Copy.SyncCursors, a seal, a snapshot) or when
//     Config.CursorSyncBytes of events are queued: cursor events get no fsync of their own.
//   - A cursor is deleted by a tombstone event in the cursor log (Copy.DeleteCursor; cursor.go has
//     the format), replicated and replayed like a commit. A snapshot leaves a deleted cursor out, so
//     compaction forgets it; a cut below the tombstone forgets the delete with every other event past
//     the cut (the new owner's history has no delete). Commits may move a cursor backwards: the
//     last event wins.
//   - A failed write or fsync fails the log for good (ErrFailed): after a failed fdatasync the
//     page cache cannot be trusted, so the copy must be reopened (Close, then Open: recovery cuts or
//     makes durable what the failed group left). None of the group's appends is acknowledged
//     (TestGroupCommit_FailedIsNeverDurable). The other refusals are not failures: ErrBusy (a rare
//     operation runs, or holds the copy) and ErrBackpressure (queue or ring full) ask the caller to
//     try again later; ErrFenced, ErrBelowHead, ErrBeyondTail, ErrNotBoundary, ErrEpochOrder,
//     ErrOffsetOrder and ErrInvalidBatch refuse that one request and leave the logs as they were.
//   - No operation outlives its descriptor: a segment closed by a roll keeps its descriptor until its
//     closing digest ran (a read that ends first does not close it), retention skips segments a
//     digest, read or zero write still uses, and Close waits for every ring operation of the copy in
//     flight, even on a failed log, before it closes the files.
//   - A batch never spans segments. A segment rolls when the next batch would take it past
//     SegmentBytes. Segment files are named by base offset in 20 digits. Each closed segment gets a
//     sidecar <base>.index (sparse index, digest, sizes, newest timestamp) written after its digest
//     is known: hashed as the log queued its bytes when the log created the segment and nothing but
//     appends changed it (rundigest.go; reading 64 MiB back and hashing it again at every roll cost
//     each node a copy and a hash per byte, issue 26), else computed through the ring by reading the
//     file back; the sidecar is not fsynced, because a torn or missing one is
//     rebuilt by scanning, and a valid one proves every byte of its segment was durable. The active
//     segment's index lives in memory and is rebuilt by the scan on open.
//   - Recovery: the segments after the last one with a valid sidecar are the unsettled tail (a
//     crash can only have torn them, since a sidecar is written after its segment is durable and
//     one group commit is in flight at a time). The first bad batch there is cut with everything
//     after it, with a slog warning giving the file, position and bytes cut; so is a segment that
//     does not start where the previous one ends (a group that crossed a roll writes both files
//     in parallel chains, and a crash can land the second without the first). Zeros from the last
//     batch to the end of a file are prewritten space, not damage: they are truncated and counted
//     apart (RecoveryReport.ZeroTailBytes), and the segments after them stay; so are other bytes
//     past the batches of a segment the next one follows exactly (a recycled file's old bytes,
//     RecoveryReport.StaleTailBytes). What open read is fdatasynced before it is reported
//     durable (an empty segment needs no fdatasync). A bad batch or gap in or before a settled
//     segment is an error naming the file and byte, and so is a closed segment shorter than its
//     sidecar says. Settled segments are trusted on open (their sidecar is checked against the file size
//     only); Verify recomputes their digests.
//   - Preallocation: segments are never fallocated. Measured on this machine (BENCHMARKS.md,
//     "segment benchmarks", BenchmarkPrealloc), a 4 KiB write + fdatasync into fallocate'd space
//     cost as much as or more than on a growing file (the unwritten extents' conversion is
//     journalled), while blocks already written were about 2x cheaper.
//   - Two ways to commit onto written blocks, both on by default, measured by
//     BenchmarkSegmentModes against a same-run plain write + fdatasync: prewriting
//     (Config.PrewriteBytes: zeros written through the ring 1 MiB ahead of the active segment's
//     data, reaching the disk with the next group commit) and recycling (Config.RecycleSegments:
//     retention keeps retired record segments as spares and a roll renames one to the next name,
//     see recycle.go). Over three runs on the shared machine, at 4 KiB commits both cost
//     0.45-0.75x the growing-file baseline; at 4 MiB commits recycling cost 0.24-0.45x and
//     prewriting, which doubles the bytes written, 0.5-1.35x. A log with a spare recycles it and
//     does not prewrite over it; a log without
//     one (a new copy, retention not yet run) prewrites, from its first append since open on: an
//     idle copy writes no zeros (a node booting 3,000 idle copies wrote 3 GB of them before). A
//     closed segment is cut back to its data (async ftruncate) before its digest and sidecar; a
//     clean Close trims the active segment. The cursor log does neither: its commits are rare.
//   - The seal digest is xxhash64 over (base, size, file digest) of each retained segment, so two
//     copies with the same bytes in the same segments agree. Appends queued before a seal are
//     committed and covered; appends from an epoch below the fence are refused from the call on,
//     until a log epoch at or past the fence is recorded (the copy's role change at the new epoch:
//     a follower then takes the new owner's records of older epochs).
//   - Log epochs: a cut drops the entries whose record start lies past the record cut; entries at
//     or below it stay, their cursor start clamped to the cursor cut (a cut on the cursor side only
//     keeps the copy's own epoch: dropping the entry would make an older epoch its own, and the next
//     cut, taking that epoch's lower history starts, would remove confirmed records). A clamp
//     rewrites the file atomically (epochs.tmp, fsync, rename, fsync dir); a drop alone truncates.
//     Entries must grow (epoch up, starts not down).
//     An epochs file no longer than its header holds no entry (entries follow a durable header),
//     so open rewrites whatever a crash during its creation left there.
//   - The fence file holds two checksummed slots written alternately, so it is replaced atomically
//     without a rename. Cursor snapshots use write, fsync, rename, fsync dir.
//   - Every create, rename and removal is followed by an fsync of its directory before it is
//     relied on: what open creates (the log directories, the fence and epochs files: one fsync of
//     the copy directory for all of them, then one of its parent when the copy directory is new),
//     a rolled segment (in its group commit), the cursor snapshot's rename, segments removed by a
//     cut, by recovery or by retention, and a delete's rename and removals.
//   - Renames, unlinks and directory creation go through the ring (RENAMEAT, UNLINKAT, MKDIRAT).
//     The directory listing on open and delete (getdents) and fstat of open files are plain
//     syscalls: io_uring has no operation for the first, and the second reads an inode already
//     in memory. Both occur only on the rare paths.
//   - Every file format carries a magic and a version: batches, sidecars, epochs, fence, cursor
//     snapshot.
//   - Descriptors: between operations a copy holds four open, its two log directories (a roll
//     creates the next segment relative to one and fsyncs it in the group commit) and its two
//     active segments. The copy directory, the epochs and fence files and the cursor snapshot
//     are opened by path (AT_FDCWD) through the ring for the operation that needs them and
//     closed after it: a seal opens the fence file, writes and fdatasyncs it (linked), and
//     closes it. A closed segment keeps its descriptor only until its closing digest and sidecar
//     are done and no read shares it; a read of a closed segment opens the file for itself and
//     closes it after (three ring operations instead of one, on the catch-up path only), and the
//     rare paths open the ones they touch and close them when they end. Recovery stats settled
//     segments by name (fstatat) without opening them.
//   - Parking: a host may park a quiet copy (Copy.Park), closing those four through the ring, so an
//     idle copy holds no descriptor at all: 10,000 idle copies would otherwise need 40,000, above
//     the limits many servers run with (BENCHMARKS.md, issue 11 (e)). Work on a parked copy
//     reopens what it needs through the ring (OPENAT by whole path) before it goes on: an append,
//     a sync or a seal reopens that log's directory and active segment (one turn, two operations
//     per log; the first commit after a park pays one open's latency), the rare operations reopen
//     what they touch, and reads open their own segment as reads of closed segments do, leaving
//     the copy parked. The segment reopened is the one active at the park, even when appends
//     queued since roll past it. A failed reopen fails the log. segment keeps no clock: the host
//     decides when a copy is idle (Copy.Activity counts appends, reads, seals and reopens, so a
//     host that parked a copy and sees the count unchanged knows it is still parked).
//   - A shard runs at most JobsRunningMax rare operations at once; later ones wait their turn in
//     order (the copy is busy meanwhile). A node opening 10,000 copies at boot thus holds a few
//     descriptors per running open, about 640 per shard at the peak, instead of all of them at
//     once.
package segment
