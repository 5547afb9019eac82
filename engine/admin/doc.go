// Package admin is the node's admin HTTP API and its metrics: Server serves /metrics, /healthz,
// /readyz, /debug/pprof/, /v1/status, /v1/attention, the operator's recovery actions (POST
// /v1/recovery/accept-loss and /v1/recovery/withdraw) and the retry of a failed copy (POST
// /v1/copies/{stream}/retry), with the JSON documents of engine/adminapi. It owns the node's metrics
// beside the shards' and the client request handler's: storage and recovery timings, data counters,
// per-stream series, gauges read from the metadata replica and the controller host at scrape time,
// the build info and the process collectors.
//
// What it receives from the node (engine's compose), in Config: its configuration and registry, a
// function reading its lifecycle state (State), and its parts, each built before: the shard node,
// the metadata replica and the controller host (nil on a node without a replica), the node heartbeat,
// the stream host and the client request handler (whose metadata service runs the reads on shard 0
// and the recovery actions' proposals), and the metrics its groups feed (StorageMetrics,
// RecoveryMetrics, DataMetrics, made before the groups). engine.Node's Status, Attention and
// Readiness are the Server's. The package imports nothing of the node.
//
// Decisions where the design is silent:
//   - Fsync metrics are what the node can time itself: each group commit of a copy's log from
//     queueing its writes to the last completion (segment.Config.CommitObserver: the writev and its
//     linked fdatasync are one chain, so the fdatasync alone is not separable), and each metadata
//     persist likewise (metahost.Group.SetPersistObserver). Recovery metrics come from the
//     controller host's events (controlhost.Host.SetObserver, which the node sets to
//     RecoveryMetrics.Observe; a caller that sets its own replaces it): recoveries recorded and
//     committed by the active controller, the time from a RecordRecovery's commit to its
//     CommitRecovery's, and from the node loss before it to that commit (the controller's part of
//     the failover gap; the new owner's open comes after). Withdrawals and accepted losses are
//     counted where the operator's request commits.
//   - Probes (probe.go): /healthz is 200 while the admin listener serves; /readyz is 200 once
//     engine.Node.Readiness found the node ready (serving, its metadata replica normal and caught
//     up with a commit its primary sent since it opened, every copy its applied state assigns to it
//     open) and stays 200 until the node stops, 503 with the reason before. Readiness is about
//     finishing the start; what goes wrong later is for attention, status and the metrics.
//   - Data counters (streams.go) are counted where a copy's reply reaches the node (the stream
//     host's Replies, wrapped in compose): records confirmed (duplicates not again), records and batch
//     bytes fetched, one add per reply. Per-stream series are read at scrape time from the stream
//     host, for at most metrics.per_stream_max copies (lowest stream ids). The Go and process
//     collectors and ringstream_build_info go only on a registry the node made itself.
package admin
