// Package nodebeat sends this node's heartbeat (wire.NodeHeartbeat) to every metadata member from
// shard 0: Beat, one shard.Group per node, carries the node's copies' tails and failed logs to the
// controller, and the shutdown notice of a clean stop (eager failover).
//
// What it receives from the node (engine's compose): in Config, the cluster and node ids, the shard
// count, the metadata members' nodes, the interval (a tenth of node_liveness_timeout, at least one
// tick), the copies' tails (CopyTailSource: the stream host), their failures (CopyFailureSource:
// HostFailures over the stream host) and Self (the controller host's LocalHeartbeat on a metadata
// member). The package imports nothing of the node.
//
// Decisions where the design is silent:
//   - Beat is a group of its own (GroupID: the highest id below the stream hosts' that
//     lands on shard 0; stream ids grow from 1), offline in every role, so it has shard 0's ticks and
//     links without a shard hook. Its heartbeat to its own node goes to Self in place of a link. A
//     clean shutdown sends the shutdown notice first (Beat.Shutdown, before engine.Node.Stop): a notice
//     queued in OnStop would meet links already shut down. A lost notice costs the eager grace.
package nodebeat
