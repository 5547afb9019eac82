// Package vsr is the metadata group's consensus: Viewstamped Replication as a pure state machine.
//
// It owns one replica's protocol state (view, status, log, commit point, checkpoint, client table) and
// drives a StateMachine with committed ops. Input is Tick, Step (a peer's message), Propose (the local
// controller), Advance (a persist is durable) and the heartbeat signals that shard/heartbeat derives:
// OnCommitEntry (a Commit entry from the primary, R8, R22), OnPrimarySilent (the backup's timeout) and
// OnQuorumLost (the primary's window, R24). Output is Effects from Ready: storage writes to make durable
// first, then messages and client replies. It never reads the clock, never calls ring, never starts a
// goroutine, never blocks and never ranges over a map.
//
// What the replica does:
//   - Normal operation: the primary (view mod n) orders requests, sends prepares, and commits the
//     highest op that a quorum, itself included, holds durably in its view. Backups append prepares in
//     op order only and acknowledge after the entry is durable. Every replica applies committed ops in
//     order. The primary's commit point reaches backups in the shard's Commit entries (R4), not in a
//     VSR message.
//   - View change: start-view-change, do-view-change (the sender's whole log above its checkpoint), and
//     start-view. The log with the highest (log view, op) wins. A stalled view change moves on to the
//     next view after ViewChangeTimeoutTicks (backing off per attempt, offset per replica).
//   - Persistence: a superblock {view, log view, op, head, commit, checkpoint, identity, recovering}
//     in two areas of SuperblockCopies copies written in turn, each copy carrying the persist's log
//     records, and an append-only log, one fsync per persist (storage.go). Every message that vouches for durable state (prepare-ok, start-view-change,
//     do-view-change, start-view) is held until Advance covers the persist that made it durable.
//   - Recovery (recovering.go): a replica that lost its state, or cannot prove it holds its latest,
//     learns the group's from a quorum of other members, the latest view's primary among them, before
//     it votes, acknowledges or applies anything (VR Revisited's recovery, with a nonce).
//   - Repair and state transfer: a backup missing ops sends request-prepare; one whose missing ops are
//     at or below the sender's checkpoint gets the checkpoint instead, in chunks it pulls (transfer.go):
//     each chunk names the checkpoint (op and the xxhash64 of the whole) and its length, the receiver
//     asks for the next offset, and checks the assembled whole before it installs it.
//   - A client table: the latest committed request per client with its result. A retried request is
//     answered from it and never applied twice.
//
// Decisions where the design is silent:
//   - The log is a hash chain: each entry's checksum covers its parent's. Equal checksums at one op mean
//     equal logs up to it, which lets a backup keep its committed prefix when it installs a new log, lets
//     the storage stay append-only (the superblock's head picks the chain), and rejects a log that does
//     not extend what this replica committed.
//   - A backup in normal status ignores a start-view-change for a higher view: only its own heartbeat
//     timeout (or a do-view-change, or a start-view) moves it. The primary joins it: a replica that
//     cannot hear the primary (or came back in a higher view, which it can never leave) would otherwise
//     stay out of the group until the next failure. The cost is one view change when such a replica
//     returns, as in Raft without pre-vote. Since such a backup may drop a start-view-change it later
//     needs (it suspects the primary a moment after a peer did), a replica in a view change answers the
//     first start-view-change it gets from each peer in that view with its own, once: the view change
//     then ends without waiting for the repair timeout's resend.
//   - A replica that restarts as the primary of its view starts a view change instead of resuming: it
//     may have prepared ops it never persisted. A fresh replica (only the format step's superblock)
//     sends nothing before its first own superblock is durable, so one that restarts fresh sent nothing before and may resume as
//     primary of view 0 without contradicting a prepare a backup holds.
//   - A wiped replica is told apart from a new one by the format step, not by what the replica finds:
//     storage with no superblock is ErrUnformatted and never starts. FormatSuperblock writes either a
//     fresh member of a cluster being created (it starts at view 0, as before) or, with recovering
//     set, a replacement for a lost replica (it starts in recovery). Recovery waits for a quorum of
//     members other than itself (VR Revisited): in a group of three, a wiped replica recovers only when
//     both others are in normal status. A replica that restarts in the middle of a recovery recovers
//     again (the superblock keeps the recovering flag until the recovery's own persist clears it).
//   - A recovering replica discards whatever its storage held and starts from the empty state: the
//     latest primary's log, after its checkpoint when the log starts above op 0, is all it keeps.
//   - A recovering replica takes the view its answers name, even when its own storage knew a higher
//     one: a view that no quorum answers from never started.
//   - A disk restored from an old copy (every superblock copy consistent, only old) cannot be told
//     from a replica that was down for a while; it is not detected.
//   - A snapshot install raises the commit point to the checkpoint's op, and to the sender's commit
//     only when the sender is in this replica's view and this replica is normal in it: entries past
//     the checkpoint that this replica holds from an older view may have been replaced.
//   - A backup answers a prepare at or below its checkpoint with a prepare-ok for the checkpoint's op
//     (committed, so on every later view's chain): the primary re-sends from a backup's last
//     acknowledgement, and a checkpoint installed since may lie past every op it re-sends.
//   - A failed persist (PersistFailed) ends the replica's part until its node restarts it; it is not
//     retried, since what reached the disk after a failed fsync is unknown.
//   - The client table keeps ClientsMax sessions and evicts the one whose last op is oldest; a client
//     evicted and then retrying an old request could have it applied again (the usual VSR limit; the
//     metadata group's clients are the nodes, far fewer than the default 4096).
//   - The superblock's commit is written whenever the superblock is, not each time the commit moves: a
//     replica that restarts re-applies up to the commit it saved and learns the rest from the primary.
//   - State transfer is pulled, one chunk in flight (SnapshotChunkBytes, 256 KiB by default): the
//     receiver sets the pace and holds at most one checkpoint's bytes, bounded by SnapshotBytesMax
//     (1 GiB by default), which it checks against the announced length before it keeps a byte
//     (ErrSnapshotTooLarge). The assembled checkpoint must match the xxhash64 its chunks named
//     (ErrSnapshotChecksum), then decode at the op they named, then restore; a refusal is counted
//     (Stats.SnapshotsRefused, with the cause) and the next repair starts over. A chunk that does not
//     come is asked again on the repair timeout; after three timeouts without one the transfer is
//     abandoned (counted) and the usual repair asks the primary again. A sender answers from the
//     checkpoint the ask names while it still serves it (the one before its latest, kept only while a
//     peer asks for it), else from its latest, whose identity makes the receiver start over on it.
//   - Checkpoints every CheckpointOps commits; the log keeps the entries since the previous checkpoint.
//     The storage format leaves compaction of the append-only log to its driver: records at or below
//     the checkpoint the superblock names are dead (engine's metadata group rewrites the file).
package vsr
