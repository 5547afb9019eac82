// Package clientreq handles the node's client requests: Handler is the node's shard.ClientHandler
// and hands data requests (produce, fetch, cursors) to the copy of their stream on the shard they
// arrive on; Service, its metadata service, serves the metadata requests (create, delete, list,
// lookup) on the node of the metadata primary and forwards them there from the others. It also keeps
// the registration of every configured node at its client address (Service.Register), and the
// handler's metrics (Metrics).
//
// What it receives from the node (engine's compose), in Config: the node's configuration, its
// client addresses, the shard node, the metadata replica (engine/metahost's Group, nil on a node
// without one) and the stream host (engine/streamhost). The node routes the copies' replies to
// StreamReply, the node-level frames the controller host leaves to OnNodeFrame, and runs OnShard0
// and ProposeOp for its own reads and proposals (admin actions, the reaper of deleted streams). The
// package imports nothing of the node.
//
// Decisions where the design is silent:
//   - Metadata requests (create, delete, list, lookup) are served by the node of the metadata
//     primary, from its applied state (read on shard 0) and by proposals to its replica. Any other
//     node forwards the client's frame over its peer link to the primary of its replica's view (a
//     node without a replica: to the replicas in turn) under a request id of its own, and relays the
//     answer; a forward never takes a second hop from a replica. A request that found no primary, or
//     whose answer did not come within Config.MetaRequestTimeout (engine.NodeOptions.MetaRequestTimeout), is answered CodeUnavailable:
//     the client retries. At most metaRequestsMax run at once per node; more are CodeOverloaded.
//   - A lookup may be a long poll (wire.LookupStream.AfterEpoch): the primary answers once the
//     stream's assignment is newer than that epoch and has an owner, or when the wait ends (at most
//     lookupWaitMax, 5 s, and half of MetaRequestTimeout), with what it holds then. It wakes on the
//     replica's changes (metahost.Group.Changed), never on a timer of its own.
//   - A forwarding node holds a metadata request through a view change: while its replica knows no
//     primary, or the one it forwarded to stopped being primary, it waits for the replica's next
//     change and tries again, for up to 1 s (primaryWaitMax; a long-poll lookup its own wait), then
//     refuses it (CodeNotYet or CodeUnavailable) as before. A node without a replica forwards once.
//   - Links are one per direction, so a forward can arrive over the forwarder's link while the
//     primary's link back is not up yet (after a start or a reconnect). The primary sends such an
//     answer again every 10 ms (answerRetry) until the request's own time ends, counted in
//     ringstream_meta_forward_replies_retried_total; only then is it lost
//     (ringstream_meta_forward_replies_lost_total) and the forwarder answers CodeUnavailable.
//   - A forwarded request stops waiting once the forwarding replica's view has moved past the node it
//     was sent to (that node may be dead): it is answered CodeUnavailable at once, not after
//     MetaRequestTimeout.
//   - A create places the copies on the registered nodes the primary's node reaches (shard 0 link
//     up) holding the fewest copies, then the lowest ids; the first is the owner. Too few reachable
//     nodes is CodeUnavailable. A replicated stream's assignment carries the cluster's
//     assignment_policy (the controller stamps that policy anyway), one copy the stream's own.
//   - The node of the metadata primary registers every node of cluster.peers at its cluster.clients
//     address (meta.RegisterNode) and again when the address changed, checking every registerEvery:
//     the controller counts only registered nodes' heartbeats, and lookups hand out those addresses.
//   - Data requests (produce, fetch, cursors) arrive on the stream's shard (ShardOf) and go to the
//     copy there (streamhost.Host.Step); replies find their connection through a per-shard slot
//     table (the copy's client token is slot index and generation). A node without a serving copy
//     answers from its replica's state: CodeNotOwner naming the owner, CodeUnknownStream, or
//     CodeUnavailable while the stream recovers or its own copy opens; a node without a replica
//     answers CodeNotOwner without an owner (the client looks the stream up).
//   - A reply the cross-shard queue refuses is kept and sent again on a later turn of the copy's
//     shard (shard.Node.Run), in order; nothing is dropped while the connection lives.
package clientreq
