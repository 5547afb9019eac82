// Package sim is the deterministic simulator of the metadata group. It runs N replicas (3 or 5) of the real
// vsr.Replica, each over the real state machine (engine/meta, or a small counter machine that makes a double
// apply visible), with the real heartbeat schedule of shard/heartbeat driven tick by tick (R5), on a
// simulated network and simulated disks.
//
// It owns everything in memory: the network (delay, loss, duplication, reordering, corruption, partitions
// short and long, one-way links, links that come up late at boot), the disks (latency, slow disks, writes
// lost on a crash unless synced, any subset of a persist's unsynced writes kept whole or torn, a superblock
// copy written over another, persists failing
// with EIO or ENOSPC, log compaction, read errors at restart), processes (crashes, crashes aimed at a persist
// in flight and at the persist of a view just entered, restarts slow and quick, pauses, tick skew), and a
// workload of client requests. Faults that lose state a replica acknowledged are drawn too, within the fault
// budget: its disk wiped (then formatted as its replacement), restored from an old copy (the same), a synced
// sector of a superblock copy, a snapshot slot or the log corrupted, a log append misdirected over older
// records. One seeded *rand.Rand draws every choice; it never reads the clock and starts no goroutine, so a
// seed replays exactly: go test ./engine/sim -run TestSim -seed=N, or ringstream sim --seed N.
//
// After every step (a tick of one replica, one delivered packet, one completed persist) it checks: no two
// replicas commit different ops at one op number; a primary in normal status holds every op committed so far
// (committed ops survive view changes and crashes); replicas that applied one op have equal state machine
// digests (checked inside Apply, for every op); replicas at one commit have equal digests of state and client
// table; a message that vouches for durable state (start-view-change, do-view-change, start-view,
// prepare-ok) leaves only once the sender's synced superblocks hold what it claims; a client's reply is the
// result of applying its request exactly once; the replica's own invariants. Then liveness, twice: a random
// healthy quorum (the core) must make progress while the other replicas stay down or cut off; then everything
// heals, and the group must make progress and converge to one view, one commit and one digest. Each within a
// bound in ticks. A failure names the seed and step.
//
// Each seed draws the cluster shape, the fault rates, and which fault classes it leaves out altogether (swarm
// testing, Options.SwarmOff): runs without some faults reach states the full mix hides.
//
// Decisions where the design is silent:
//   - VSR messages cross the simulated network as real wire frames (wire.AppendVSRFrame, ParseFrame,
//     DecodeVSR), so corruption exercises the checksums; Commit and CommitReply entries travel as
//     values.
//   - Replicas move checkpoints in chunks of 256 bytes, so a state transfer takes many round trips and its
//     sender often takes a newer checkpoint during it.
//   - An assertion of a replica or its state machine (a panic whose message starts "vsr: " or "meta: ")
//     ends the run as a violation with its seed and step; any other panic is the simulator's own.
//   - Read errors are transient (the restart is retried later).
//   - A failed persist is reported with PersistFailed: the replica stops taking part, and the node's
//     supervisor restarts it a while later, at once after the faults stop (a fault drawn when a persist
//     was issued can still complete in the liveness phases). What reached the disk is what a power
//     loss at that point would leave (disk.crash); an ENOSPC persist reaches it not at all, since its
//     first write needs new space (a snapshot slot or the log) and the rest of its chain is cancelled
//     (the superblock copies, in the log file's preallocated header, need none). An ENOSPC disk stays
//     full for a while, so the restarted node fails again at its first persist until then.
//   - A wiped disk must be refused (vsr.ErrUnformatted); the operator then formats it as the lost
//     replica's replacement, which starts in recovery. A disk restored from an old copy is formatted
//     the same way: vsr cannot tell an old copy from a replica that was down (its doc says so), and
//     such a replica voting with the old state would lose committed ops, so the undetected restore is
//     outside the fault budget.
//   - The fault budget: at most f replicas (a minority) may have lost acknowledged state and not yet
//     recovered at one time. More would lose committed ops whatever the protocol does (a committed
//     op is held by f+1 replicas only), or leave no quorum to recover from, so such runs are not drawn.
//     A replica counts from the fault until its recovery is durable (a restart before that recovers
//     again), whatever put it in recovery.
//   - The disk has engine's layout (vsr's storage notes): a persist's log append and the copies of
//     its superblock's area, each carrying the records inline, share one fsync, so a crash keeps any
//     subset of them, each whole, torn or lost; a checkpoint's snapshot, and records too large to go
//     inline, are synced first. The driver repairs at open as engine does: the copy in force to every
//     copy of its area, and the records only it carries appended to the log. A replica that lost no
//     acknowledged state (no wipe, old copy, bad sector or misdirected log append) and yet starts
//     unable to prove its state is a violation: crashes, failed persists and misdirected copies must
//     never cost a recovery. Options.BrokenStorage selects deliberately wrong layouts.
//   - Compaction rewrites the log without the records at or below the checkpoint the synced
//     superblock names, as one atomic replace (engine writes log.new, syncs it and renames it).
//   - A paused node's packets wait for it; its disk keeps writing but it sees no completion until it
//     resumes. A crash ends a pause.
//   - The core of the core liveness phase is drawn among replicas that have not lost state: a
//     replica still recovering cannot help a quorum.
//   - The durability check compares a message with the highest view and (log view, op) the sender's
//     synced superblocks held since it started, so a message held for a persist and sent after a later
//     one (which may have truncated the log) passes, and one sent before any persist covered it fails
//     at once, whether or not a crash would have turned it into a lost op.
package sim
