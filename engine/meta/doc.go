// Package meta is the metadata group's replicated state machine: nodes, streams, each stream's
// assignment, pending recoveries and each stream's history starts. Every change is one Op with a
// binary encoding; an op that depends on the state carries a guard (expected epoch, recovery id,
// starts version, incarnation) and, when the guard does not hold, changes nothing and returns a
// Result whose code names the guard. State implements vsr.StateMachine (Apply, AppendSnapshot,
// Restore, Digest) without importing engine/vsr.
//
// It owns the one rule for W (StreamConfirmPolicy, reached through Assignment.ConfirmCount) and the
// seal threshold R = E - W + 1 (Assignment.SealThreshold) that stream owners and the controller share,
// the rule for a change that needs no recovery (NeedsNoRecovery), and the cut rule a copy applies
// before a role change or a seal (CutPoint, stream-failover spec "Copies with a longer tail").
//
// It never reads the clock, does no I/O, starts no goroutine and ranges over no map unsorted: Apply is
// a function of the op, its op number and the state, so replicas that apply the same ops agree. It
// never decides anything itself: liveness, placement, sealing and the choice of the furthest copy are
// the controller's (engine/control); meta checks and records its decisions. Bytes from the log or a
// snapshot are input: decoders and Restore return errors and never panic.
//
// Decisions where the design is silent:
//
//   - CreateStream carries the stream's first assignment (epoch 1), so every live stream has an
//     assignment and there is no "placed later" state. A new stream needs a policy; the controller
//     fills in the cluster default (majority_durable) before proposing.
//   - Stream ids start at 1 and never reuse another name's id; 0 is left to the metadata group. A
//     deleted name is remembered (its id and last incarnation) so creating it again keeps the id and
//     takes the next incarnation, which keeps data/streams/<id>-<incarnation>/ directories distinct.
//     The list of retired names grows by one entry per distinct deleted name.
//   - SetAssignment moves the epoch by one even though the owner's history does not change, so the
//     expected-epoch guard is a compare-and-set and copies see a new epoch to apply. It records no
//     history start. It is refused while a recovery is recorded for the stream (pending or
//     withdrawn), since the recovery's seal fences at the next epoch and its R was taken from the
//     current assignment.
//   - A recovery's id is the op number that recorded it: unique for the life of the cluster and
//     ascending in log order. Its R is computed here from the current assignment, never taken from
//     the op, so the controller and the owner cannot disagree on it.
//   - Batch ops (RecordRecoveries, CommitRecoveries, SetAssignments, CreateStreams, DeleteStreams;
//     issue 25) carry many streams' single ops as entries, so a failover of many streams costs two
//     ops instead of two per stream, and a batched client create or delete one op per hundred
//     names. CreateStreams' entries are keyed by name (strictly ascending; its entry results name
//     the id each name was given, 0 when refused), the others' by stream id.
//     Each entry keeps its single op's guards and is applied as that op, in entry order: a refused
//     entry changes nothing and the others take effect. The op's code is ok and Result.Entries
//     names each stream's code; an op that does not decode is refused whole (malformed, no
//     entries). Entries are strictly ascending by stream (one entry a stream), at most
//     BatchEntriesMax (100: the largest batch fits a superblock copy inline). The recoveries one
//     RecordRecoveries records share its op number as id; the id is unique per stream, which is all
//     a seal's transition id needs. A result without entries encodes as before; one with entries
//     appends them, so old results decode unchanged. The snapshot format does not change.
//   - A withdrawn recovery stays listed (status withdrawn) until RecordRecovery replaces it by id, so
//     attention can show it; CommitRecovery and AcceptOwnerLoss need a pending one.
//   - CommitRecovery also refuses an owner whose record tail is below the latest history start (the
//     confirmed-prefix guard, checked again here against the state the guard version names), a sealed
//     node that held no copy, and fewer than R sealed copies. Copies of the old assignment that were
//     not sealed are left out of the new one.
//   - AcceptOwnerLoss makes the recovery's proposed members, minus the new owner, the followers.
//   - A node id that was decommissioned can never be registered again, and a node cannot be
//     decommissioned while an assignment or a recovery names it; so every node an assignment or a
//     recovery names is registered.
//   - CutPoint takes the copy's own epoch from its last log-epochs entry, never from its fence or from
//     the epoch of its last record: an entry that starts exactly at a cut stays the copy's epoch.
//     It skips the start recorded for the copy's own node, so an owner promoted by an accepted loss
//     (whose start is the tails it last published) is never cut at its own start.
//   - Epochs are u32 here and in wire, u64 in segment (its log epochs and fence files). A copy
//     converts at the storage boundary; segment's width is left alone (a storage format change).
//   - Stream names follow wire.StreamNameRule (1 to 255 bytes of [A-Za-z0-9._-], not "." or ".."), and
//     copy counts wire.CopiesRule (at most CopiesMax, 7): meta calls wire's rule functions, the one
//     place every layer takes its rules from, so meta imports wire for them. Ops built from what a
//     client, an operator or a peer handed the node are encoded with EncodeOp, which refuses an op
//     that breaks a rule; AppendOp, which panics on one, is for ops built from constants.
//
// The package does not keep a stream's assignment away from a copy whose history starts it cannot
// read: starts live in the same state as the assignment, so a snapshot that does not decode is
// refused whole by Restore.
package meta
