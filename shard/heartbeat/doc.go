// Package heartbeat is the pure heartbeat schedule of a shard: requirements R1 to R32 of the
// commit-batching spec that decide who owes whom a Commit entry on which tick, and what a received
// Commit or CommitReply entry means for the timers that watch a group.
//
// It owns four things, all counted in ticks (R5):
//
//   - Schedule: the shard's tick counter, with one send tick every P ticks (R1) and the idle send ticks
//     that line up with commit_idle_heartbeat_interval (R20). Every group on a shard reads the same
//     Schedule, so idle groups share frames.
//   - Primary: one led group's side. Its first heartbeat goes on the next send tick (R2), a busy group
//     sends on every send tick (R3), it turns idle on a send tick after commit_heartbeat_timeout without a
//     new view or commit_min and sends its first idle heartbeat on that same tick (R20). Eager Commits are
//     owed to the backups that hold the newly committed op on any tick (R6). It stamps strictly growing
//     timestamps (R14), keeps the quorum window on commit_heartbeat_timeout in both states (R24) and
//     records per member whether the last send reached a connected link (R25).
//   - Backup: one followed group's side. Only a newer Commit from the primary of its current view
//     restarts its timeout (R8, R22), with the idle or the busy timeout chosen by heartbeat_state, and it
//     reports once that the primary is silent.
//   - Config and Ticks: the four [cluster] options of R23 in milliseconds with their defaults and toml
//     names, converted once to ticks, and the boot checks of R9 and R23.
//
// It never reads the clock, never does I/O, never starts a goroutine and holds no map, so the shard and
// the simulator (engine/sim) drive the very same code tick by tick. Nothing here allocates after Start.
//
// Decisions where the spec is silent:
//
//   - Tick 1 is the first tick a Schedule hands out; a tick is a send tick when its number is a multiple
//     of P, and an idle send tick when it is a multiple of the idle interval in ticks.
//   - A group that owes a member both a heartbeat and an eager Commit on one tick sends one entry: the
//     heartbeat, which carries the same newest commit_min. Eager alone goes out as Eager.
//   - A group that comes online or becomes primary starts busy: it keeps the short timeout until one full
//     commit_heartbeat_timeout passes without a change (the backups restarted on a busy timeout too).
//   - Owed entries stay owed until the shard reports them sent (Sent). That is how R12 works: a group whose
//     superblock save failed is left out of a batch and its entries go in a later one.
//   - timestamp_monotonic is max(now, previous+1), where now is what the caller passes for the tick (the
//     shard passes CLOCK_MONOTONIC nanoseconds; the simulator its tick count): strictly growing per group
//     even if the clock stalls (R14).
//   - A CommitReply refreshes its member in the quorum window only when it is for the current view, names
//     a backup of the group, echoes a timestamp this primary stamped, and is newer than that member's
//     previous reply: duplicates and replays never extend the window.
//   - A reply hears its member as of the tick the Commit it answers was sent, not as of its arrival
//     (R24 with R14): the Primary keeps a ring of 32 send marks (a timestamp and its tick, at least
//     commit_heartbeat_timeout/31 ticks apart) and rounds a reply's send tick down to the mark at or
//     before its timestamp, so a reply never counts as fresher than it is, and counts up to that
//     spacing less. A reply to a Commit sent before Start or a window or more ago is ReplyExpired.
//   - A quorum loss is reported once per loss, not once per view: after QuorumLost the primary is back
//     when a quorum is heard within the window by Commits sent since the loss, and the window watches
//     again. While the loss holds, counted replies are ReplyShort and only the one that brings the
//     quorum back is ReplyFresh, so a group that sees ReplyFresh replies only (the shard forwards
//     those) serves again on the first one after OnQuorumLost, and no group counts on its own.
//   - Ticks are the caller's: the window is as long in time as the caller's ticks are. A shard counts
//     one tick per firing of its tick timer, so a process that was stopped wakes one tick later,
//     however long it was stopped, and its window does not see the stop.
//   - Config: every option must be a whole multiple of tick_ms. A commit_heartbeat_timeout below twice
//     commit_idle_heartbeat_interval is allowed (R9 and R23 allow it) and only warned about
//     (Config.Warnings, logged by the shard at NewNode): an idle group's quorum window (R24) then spans
//     fewer than two idle heartbeats.
//   - Members are member indexes 0 to MembersMax-1, held in a bit mask.
package heartbeat
