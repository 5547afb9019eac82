// Package kafka serves the Kafka protocol on the node's Kafka listener (kafka.listen): Handler is
// the node's shard.KafkaHandler. It reads each Kafka request on the shard of its connection,
// decodes it with franz-go's kmsg (request and response types generated from Kafka's message
// specs), maps it onto the client requests the node already serves (produce, fetch, list cursors,
// lookup, create), submits those through shard.Shard.SubmitClientRequest, which routes each to
// the shard of its stream as a client connection's request would be, and answers the Kafka
// request once their replies are in, in request order per connection. The shard owns the socket,
// the size-prefixed framing and the connection bounds (shard/kafka.go); this package owns what is
// inside a frame.
//
// What it serves, and at which versions, is the apis table, advertised exactly by ApiVersions:
// ApiVersions 0-3, Metadata 0-9, CreateTopics 0-6, DeleteTopics 0-5, Produce 3-9, Fetch 4-11,
// ListOffsets 1-6 (earliest, latest, and by timestamp over the batches' append times, searchTime),
// SaslHandshake 0-1 and SaslAuthenticate 0-2 (PLAIN), InitProducerId 0-4 (idempotent producers),
// and the group coordinator's FindCoordinator 0-4, JoinGroup 0-9, SyncGroup 0-5, Heartbeat 0-4,
// LeaveGroup 0-5, OffsetCommit 0-8, OffsetFetch 1-7, DescribeGroups 0-5 and ListGroups 0-4
// (groupAPIs).
// Any other API of kmsg's, or another version, is answered with its response at the version asked,
// UNSUPPORTED_VERSION in its top-level error code where it has one (ApiVersions: version 0 with
// the list, KIP-511); an API key kmsg does not know closes the
// connection (counted as kafka bad_request with the key named), since no response can be formed
// for it. docs/kafka.md lists what each unsupported API answers.
//
// Decisions where the design is silent:
//   - Topics are streams by name: partition p of topic t is the stream "t.p" (StreamName,
//     SplitStreamName). A topic of N partitions is the streams t.0 .. t.(N-1); a stream whose name
//     does not split so is no topic. '.' is allowed in topic names: the partition is what follows
//     the last '.'.
//   - Kafka offsets are the streams' record offsets, unchanged: a record's offset in its stream is
//     its Kafka offset, the high watermark is the stream's confirmed tail, the log start offset is
//     its retained head (ListOffsets earliest). Consumers see only confirmed records.
//   - A produced Kafka batch (magic 2, one per partition) is stored as one batch of record format 2
//     (wire.FormatRecords): the Kafka batch's base timestamp, then its records section byte for
//     byte. Uncompressed records are validated in place (validateRecords) and stored as they are;
//     zstd batches are stored with codec zstd, since record format 2's zstd is Kafka's; other
//     compressions are refused (UNSUPPORTED_COMPRESSION_TYPE). A fetched batch is sent as a Kafka
//     batch header built from the stored one (base offset, record count, base timestamp, the
//     largest record timestamp of an uncompressed batch, CRC) and the stored records section.
//     Nothing is allocated or decoded per record on either path; batches of record format 1 are
//     written in the v2 layout on the way out.
//   - acks=-1 (all) and acks=1 (leader) are answered alike: once the batch is confirmed by the
//     stream's policy (W copies durable, the owner among them). acks=1 does not mean "on the
//     owner's disk only": the node never answers a produce before its confirm. acks=0 sends no
//     answer; the batch is still appended.
//   - Idempotent producers (producerid.go): InitProducerId without a transactional id gives a new
//     producer id at epoch 0, as Kafka does (a previous id and epoch, v3+, are not bumped: the
//     producer gets a new id); a transactional id is refused with
//     TRANSACTIONAL_ID_AUTHORIZATION_FAILED, and transactional batches with INVALID_RECORD. The node
//     asked allocates the id alone: its node id in the top 16 of the 63 bits, below it a clock in
//     milliseconds that takes the next value (the wall clock, or the last id's plus 1 when that is
//     later) and never runs more than 1 s ahead of the wall clock (COORDINATOR_LOAD_IN_PROGRESS
//     past that: 1000 ids a second a node, sustained). A node starts its clock 1 s ahead, above
//     what its previous run could have reached, so ids are unique as long as no node's wall clock
//     steps back across its restarts. A produced batch's producer id, epoch and base sequence go to
//     the stream's producer table as the batch's producer id and a Kafka sequence
//     (stream.KafkaSequence), stored in the batch header, so the table a new owner rebuilds from its
//     log after a failover knows them: a retry of any of the producer's last 5 batches is answered
//     with its first offset and success (as Kafka does, not DUPLICATE_SEQUENCE_NUMBER), a base
//     sequence other than the last one plus its record count (wrapping at 2^31) is
//     OUT_OF_ORDER_SEQUENCE_NUMBER, an epoch older than the producer's last batch's
//     INVALID_PRODUCER_EPOCH, a newer epoch must start at sequence 0. A producer the table does not
//     know starts at any sequence, as Kafka does since KIP-360: UNKNOWN_PRODUCER_ID is never
//     answered. Producer id 0 (never allocated here) and -1 produce without the check.
//   - Metadata is read from the node's own metadata replica (its applied state, on shard 0): the
//     brokers are the nodes of cluster.kafka, a partition's leader is its stream's owner (-1 with
//     LEADER_NOT_AVAILABLE while a recovery has none), its replicas the assignment's copies, its
//     ISR those of them on nodes this broker reaches (itself, and the peers its shard 0 link is up
//     to: inSync). A follower's lag is known on its owner's shard only, so the ISR drops a copy
//     whose node is down or cut off, not one that is up but behind. Leader epochs are -1, so clients do not validate epochs (no OffsetForLeaderEpoch).
//     A node without a replica answers every topic LEADER_NOT_AVAILABLE. A topic asked for that
//     does not exist is created with one partition and min(3, nodes) copies when the request
//     allows auto-creation.
//   - Data requests go to this node's copy of the stream: a node that is not the owner answers
//     NOT_LEADER_OR_FOLLOWER, and the client refreshes its metadata and follows. Other mappings:
//     a stream without an owner or not serving yet is LEADER_NOT_AVAILABLE, a failed record log
//     KAFKA_STORAGE_ERROR, a fetch past the confirmed tail or below the retained head
//     OFFSET_OUT_OF_RANGE (codeOf).
//   - Fetch runs in two rounds (serveFetch): without waiting, then, when the records are below
//     min_bytes, the empty partitions again with max_wait_ms as the streams' long poll. There
//     are no fetch sessions (session id 0: full fetches).
//   - On a cluster with a secret, a connection authenticates with SASL PLAIN (sasl.go): any user
//     name, and a password derived from the secret (Password, an HMAC), not the secret itself,
//     which PLAIN would send in the clear; before anything but ApiVersions, any other request
//     first closes the connection. SCRAM and user lists are not served.
//   - Consumer groups (group_*.go) follow Kafka's classic protocol: the leader member computes the
//     assignment and sends it in SyncGroup; the coordinator hands each member its part. Where group
//     state lives: each group belongs to one of 8 internal streams, "__kafka_groups-N" (N the FNV-1a
//     hash of the group id mod 8; created by the first FindCoordinator that needs it, min(3, nodes)
//     copies, majority_durable; the name is no topic, so Metadata does not list it and Produce
//     cannot reach it). The stream's owner is the group's coordinator, and FindCoordinator names
//     its Kafka broker (the owner a lookup of the metadata service answers, so any node answers it,
//     not only those holding a metadata replica). On that node the coordinator lives on the stream's shard (coordinator,
//     shardState.coords): connections on any shard reach it through shard.Node.Run and get their
//     answers back the same way, and one goroutine per handler runs the coordinators' timers
//     (every 100 ms, through Run). The stream holds two kinds of records: committed offsets (one
//     record per partition; an OffsetCommit is answered once its batch is confirmed, durable on W
//     copies) and group records (generation, leader, members, assignments), written when a
//     generation's assignment is handed out or the group empties, not waited for. A coordinator
//     loads by reading the stream from its head to its confirmed tail the first time a request
//     reaches it; only the owner answers that read, so any other node answers NOT_COORDINATOR and
//     the client looks the coordinator up again. Every second a loaded coordinator checks that it
//     still owns the stream, that no one else wrote to it and that it was not deleted and made
//     again (its incarnation); if not, it drops its state and answers NOT_COORDINATOR.
//   - What survives the coordinator's node being killed: every committed (answered) offset, and
//     the membership of the last stable generation whose group record was confirmed: the new owner
//     restores those members with fresh sessions, so they go on heartbeating and committing
//     without a rebalance. A rebalance under way, and members that joined after the last group
//     record, are lost with the node: those members are answered UNKNOWN_MEMBER_ID and rejoin.
//   - Timeouts: a member is removed when its session timeout passes without a heartbeat (6 s to
//     30 min, Kafka's defaults; not counted while its JoinGroup or SyncGroup waits on the
//     coordinator); a rebalance ends at the largest rebalance timeout of its members, without the
//     members that did not rejoin; a follower's SyncGroup waits for the leader's, at most the
//     rebalance timeout again (then the members that sent none are removed and the others
//     rebalance, as Kafka's pending sync timeout does). Nothing waits longer. JoinGroup v4+ without a member id is answered
//     MEMBER_ID_REQUIRED with one (kept for the session timeout). Static membership (group
//     instance ids) is not served: such members are treated as dynamic ones. A group has at most
//     1000 members (GROUP_MAX_SIZE_REACHED).
//   - An OffsetCommit with generation -1 is taken for a group without members (a tool's commit);
//     otherwise only from a member of the current generation, and not while the group awaits its
//     leader's assignment (REBALANCE_IN_PROGRESS), as Kafka checks it. Commits are not checked
//     against the topic's existence; their metadata is at most 4096 bytes.
//   - Stream ids are cached per shard by name, learned from Metadata and lookups, and dropped when
//     a stream is answered unknown.
package kafka
