// Package shard is ringstream's shard runtime: S shards per node, each one goroutine locked to its OS
// thread (pinned to one CPU when PinCores is set) that owns one ring and everything it touches: its
// groups' heartbeat schedule, its outbound TCP links to every peer node with their outboxes, and the
// connections accepted for it. It carries out requirements R1 to R32 of the commit-batching spec on
// top of the pure schedule in shard/heartbeat.
//
// What it owns: the tick (a ring Timeout every Config.Tick), the one event loop per shard, the
// bounded single-producer single-consumer queues between every pair of shards (woken with MsgRing),
// the per-peer outbox buffers into which Commit and CommitReply batches are encoded in place, the
// reply outboxes, routing of received entries and group-addressed frames to the shard that owns the
// group, and the per-shard counters exported to a caller-supplied prometheus registry.
//
// What it never does: interpret a group's protocol (groups are Group values: engine/metagroup, stream
// copies), read the clock except CLOCK_MONOTONIC once per tick for timestamp_monotonic, block the loop
// on anything but the ring, drop a routed entry silently, or touch one shard's state from another
// shard's thread. Protocol timers are tick counts (R5); the loop's only wall-clock input is the tick
// timer itself, and the clock it reads when the timer fires: a timer that comes back half a quorum
// window late or more (a stopped or starved process) skips the ticks whose time passed, so windows
// counted in ticks see it (timerTick).
//
// # The loop
//
// One turn: wait for a completion; dispatch the turn's completions (the tick among them); run the
// functions other goroutines queued (Node.Run, AddGroup, RemoveGroup); drain the cross-shard inbox;
// run every group's TurnHook; send the late batch of groups whose saves completed this turn; resume
// paused receives; start the sends; wake the shards this one queued messages for. The tick drives the
// heartbeat schedule and tick-counted timeouts, nothing else.
//
// # The host interface
//
// A Group is what the shard schedules and routes to. Optional interfaces extend it, each checked once
// when the group is added, each called on the shard goroutine:
//
//   - TurnHook.OnTurn, once per turn outside Dispatch and before the sends, in ascending group id
//     order: logs flush their group commits, groups queue data frames, and what they queue leaves in
//     the same turn.
//   - LinkWatcher.OnLinkUp and OnLinkDown, for the shard's own link to each peer node.
//   - OutboxWatcher.OnOutboxDrained, once after a refusal for room, when the link sent everything.
//   - Stopper.OnStop, when the shard drains for Stop or the group is removed: finish or abandon the
//     operations you queued on the ring.
//   - DataSent, the outcome of each Sender.SendData.
//   - Sleeper.SleepUntil, after each poll: a group with no timer of its own due sleeps, off every
//     tick's poll, until the tick it names, the shard's next send tick, or an input (sleep.go).
//
// From any goroutine: Node.AddGroup and Node.RemoveGroup (before or after Start), Node.Run (a
// function on a shard, at once), Node.Wake. Node.SetNodeHandler (before Start) receives node-level
// frames (Group 0, other than batches) on the shard that received them; one that also implements
// UnroutedHandler gets the frames for groups the node does not hold, on the group's shard (a
// stream's seal or assignment reaching a node with no copy yet). Config.WrapRing wraps each
// shard's ring for tests (a storage fault model, a slow disk).
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
//     closes the connection.
//   - Receive buffers. Accepted connections, where batches and data frames arrive, read into
//     RecvBufferBytes (default 2 MiB + 512): frames up to that size cost no allocation. A larger one
//     is received into a buffer grown for it and dropped after it. Outbound links hear nothing but the
//     peer's handshake and read into 16 KiB. A client connection starts with 64 KiB; once its frames
//     outgrew that (a producer's batches), it gets a buffer doubled until it holds the largest one,
//     up to 2 MiB, when its reader is empty, and keeps it, so that each such produce costs no
//     allocation and no clearing of a buffer only received into. Only connections that sent large
//     frames pay the memory; a frame past 2 MiB still gets a buffer of its own, dropped after it.
//   - Receives are sized so that large frames are never moved: the rest of a frame of 64 KiB or
//     more is read alone, ending on its last byte, and any other read takes at most 64 KiB. A large
//     frame then starts near the front of the buffer and ends its contents, and the reader starts at
//     the front again after it. Frames up to RecvBufferBytes - 64 KiB are received with no copy in
//     user space; Stats.RecvBytesMoved counts the bytes the reader did move.
//   - A header reserves nothing. The buffer grown for a frame larger than a reader's buffer grows as
//     the frame's bytes arrive (wire.FrameReader doubles it when full, up to the frame's size; those
//     copies count in RecvBytesMoved), so memory follows the bytes peers and clients actually sent,
//     not the sizes their headers claim, and a header followed by silence is ended by the frame
//     timeout (ClientConfig.FrameTimeoutTicks, Config.PeerFrameTimeoutTicks).
//   - Back-pressure. A full cross-shard queue stalls the receiving connection on the frame it was
//     handling (wire.ErrStall: the reader keeps the frame, the shard remembers the next entry); the
//     loop retries it on a later turn and reads nothing more from that connection until then. TCP then
//     pushes back on the peer. No entry is dropped or handled twice (R16).
//   - Sends. Each link has two outbox buffers of OutboxBytes: one filled during a tick, one in flight.
//     A tick's Commit batch and reply batch (and any group frames) go out in one Send.
//   - Batch room (R13). A batch is never split. Config bounds the groups per shard
//     (GroupsPerShardMax) and the reply outbox, validation requires OutboxBytes to hold both largest
//     batches with their headers, and SendFrame frames may use only the room above that reserve: a
//     tick's Commit entries to a peer always leave in one frame. A frame larger than that room is
//     refused with ErrFrameTooLarge (send it with SendData).
//   - Data frames. SendData queues the owner's header and body (DataQueueFrames per peer) and sends
//     each with one SENDMSG over the two slices: no copy in user space. The link alternates between
//     its outbox and its data queue at frame boundaries. DataSent reports each frame once, in order:
//     nil when the kernel took it whole, ErrLinkDown when the link failed first (the frame in flight
//     at its completion, the others at once).
//   - A cross-shard frame is copied into the queue message; the frame a peer's shard i sends lands on
//     this node's shard i mod S, which owns the group when both nodes run the same S.
//   - Node-level frames run the NodeHandler on the receiving shard, not on one chosen shard: node
//     heartbeats from every peer shard then spread over the shards.
//   - R25 is recorded from each send's outcome. A link that is down counts its owed entries as
//     dropped, the group records the member as not connected at once, and the entries are not
//     retried: the next heartbeat carries the newest state. An entry in the outbox of a link that is
//     up is recorded connected when the send that carries it completes, not connected when that send
//     fails. A failed send closes the link and drops what was unsent, replies included (R30).
//   - Empty batches are not sent: with one tick for the whole shard there is no "metadata-only tick"
//     to lose, and an empty frame per peer per tick would undo the batching. A tick that owes anything,
//     metadata or not, sends (R11, R27).
//   - Superblocks (R12). At each tick, every primary that owes entries and has a superblock save
//     pending gets a write linked to an fdatasync on the ring, all queued before one Submit. The
//     tick's batches leave at once with every group whose save is not pending, and with the replies
//     (R28). A group whose save completes later goes in a late Commit batch at the end of the turn
//     it completes in (one per peer per turn, no replies), with the commit point its superblock holds.
//     A save still in flight at the next tick is not asked again; a group whose save failed (or did
//     not fit on the ring) stays owed and is asked again at the next tick.
//   - Save completions reach the group's slot (the slot is the ring Handler), not a position in a
//     slice: a group added or removed meanwhile cannot misdirect one.
//   - Groups come and go at run time through the owning shard's control queue. A removed group hears
//     OnStop; its save still in flight completes on its slot and is counted.
//   - Sleeping groups. A node of tens of thousands of quiet stream copies cannot poll each on every
//     tick (10,000 on a 2 ms tick took most of a core). A Sleeper whose heartbeat side owes nothing
//     (a backup; an idle primary whose heartbeat left) sleeps between send ticks: every send tick
//     polls every group, so the schedule, idle heartbeats and an idle primary's quorum window are
//     kept there (a lost quorum of an idle sleeping primary is heard up to one broadcast interval
//     late; any reply or other input wakes it at once); a backup's silence deadline is an alarm.
//   - Group state is polled once per tick (OnTick, then Role, View, Primary, Commit): a role or view
//     change restarts the schedule, a higher commit owes eager Commits to CommitHolders (R6), so an
//     eager Commit leaves at most one tick after the commit point moved.
//   - Replies: a Commit entry is answered only when accepted (newer, from the current primary, R8/R22);
//     the reply echoes its timestamp_monotonic and carries the backup's member index. It waits in the
//     per-peer reply outbox until the end of the shard's next tick (R27, R28).
//   - Connect plus handshake must finish within HandshakeTimeoutTicks on both ends; a peer that accepts
//     and never answers, or a dialer that never sends its handshake, is closed and counted.
//   - An accepted peer connection, once open, must finish each frame within PeerFrameTimeoutTicks of
//     its first byte (default 3000 ticks, 30 s at 10 ms; checked at each tick by the shard that owns the
//     connection, never a timer; ticks it holds the connection stalled do not count): a header and
//     silence cannot hold the connection and the bytes it grew. Closed as
//     connections_closed_total{listener="peer",reason="frame_timeout"} with a log line. Decision: no
//     idle timeout on peer connections. A link sends nothing in a tick that owes nothing (empty batches
//     are not sent), so a healthy peer with no group in common may be silent for any time, and closing
//     it would only cost a failed send and a reconnect at the dialer. A peer whose host is gone is found
//     by TCP keepalive instead (30 s idle, then 3 probes 10 s apart), and the failed receive is counted
//     as reason="recv_error"; a peer that restarts closes its old connections itself.
//   - Who may connect: with Config.Secret set, each handshake carries a fresh nonce (crypto/rand),
//     shard 0's answer carries its proof (wire.AcceptorProof), and the dialer checks it before its link
//     is up, then puts its own proof (wire.DialerProof) first in the outbox, ahead of any batch or data
//     frame. Shard 0 reads exactly that one frame and checks it before it hands the socket on. Wrong,
//     missing or unexpected proofs close the connection, are logged with the wire.ErrAuth* reason and
//     counted (Stats.AuthRefused and HandshakeErrors); the other links carry on. An empty secret on
//     every node turns authentication off; a node with a secret and one without refuse each other.
//   - Groups get the shard's ring through Sender.Ring for their own I/O, on the shard goroutine; the
//     shard's own superblock saves (R12) use the same ring.
//   - Control functions (Node.Run) go through a mutex-guarded slice per shard, swapped once per turn:
//     a rare path from other goroutines, not worth a lock-free queue.
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
//   - The drain ends when the ring holds nothing but that deadline and the last tick's timer. When the deadline fires first,
//     what is still in flight is abandoned with the ring, logged and counted (Stats.DrainAbandoned):
//     the ring offers no cancel, and a Stop that never returns is worse than an abandoned operation.
//   - Stop does not hold the node's mutex while it waits, so a shard may still call Run, Wake or
//     AddGroup while it drains; Stop itself must not be called from a shard goroutine.
//   - Config.WrapRing wraps the ring everything on the shard uses; other shards' MsgRing wakeups
//     target the ring as the backend built it, since a backend posts only to its own kind.
//   - Client listener (client.go, client_conn.go). With Config.ClientListen set, NewNode binds one
//     listening socket per shard to it with SO_REUSEPORT (port 0: the first socket's ephemeral port
//     for all), and each shard accepts on its own ring. A client connection lives on the shard that
//     accepted it for its whole life; the kernel's reuseport hash, not the shard, picks that shard.
//   - The client handshake is always three frames (ClientHello, ClientChallenge, ClientProof), each
//     read into a header-sized buffer, nonces and proofs zero without a secret. A hello or proof that
//     is refused (revision, cluster, secret) is answered with an ErrorReply (CodeInvalidRequest, the
//     wire error's text), counted (ClientStats.HandshakeErrors, AuthRefused for the secret), and the
//     connection closes once it is sent; a handshake frame whose header fails closes at once. A client
//     that has not finished within HandshakeTimeoutTicks of its accept is closed and counted
//     (HandshakeTimeouts), the same bound as peer handshakes.
//   - Client requests. The connection's shard decodes each request with its wire decoder before
//     handing it on, so a malformed one (sound header, bad contents or body checksum, a command that
//     is not a request, another cluster) is answered there with CodeInvalidRequest and the decoder's
//     reason, and the connection goes on. A request whose header Group is set (a stream id) runs the
//     ClientHandler on ShardOf(stream), reached through the cross-shard queue with a copy of the
//     frame; one without runs on the connection's shard. A full queue stalls the connection on that
//     frame, as for peer connections. Redirecting to another node's owner is the handler's job (an
//     ErrorReply with CodeNotOwner and the owner), since the shard knows no stream owners.
//   - Client replies. ClientRequest names the connection's shard, a connection id never reused on it,
//     the request id and the stream; Shard.ReplyClient sends a reply there (a copy through the queue
//     when it is another shard; a full queue refuses it with ErrOutboxFull, for the handler to retry).
//     A reply to a connection that closed is dropped and counted (RepliesDropped): ids are not reused,
//     so it never reaches a later connection.
//   - A client is pushed back on, never buffered without limit: a connection stops reading while it
//     has ClientConfig.RequestsMax requests unanswered or ClientConfig.OutboxBytes of replies unsent,
//     and TCP pushes back on the client. Every request is answered exactly once, so the outbox holds
//     at most OutboxBytes plus RequestsMax replies. Such a connection notices its client closing only
//     when it reads again.
//   - A frame above ClientConfig.FrameBytesMax cannot be skipped without reading it, which is what the
//     limit refuses: it is answered with an ErrorReply naming its size and the limit (request id 0,
//     the reader does not expose the header) and the connection closes after it. A header that fails
//     its checks closes the connection at once (BrokenFrames counts both). Other connections are
//     not touched either way.
//   - Client bounds in time are tick counts checked at each tick (client_limits.go), never timers: a
//     handshake within ClientConfig.HandshakeTimeoutTicks of the accept; a frame within
//     FrameTimeoutTicks of its first byte (ticks the node itself spends not reading, at a bound or a
//     full queue, do not count); an open connection with nothing under way is closed after
//     IdleTimeoutTicks (default 5 minutes). A request unanswered, such as a long-poll fetch, is under way.
//   - ClientConfig.ConnectionsMax bounds the node's client connections over all shards, handshaking
//     ones included; one past it is closed as soon as it is accepted, without a reply (no request id
//     to answer yet).
//   - A shard holds at most ClientConnsShardMax(Ring.Entries) = ring entries / 2 client connections,
//     whatever ConnectionsMax says: each may keep a receive and a send in flight, and the ring's
//     in-flight table (twice its entries) must keep half for links, the tick, storage and saves.
//     Found on a real node: 2,000 idle clients on one shard filled the table, the peer links failed
//     with "ring: queue full" and a producer beside them stalled for 20 s. PendingBytesMax bounds the bytes of a connection's unanswered requests (routed
//     ones are copies), beside RequestsMax's count.
//   - Every refused or closed connection (a limit, a timeout, a refused handshake, a broken frame, a
//     client gone mid-frame or mid-reply, the peer listener's too) is counted by listener and reason
//     (ringstream_shard_connections_closed_total) and logged, at most one line per reason per second
//     on each shard: a line carries how many it did not log since the last, and refusals left
//     unlogged get a line of their own a second later. A client that closes between requests is an
//     ordinary end: neither counted nor logged.
//   - Stop closes client connections like peer connections: shut down and their operations drained.
//     Client requests and replies still in the cross-shard queues then are discarded unanswered.
//   - A drained shard waits until every shard of the node has drained (so no MsgRing targets a closed
//     ring), then closes its sockets, its ring and its wakeup sockets.
package shard
