// Package shard is ringstream's shard runtime: S shards per node, each one goroutine locked to its OS
// thread (pinned to one CPU when PinCores is set) that owns one ring and everything it touches: its
// groups' heartbeat schedule, its outbound TCP links to every peer node with their outboxes, and the
// connections accepted for it. It carries out requirements R1 to R32 of the commit-batching spec on
// top of the pure schedule in shard/heartbeat.
//
// What it owns: the tick (a ring Timeout every Config.Tick), the one event loop per shard (ring
// completions, then the cross-shard inbox, then paused receives, then sends and wakeups), the
// bounded single-producer single-consumer queues between every pair of shards (woken with MsgRing),
// the per-peer outbox buffers into which Commit and CommitReply batches are encoded in place, the
// reply outboxes, routing of received entries and group-addressed frames to the shard that owns the
// group, and the per-shard counters exported to a caller-supplied prometheus registry.
//
// What it never does: interpret a group's protocol (groups are Group values: engine/metagroup, stream
// copies), read the clock except CLOCK_MONOTONIC once per tick for timestamp_monotonic, block the loop
// on anything but the ring, drop a routed entry silently, or touch one shard's state from another
// shard's thread. Protocol timers are tick counts (R5); the loop's only wall-clock input is the tick
// timer itself.
//
// Decisions where the design and the spec are silent:
//
//   - Links. Each shard dials one TCP link to each peer node and sends only on links it dialed. The
//     dialer's handshake names its shard index and shard count; the node's listener is accepted on shard
//     0, which checks the handshake (cluster, revision 2: R18), answers with its own, and hands the
//     socket to shard (dialer's shard mod S) through the cross-shard queue. Accepted sockets only
//     receive. Replies therefore leave on the replying shard's own link and may arrive at any shard of
//     the primary's node, which routes them by group (R29, R16).
//   - Routing. A group lives on ShardOf(id, S): the metadata group (MetadataGroupID) on shard 0, every
//     other group on a splitmix64 mix of its id mod S. Any shard computes it from the entry or header
//     alone, whatever the sender's shard count (R16).
//   - Receiving. Every connection and link reads frames with a wire.FrameReader, receiving straight
//     into its buffer (a frame that arrives whole is handled without a copy). The handshake is read
//     into a separate header-sized buffer, so not a byte past it is read before it is checked (R18).
//     A frame with a wrong body checksum is dropped whole and counted (FramesDropped), and the
//     connection goes on (R15); a header that fails its checks or a frame past wire.FrameSizeMax
//     closes the connection. A frame larger than RecvBufferBytes is received into a buffer grown for
//     it, which the reader drops once the frame is handled: such frames cost an allocation each.
//   - Back-pressure. A full cross-shard queue stalls the receiving connection on the frame it was
//     handling (wire.ErrStall: the reader keeps the frame, the shard remembers the next entry); the
//     loop retries it on a later turn and reads nothing more from that connection until then. TCP then
//     pushes back on the peer. No entry is dropped or handled twice (R16).
//   - Sends. Each link has two outbox buffers of OutboxBytes: one filled during a tick, one in flight.
//     A tick's Commit batch and reply batch (and any group frames) go out in one Send. A batch that does
//     not fit is not split (R13): the groups that did not fit stay owed and go next tick. A link that is
//     down counts its owed entries as dropped (R25: the group records the member as not connected) and
//     does not retry them; the next heartbeat carries the newest state. A failed send closes the link
//     and drops what was unsent, the reply batch included (R30).
//   - Empty batches are not sent: with one tick for the whole shard there is no "metadata-only tick"
//     to lose, and an empty frame per peer per tick would undo the batching. A tick that owes anything,
//     metadata or not, sends (R11, R27).
//   - Superblocks (R12). At each tick, every primary that owes entries and has a superblock save
//     pending gets a write linked to an fdatasync on the ring, all queued before one Submit. The
//     tick's batches are built when the last of them completes; a group whose save failed (or did not
//     fit on the ring this tick) is left out and its entries stay owed.
//   - Group state is polled once per tick (OnTick, then Role, View, Primary, Commit): a role or view
//     change restarts the schedule, a higher commit owes eager Commits to CommitHolders (R6), so an
//     eager Commit leaves at most one tick after the commit point moved.
//   - Replies: a Commit entry is answered only when accepted (newer, from the current primary, R8/R22);
//     the reply echoes its timestamp_monotonic and carries the backup's member index. It waits in the
//     per-peer reply outbox until the end of the shard's next tick (R27, R28).
//   - Connect plus handshake must finish within HandshakeTimeoutTicks on both ends; a peer that accepts
//     and never answers, or a dialer that never sends its handshake, is closed and counted.
//   - Groups get the shard's ring through Sender.Ring for their own I/O, on the shard goroutine; the
//     shard's own superblock saves (R12) use the same ring.
//   - Reconnect backoff is counted in ticks: ReconnectBaseTicks << attempts, capped at
//     ReconnectMaxTicks, with up to half of it as jitter from a per-shard PCG seeded with (Seed, node,
//     shard).
//   - Wakeups from any goroutine. Each shard keeps a Recv armed on one end of a datagram socketpair;
//     Wake writes one byte on the other (coalesced while one is pending). A socket Recv works the same
//     on both ring backends, so the ring needs no thread-safe entry point. Shards wake each other with
//     MsgRing as before.
//   - Stop sets a flag and wakes every shard. A shard that sees the flag stops ticking, calls OnStop
//     on every group that implements Stopper (finish or abandon your operations), shuts every socket
//     down so its operations complete, and arms a deadline of Config.DrainTimeout.
//   - The drain ends when the ring holds nothing but that deadline. When the deadline fires first,
//     what is still in flight is abandoned with the ring, logged and counted (Stats.DrainAbandoned):
//     the ring offers no cancel, and a Stop that never returns is worse than an abandoned operation.
//   - A drained shard waits until every shard of the node has drained (so no MsgRing targets a closed
//     ring), then closes its sockets, its ring and its wakeup sockets.
//   - Groups are added before Start (AddGroup); adding and removing groups at run time is later work.
package shard
