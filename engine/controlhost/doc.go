// Package controlhost runs the failover controller (engine/control) on this node's metadata replica:
// Host is the controller of the metadata primary, running inside the replica's group
// (engine/metahost's Group) on shard 0, and the node's handler of node-level frames.
//
// What it receives from the node (engine's compose): the replica (a *metahost.Group, on which New sets
// the host as its Controller) and the shard node (New sets the host as its node handler); in Config,
// the controller's configuration, LocalFrame (the stream host's entry for frames addressed to this
// node) and Next (the node's handler for the node-level frames the host does not handle). The node
// feeds it its own heartbeat (LocalHeartbeat, nodebeat.Config.Self), the seal replies its stream host
// receives (OnSealReply) and sets an observer (SetObserver) for its recovery metrics. The package
// imports nothing of the node.
//
// Decisions where the design is silent:
//   - Host acts only while the replica is primary in normal status; it is fed ticks, a
//     StateChanged whenever the commit point moved, node heartbeats, shard 0's link events for every
//     peer and seal replies; its effects are carried out in the same pump: proposals go straight into
//     the replica as client ClientBase | view<<16 | node (a fresh client per view it leads,
//     requests from 1, so no earlier controller's request is ever stale), seals and assignments leave
//     as frames on shard 0's links (to this node: LocalFrame).
//   - A proposal refused at once (not primary, pipeline full) and every proposal out when the replica
//     loses primacy go back as ProposalDropped, one per stream it was for (a batch op's streams
//     each); a reply as ProposalApplied with its decoded result, which hands each stream its
//     entry's code. A reply whose result does not decode drops every stream of the proposal.
//   - The observer hears a batch op as one event per entry, named by the entry's single op kind
//     (Event.Batch gives the entry count), so recovery metrics and the failover benchmarks time
//     each stream's record and commit alike for single and batch ops.
//   - Node heartbeats arriving on another shard are copied to shard 0 with shard.Node.Run. Seal replies
//     are addressed to the stream's group: the stream host of the primary's node hands them over
//     (Host.OnSealReply), from its copy's group or, when the node holds no copy, from the
//     frames the shard could not route (Host.OnUnroutedFrame, passed on to Next).
//   - Host.Status (attention, counters) is refreshed every StatusEveryTicks and when primacy
//     changes, not at every tick: the attention list walks every stream.
package controlhost
