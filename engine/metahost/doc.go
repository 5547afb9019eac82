// Package metahost hosts this node's metadata replica: the metadata group's adapter (owned by the VSR
// work). Group runs one vsr.Replica over engine/meta's State as a shard.Group on shard 0, and persists
// the replica's log, superblock and checkpoints to files of engine/vsr's format (Format makes the
// directory: `ringstream format`). It never interprets metadata ops (meta
// does) nor decides anything about the protocol (vsr does): it moves inputs in and effects out.
//
// What it receives from the node (engine's compose): a Config (engine/config's MetaGroup, converted);
// shard 0, on which the node adds the group; SetWake (the node passes shard.Node.Wake(0));
// SetPersistObserver (the node's fsync metric); and SetController, the controller host running inside
// the replica (engine/controlhost's Host, seen here only as the small Controller interface). The
// package imports nothing of the node.
//
// Decisions where the design is silent:
//   - Persistence runs on shard 0's ring (Sender.Ring), on the shard goroutine, with the store as the
//     Handler: no goroutine or ring of its own. Each persist is one linked chain (snapshot write +
//     fsync for a checkpoint; log write, the superblock copies' writes, one fdatasync; see
//     storage.go for the layout); one chain is in flight at a time,
//     in the replica's order, and the rest wait in the store's queue. The chain's last completion
//     makes the persist durable: the store marks it done in the completion, starts the next persist
//     there, and the replica hears of it (Advance) in the same loop turn (OnTurn, the shard's TurnHook). A chain is queued only when the
//     ring has room for all of it; otherwise (ErrQueueFull) the persist stays queued and the next
//     tick tries again. The shard's superblock saves (R12) are not used: they run only for
//     primaries that owe Commit entries, while a VSR backup must persist every prepare before it
//     acknowledges it.
//   - PendingSuperblock is always empty: the replica's own superblock is written before any message
//     that depends on it, and the commit point in a Commit entry needs no save (a replica that forgets
//     it learns it again).
//   - After a checkpoint, a log file past LogCompactBytes is rewritten without the records at or below
//     the checkpoint, before the next persist starts, every step on the ring (compact.go):
//     read the log, open log.new, write and fdatasync it, rename it over the log linked to an fsync of
//     the directory (opened once at open). When the ring has no room for a step, that compaction is
//     given up and the next checkpoint tries again.
//   - Opening and recovering the files runs before the shard starts, with plain syscalls on the
//     opening goroutine. Only a directory made by Format (`ringstream format`) opens: a missing or
//     empty one is ErrUnformatted, so a replica that lost its disk never starts as a new one. The
//     format says whether the replica is a member of a cluster being created (fresh) or replaces a
//     lost one (it recovers through the group, vsr's recovering status, before it acts).
//   - One fdatasync per persist: the superblock copies live in a header area of the log file (two
//     areas of vsr.SuperblockCopies copies, each in its own 8 KiB), a persist writes its log records
//     and, to every copy of the area of its sequence, its superblock with the same records inline,
//     and one fdatasync covers both (vsr's storage notes say why any subset of those writes that a
//     power loss keeps leaves the new state or the previous one). Records over vsr.InlineMax and
//     checkpoints cost a second fsync, before the copies. At open, the copy in force is rewritten to
//     every copy of its area that differs and the records only it holds are appended to the log
//     (plain pwrite, one fdatasync) before the replica acts; storage Recover could not prove is left
//     as it is (the replica recovers).
//   - A failed persist (any step of the chain: EIO, ENOSPC, a short write) stops the store and the
//     replica hears of it in the same loop turn (vsr.Replica.PersistFailed): it acknowledges nothing more and
//     is never primary again until the node restarts it; Status reports the error. The recovery nonce
//     is drawn from crypto/rand at open.
//   - The metadata group's Commit entries carry incarnation 0.
//   - Frames reach the replica as they arrive (OnFrame steps it) and their effects are pumped once per
//     loop turn, in OnTurn: the prepares of one burst become one persist on a backup instead of one
//     persist each, which queued one behind another (TestMetaGroup_BackupPersistsABurstTogether; the
//     failover of 300 streams at once, whose controller fills the pipeline, took 1.4 s before and
//     0.55-0.61 s after: BENCHMARKS.md).
//   - A pump that answered a waiting proposer yields (runtime.Gosched) before the shard goroutine
//     blocks in the ring again: the woken goroutine would otherwise wait for sysmon to retake the P
//     of a thread parked in io_uring_enter (BenchmarkMetaGroupCommitYield measures both).
//   - Propose and Status may be called from any goroutine: a proposal waits in a locked inbox until
//     the next loop turn of shard 0, which Propose wakes (SetWake: the node passes Node.Wake(0)), or
//     the next tick without one; Status is a copy the shard goroutine publishes after each event. What
//     a turn's events make the replica send leaves in that turn (OnTurn runs before the sends).
//   - State transfer (vsr's transfer.go) needs nothing of the host but frames: a chunk of
//     vsr.Config.SnapshotChunkBytes must fit in what a peer link's outbox keeps for frames
//     (shard.Config.FrameRoom; engine's defaults are held to it by a test). Status.Transfer carries
//     the replica's counters; a refused checkpoint is one ERROR line naming the cause, an abandoned
//     transfer a WARN, an installed checkpoint an INFO with its size and chunks.
//   - Eager failover (events.go): the grace counts ticks from the tick after shard 0's link
//     to the primary's node went down; only that shard's own link counts (it is where the group's
//     frames leave). It fires once per view, and only on a backup in normal status.
package metahost
