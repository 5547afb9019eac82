// Package config owns a node's configuration: one TOML file per node (DESIGN section 10), decoded
// with github.com/BurntSushi/toml over Defaults, checked, and resolved once at load into the values the
// node runs with (addresses, ticks, the secret, the shard count). It also owns the converters to the
// other packages' configs (shard.Config, heartbeat.Config, segment.Config, control.Config and the
// metadata group's config), so the node composition never maps fields itself, and the commented
// defaults file that `ringstream config defaults` prints.
//
// Sections: [node] (id, data_dir, listen for peer links), [cluster] (id, peers, clients, secret or
// secret_file, tick_ms, the four R23 options, node_liveness_timeout, eager_failover_grace,
// assignment_policy), [shards] (count, pin_cores, ring_backend, ring_entries, ring_task_run),
// [storage] (segment options and retention), [metadata] (replicas), [admin] (listen), [client]
// (listen, the bounds of each connection, the node's connection limit and the client timeouts),
// [metrics] (per_stream_max) and [log] (format).
//
// Rules live with the packages that rely on them: R9 and R23 in heartbeat.Config.Validate and Ticks,
// the controller's in control.Config.Validate, rings' in ring.Config.Validate, shards' in
// shard.Config.Validate, segments' in segment.Config.Validate, the metadata group's size in
// vsr.Config.Validate. Load calls them and names the key in front of their message; only the rules
// that belong to the file itself (ids, addresses, peers, the secret) are written here. Every error
// wraps ErrConfig (and the validator's own sentinel where one refused the value); warnings, what the
// rules allow but advise against, are returned in Config.Warnings for the caller to log.
//
// Decisions where the design is silent:
//   - A key left out takes its default; unknown keys are errors (MetaData.Undecoded), so a misspelt
//     option never silently keeps its default. cluster.peers in a file replaces the default peers
//     whole, it is not merged with them.
//   - The defaults describe node 1 of a three-node cluster on this host (peers 127.0.0.1:7001, 7011
//     and 7021, replicas 1, 2 and 3), so the printed defaults load and pass `config check` as they
//     are. Peer and client listeners bind every interface by default; admin binds 127.0.0.1 and a
//     non-loopback admin address is warned about (it has no authentication).
//   - Addresses are IP literals (ip:port). Host names are refused rather than resolved, so the
//     meaning of a file never changes with DNS.
//   - cluster.clients gives each node's client address as clients dial it (lookups hand it out); a
//     node it leaves out is reached at its peers address with the port plus one, which is how the
//     defaults are laid out. A file that sets peers but not clients gets the derived addresses.
//   - cluster.peers lists every node, this one included, keyed by node id in plain decimal ("01" is
//     refused, so a node cannot be listed twice). Two nodes may not share an address.
//   - Durations are milliseconds (an integer, or a Go duration string), as heartbeat.Millis reads
//     them, and each must be a whole multiple of tick_ms: it becomes a tick count once, at load.
//     tick_ms is 1..1000. The metadata group's and the controller's other timeouts keep their
//     defaults in ticks (vsr.DefaultConfig, control.DefaultConfig).
//   - The cluster secret is at least SecretBytesMin bytes, from secret or secret_file (not both);
//     a relative secret_file is read from the config file's directory, its trailing newline dropped,
//     and a file readable by group or others is warned about. An empty secret on every node turns
//     authentication off and is warned about.
//   - shards.count 0 is the CPUs of the process's affinity mask at load (sched_getaffinity).
//   - The metadata group's member index of a replica is its position in metadata.replicas; every node
//     must list the replicas in the same order.
//   - metrics.per_stream_max (default 1000, at most 100000, 0 off) bounds the per-stream series a
//     node exposes: its copies with the lowest stream ids, at most five series each, so a node's
//     /metrics stays below about 5000 per-stream series by default however many streams it holds.
//   - log.format is text (the default) or json; `ringstream serve` builds its slog handler from it.
//     It is a file option rather than a serve flag so that a node's whole setup is in one file.
//   - This package does not import engine/metahost (the node's compose converts one config to the
//     other, as it does for every host it builds), so MetaGroup returns MetaGroupConfig, a struct
//     with metahost.Config's fields that converts to it; a
//     test in package config_test keeps the two alike. metahost.Group's rule that the eager failover
//     grace is at most the view change timeout is checked again here, at load.
package config
