// Package sim is the deterministic simulator of the metadata group. It runs N replicas (3 or 5) of the
// real vsr.Replica, each over the real state machine (engine/meta, or a small counter machine that
// makes a double apply visible), with the real heartbeat schedule of shard/heartbeat driven tick by
// tick (R5), on a simulated network and simulated disks.
//
// It owns everything in memory: the network (delay, loss, duplication, reordering, corruption,
// partitions, one-way links, links that come up late at boot), the disks (latency, writes lost on a crash unless synced, a torn last
// write, read errors at restart), crashes and restarts, and a workload of client requests. One seeded
// *rand.Rand draws every choice; it never reads the clock and starts no goroutine, so a seed replays
// exactly: go test ./engine/sim -run TestSim -seed=N, or ringstream sim --seed N.
//
// After every step (a tick of one replica, one delivered packet, one completed persist) it checks:
// no two replicas commit different ops at one op number; a primary in normal status holds every op
// committed so far (committed ops survive view changes and crashes); replicas at the same commit have
// equal state machine digests; a client's reply is the result of applying its request exactly once;
// the replica's own invariants. After the fault phase it heals everything and requires the group to
// make progress and converge within a bound in ticks (liveness). A failure names the seed and step.
//
// Decisions where the design is silent: VSR messages cross the simulated network as real wire frames
// (wire.AppendVSRFrame, ParseFrame, DecodeVSR), so corruption exercises the checksums; Commit and
// CommitReply entries travel as values. Read errors are transient (the restart is retried later):
// a single-disk replica cannot survive losing acknowledged writes, so latent sector errors on synced
// data are not simulated.
package sim
