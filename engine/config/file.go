package config

import (
	"github.com/ringstream/ringstream/shard/heartbeat"
)

// File is the node's TOML file as the operator writes it: one struct per section, every key a field.
// Defaults returns it with every option at its default; Parse decodes a file over those defaults, so a
// key left out keeps its default.
type File struct {
	Node     NodeSection     `toml:"node"`
	Cluster  ClusterSection  `toml:"cluster"`
	Shards   ShardsSection   `toml:"shards"`
	Storage  StorageSection  `toml:"storage"`
	Metadata MetadataSection `toml:"metadata"`
	Admin    AdminSection    `toml:"admin"`
	Client   ClientSection   `toml:"client"`
	Kafka    KafkaSection    `toml:"kafka"`
	Metrics  MetricsSection  `toml:"metrics"`
	Log      LogSection      `toml:"log"`
}

// NodeSection is [node]: who this node is and where it keeps its data.
type NodeSection struct {
	ID      uint16 `toml:"id"`
	DataDir string `toml:"data_dir"`
	// Listen is the address peer links connect to (ip:port).
	Listen string `toml:"listen"`
}

// ClusterSection is [cluster]: what every node of the cluster must agree on.
type ClusterSection struct {
	ID uint64 `toml:"id"`
	// Peers maps every node id of the cluster, this node's included, to the ip:port its peer links
	// are dialed at.
	Peers map[string]string `toml:"peers"`
	// Clients maps node ids to the ip:port clients reach each node at (its client.listen as seen from
	// clients). A node left out is reached at its peers address with the port plus one.
	Clients map[string]string `toml:"clients"`
	// Kafka maps node ids to the ip:port Kafka clients reach each node at (its kafka.listen as seen
	// from clients): the brokers a Kafka Metadata response lists. A node left out is no broker.
	Kafka      map[string]string `toml:"kafka"`
	Secret     string            `toml:"secret"`
	SecretFile string            `toml:"secret_file"`
	TickMs     uint64            `toml:"tick_ms"`

	CommitBroadcastInterval     heartbeat.Millis `toml:"commit_broadcast_interval"`
	CommitHeartbeatTimeout      heartbeat.Millis `toml:"commit_heartbeat_timeout"`
	CommitIdleHeartbeatInterval heartbeat.Millis `toml:"commit_idle_heartbeat_interval"`
	CommitIdleHeartbeatTimeout  heartbeat.Millis `toml:"commit_idle_heartbeat_timeout"`

	NodeLivenessTimeout heartbeat.Millis `toml:"node_liveness_timeout"`
	EagerFailoverGrace  heartbeat.Millis `toml:"eager_failover_grace"`
	AssignmentPolicy    string           `toml:"assignment_policy"`
}

// ShardsSection is [shards]: how many shards, where they run, and their rings.
type ShardsSection struct {
	// Count is the shard count; 0 means one per CPU the process may use (sched_getaffinity).
	Count       int    `toml:"count"`
	PinCores    bool   `toml:"pin_cores"`
	RingBackend string `toml:"ring_backend"`
	RingEntries uint32 `toml:"ring_entries"`
	RingTaskRun string `toml:"ring_task_run"`
}

// StorageSection is [storage]: the stream logs' segment options and retention.
type StorageSection struct {
	SegmentBytes    int64            `toml:"segment_bytes"`
	PrewriteBytes   int              `toml:"prewrite_bytes"`
	RecycleSegments int              `toml:"recycle_segments"`
	RetentionBytes  int64            `toml:"retention_bytes"`
	RetentionAge    heartbeat.Millis `toml:"retention_age"`
	IdleCloseAfter  heartbeat.Millis `toml:"idle_close_after"`
}

// MetadataSection is [metadata]: the metadata group's replicas.
type MetadataSection struct {
	// Replicas are the node ids of the metadata group, 3 or 5; a node's member index is its position.
	Replicas []uint16 `toml:"replicas"`
}

// AdminSection is [admin]: the admin HTTP listener (metrics, status, pprof).
type AdminSection struct {
	Listen string `toml:"listen"`
}

// MetricsSection is [metrics]: what /metrics exposes beyond the node's fixed series.
type MetricsSection struct {
	// PerStreamMax bounds the stream copies that get per-stream series (0: none).
	PerStreamMax int `toml:"per_stream_max"`
}

// LogSection is [log]: how `ringstream serve` writes its log.
type LogSection struct {
	Format string `toml:"format"`
}

// ClientSection is [client]: the client listener and the bounds of each client connection.
type ClientSection struct {
	Listen        string `toml:"listen"`
	OutboxBytes   int    `toml:"outbox_bytes"`
	RequestsMax   int    `toml:"requests_max"`
	FrameBytesMax int    `toml:"frame_bytes_max"`

	PendingBytesMax  int              `toml:"pending_bytes_max"`
	ConnectionsMax   int              `toml:"connections_max"`
	HandshakeTimeout heartbeat.Millis `toml:"handshake_timeout"`
	IdleTimeout      heartbeat.Millis `toml:"idle_timeout"`
	FrameTimeout     heartbeat.Millis `toml:"frame_timeout"`
}

// KafkaSection is [kafka]: the Kafka protocol listener (engine/kafka). Its connections take the
// bounds and timeouts of [client].
type KafkaSection struct {
	// Listen is the address Kafka clients connect to; empty (the default): no Kafka listener.
	Listen string `toml:"listen"`
}

// Defaults returns every option at its default: node 1 of a three-node cluster on this host, with its
// data in ./data.
func Defaults() File {
	hb := heartbeat.DefaultConfig()
	return File{
		Node: NodeSection{ID: 1, DataDir: "data", Listen: "0.0.0.0:7001"},
		Cluster: ClusterSection{
			ID:                          1,
			Peers:                       map[string]string{"1": "127.0.0.1:7001", "2": "127.0.0.1:7011", "3": "127.0.0.1:7021"},
			Clients:                     map[string]string{"1": "127.0.0.1:7002", "2": "127.0.0.1:7012", "3": "127.0.0.1:7022"},
			Kafka:                       map[string]string{},
			TickMs:                      10,
			CommitBroadcastInterval:     hb.CommitBroadcastInterval,
			CommitHeartbeatTimeout:      hb.CommitHeartbeatTimeout,
			CommitIdleHeartbeatInterval: hb.CommitIdleHeartbeatInterval,
			CommitIdleHeartbeatTimeout:  hb.CommitIdleHeartbeatTimeout,
			NodeLivenessTimeout:         3000,
			EagerFailoverGrace:          200,
			AssignmentPolicy:            "majority_durable",
		},
		Shards: ShardsSection{Count: 0, PinCores: false, RingBackend: "auto", RingEntries: 1024, RingTaskRun: "coop"},
		Storage: StorageSection{SegmentBytes: 64 << 20, PrewriteBytes: 1 << 20, RecycleSegments: 2,
			RetentionBytes: 0, RetentionAge: 0, IdleCloseAfter: 10000},
		Metadata: MetadataSection{Replicas: []uint16{1, 2, 3}},
		Admin:    AdminSection{Listen: "127.0.0.1:7003"},
		Client: ClientSection{Listen: "0.0.0.0:7002", OutboxBytes: 4 << 20, RequestsMax: 64,
			FrameBytesMax: 8<<20 + 256, PendingBytesMax: 16 << 20, ConnectionsMax: 0,
			HandshakeTimeout: 5000, IdleTimeout: 300000, FrameTimeout: 30000},
		Metrics: MetricsSection{PerStreamMax: DefaultPerStreamMax},
		Log:     LogSection{Format: "text"},
	}
}

// optionComments returns the line printed above each option by WriteDefaults, keyed section.key. A
// test checks that every field of File has one.
func optionComments() map[string]string {
	return map[string]string{
		"node.id":       "This node's id, 1..65535. It must be a key of cluster.peers.",
		"node.data_dir": "The data directory (relative to the working directory). It records the cluster and node id.",
		"node.listen":   "Address the peer links of other nodes connect to, ip:port (IP literals only; no DNS).",

		"cluster.id": "Cluster id, 1..2^63-1. Every handshake carries it; a node of another cluster is refused.",
		"cluster.peers": "Every node of the cluster, this one included: node id = \"ip:port\" its peer links are " +
			"dialed at.",
		"cluster.clients": "Every node's client address as clients dial it: node id = \"ip:port\". Lookups " +
			"answer with it. A node left out is reached at its cluster.peers address, port plus one.",
		"cluster.secret": "Shared secret that authenticates every peer and client handshake (HMAC-SHA256 over a " +
			"challenge; it never crosses the wire). At least 16 bytes. Empty on every node: authentication off.",
		"cluster.secret_file": "File holding the secret instead (trailing newline dropped; relative to this " +
			"file's directory). Set at most one of secret and secret_file.",
		"cluster.tick_ms": "Length of one tick in milliseconds: every timeout below is turned into ticks once, " +
			"at load, and must be a whole multiple of it.",
		"cluster.commit_broadcast_interval": "R23: gap between send ticks and busy heartbeats (P), " +
			"milliseconds or a duration string such as \"500ms\".",
		"cluster.commit_heartbeat_timeout": "R9/R23: busy backups' wait, the quiet time before a group turns " +
			"idle, and the primary's quorum window (R24). At least 2000 ms and 4 x commit_broadcast_interval.",
		"cluster.commit_idle_heartbeat_interval": "R23: gap between an idle group's heartbeats, a whole " +
			"multiple of commit_broadcast_interval.",
		"cluster.commit_idle_heartbeat_timeout": "R23: idle backups' wait (never less than " +
			"commit_heartbeat_timeout), at least 4 x commit_idle_heartbeat_interval.",
		"cluster.node_liveness_timeout": "A node with no heartbeat for this long is lost and its streams fail over.",
		"cluster.eager_failover_grace": "A node whose links closed and stayed closed this long is lost at once " +
			"(and a metadata backup starts a view change). Below node_liveness_timeout.",
		"cluster.assignment_policy": "Confirm policy stamped on replicated assignments: majority_durable, " +
			"local_durable, count_durable(N) or count_accepted(N).",

		"shards.count":     "Shard count, 1..1024; 0 means one per CPU the process may use (sched_getaffinity).",
		"shards.pin_cores": "Pin shard i to the i-th CPU of the process's affinity set.",
		"shards.ring_backend": "auto (io_uring where the kernel allows it, else plain syscalls), io_uring " +
			"(refuse to start without it) or fallback.",
		"shards.ring_entries": "Submission queue entries of each shard's ring, a power of two up to 32768.",
		"shards.ring_task_run": "coop (COOP_TASKRUN, the default) or defer (DEFER_TASKRUN): how io_uring posts " +
			"completions finished off the shard's thread. Both with SINGLE_ISSUER where the kernel has it.",

		"storage.segment_bytes":    "Size at which a stream log's active segment rolls, at least 4096 (0: the default).",
		"storage.prewrite_bytes":   "Zeros written this far ahead of a segment's data: 4096..segment_bytes, or -1 for off.",
		"storage.recycle_segments": "Retired segments kept for reuse by the next roll; -1 for off.",
		"storage.retention_bytes":  "A stream log keeps at most this many bytes of closed segments; 0 keeps all.",
		"storage.retention_age": "Closed segments whose newest record is older than this are removed; 0 keeps " +
			"all. Milliseconds or a duration string such as \"168h\".",
		"storage.idle_close_after": "A stream copy with no append, read or seal for this long closes its files " +
			"(four descriptors) until it is used again; copies opened at boot start closed. 0: never close.",

		"metadata.replicas": "Node ids of the metadata group's replicas, 3 or 5, each a key of cluster.peers.",

		"admin.listen": "Admin HTTP (metrics, status, pprof): localhost unless you set another address; it has " +
			"no authentication of its own.",

		"kafka.listen": "Address Kafka clients connect to, ip:port; every shard listens on it (SO_REUSEPORT). " +
			"Empty: no Kafka listener. Its connections take the [client] bounds and timeouts.",
		"cluster.kafka": "Every node's Kafka address as Kafka clients dial it: node id = \"ip:port\". Kafka " +
			"Metadata lists these nodes as the brokers; a node left out is no broker (its kafka.listen, when " +
			"set, stands for itself).",

		"client.listen": "Address clients connect to, ip:port; every shard listens on it (SO_REUSEPORT).",
		"client.outbox_bytes": "Unsent replies a connection may hold before it reads no more requests " +
			"(TCP pushes back on a client that does not read); at least 4096.",
		"client.requests_max": "Requests of one connection in flight before it reads no more; at least 1.",
		"metrics.per_stream_max": "Stream copies of this node (lowest stream ids first) that get per-stream " +
			"series on /metrics (end, durable and confirmed offsets, copies in sync, owner): at most 5 series each. 0 turns " +
			"them off; ringstream_stream_series_omitted counts the copies left out.",

		"log.format": "text (slog's key=value lines) or json (one JSON object per line), on standard error.",

		"client.frame_bytes_max": "Largest client frame, header included (256 bytes up to 64 MiB); a " +
			"larger one is answered with an error and closes the connection.",
		"client.pending_bytes_max": "Bytes of one connection's requests in flight before it reads no more; " +
			"at least frame_bytes_max.",
		"client.connections_max": "Client connections this node holds, handshaking ones included; one more " +
			"is closed at once (counted and logged). Each shard holds at most ring_entries / 2 of them; 0: " +
			"that many per shard. Keep it under the descriptor limit (ulimit -n) less about 700 per shard " +
			"for the node's own files.",
		"client.handshake_timeout": "A client must finish its handshake this long after it connected, or " +
			"it is closed. At least one tick.",
		"client.idle_timeout": "A connection with no request in flight, no reply unsent and nothing " +
			"received for this long is closed (a long-poll fetch is in flight, not idle); clients " +
			"reconnect on their next request. At least handshake_timeout; 0: never.",
		"client.frame_timeout": "A request must arrive whole this long after its first byte, or the " +
			"connection is closed (a header promising a body that does not come). 0: never.",
	}
}
