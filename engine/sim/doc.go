// Package sim is the deterministic simulator of the metadata group. It runs N replicas (3 or 5) of the
// real vsr.Replica, each over the real state machine (engine/meta, or a small counter machine that
// makes a double apply visible), with the real heartbeat schedule of shard/heartbeat driven tick by
// tick (R5), on a simulated network and simulated disks.
//
// It owns everything in memory: the network (delay, loss, duplication, reordering, corruption,
// partitions short and long, one-way links, links that come up late at boot), the disks (latency,
// writes lost on a crash unless synced, a torn last write, persists failing with EIO or ENOSPC, log compaction, read errors at restart), processes (crashes, crashes
// with a persist in flight, restarts, pauses, tick skew), and a workload of client requests. One
// seeded *rand.Rand draws every choice; it never reads the clock and starts no goroutine, so a seed
// replays exactly: go test ./engine/sim -run TestSim -seed=N, or ringstream sim --seed N.
//
// Faults that lose state a replica acknowledged (its disk wiped, restored from an old copy, a synced
// sector corrupted, a superblock write misdirected over the newest copy, a log append misdirected
// over older records) run when Options.LostState is set.
//
// After every step (a tick of one replica, one delivered packet, one completed persist) it checks:
// no two replicas commit different ops at one op number; a primary in normal status holds every op
// committed so far (committed ops survive view changes and crashes); replicas that applied one op
// have equal state machine digests (checked inside Apply, for every op); replicas at one commit have
// equal digests of state and client table; a client's reply is the result of applying its request
// exactly once; the replica's own invariants. Then liveness, twice: a random healthy quorum (the
// core) must make progress while the other replicas stay down or cut off; then everything heals, and
// the group must make progress and converge to one view, one commit and one digest. Each within a
// bound in ticks. A failure names the seed and step.
//
// Decisions where the design is silent:
//   - VSR messages cross the simulated network as real wire frames (wire.AppendVSRFrame, ParseFrame,
//     DecodeVSR), so corruption exercises the checksums; Commit and CommitReply entries travel as
//     values.
//   - Read errors are transient (the restart is retried later).
//   - A failed persist stops the node (fail-stop, as a process that exits on a write error): the
//     failed persist and every later one never reach the disk. An ENOSPC disk stays full for a while,
//     so the node fails again at its first persist until then.
//   - The fault budget: at most f replicas (a minority) may have lost acknowledged state and not yet
//     recovered at one time. More would lose committed ops whatever the protocol does (a committed
//     op is held by f+1 replicas only), so such runs are not drawn.
//   - Compaction rewrites the log without the records at or below the checkpoint the synced
//     superblock names, as one atomic replace (engine writes log.new, syncs it and renames it).
//   - A paused node's packets wait for it; its disk keeps writing but it sees no completion until it
//     resumes. A crash ends a pause.
//   - The core of the core liveness phase is drawn among replicas that have not lost state: a
//     replica still recovering cannot help a quorum.
package sim
