package config

import (
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"time"

	"github.com/ringstream/ringstream/engine/control"
	"github.com/ringstream/ringstream/engine/vsr"
	"github.com/ringstream/ringstream/ring"
	"github.com/ringstream/ringstream/segment"
	"github.com/ringstream/ringstream/shard"
	"github.com/ringstream/ringstream/shard/heartbeat"
)

// Logger is the logger log.format asks for: slog's JSON handler (one object per line) for json,
// its text handler (key=value) otherwise, writing to w what is at level or above.
func (c *Config) Logger(w io.Writer, level slog.Leveler) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if c.File.Log.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// Shard is the shard runtime's config: node and cluster ids, shard count and pinning, tick, schedule,
// peer listen address, cluster secret, ring, and the client listener with its connection bounds. The caller adds what is not configuration (logger, registry).
func (c *Config) Shard() shard.Config {
	f := &c.File
	return shard.Config{
		Node:     f.Node.ID,
		Cluster:  f.Cluster.ID,
		Shards:   c.ShardCount,
		PinCores: f.Shards.PinCores,
		Tick:     time.Duration(f.Cluster.TickMs) * time.Millisecond,
		Schedule: c.Schedule,
		Listen:   c.Listen,
		Secret:   c.Secret,
		Ring: ring.Config{Backend: ring.Backend(f.Shards.RingBackend), Entries: f.Shards.RingEntries,
			TaskRun: ring.TaskRun(f.Shards.RingTaskRun), WaitHoldsP: c.WaitHoldsP},

		ClientListen: c.ClientListen,
		Client:       c.clientConfig(),
		KafkaListen:  c.KafkaListen,
	}
}

// clientConfig is [client]'s connection bounds.
func (c *Config) clientConfig() shard.ClientConfig {
	cl := &c.File.Client
	return shard.ClientConfig{OutboxBytes: cl.OutboxBytes, RequestsMax: cl.RequestsMax, FrameBytesMax: cl.FrameBytesMax,
		PendingBytesMax: cl.PendingBytesMax, ConnectionsMax: c.clientConnectionsMax(),
		HandshakeTimeoutTicks: c.clientTicks(cl.HandshakeTimeout), IdleTimeoutTicks: c.clientTicks(cl.IdleTimeout),
		FrameTimeoutTicks: c.clientTicks(cl.FrameTimeout)}
}

// clientConnectionsMax is client.connections_max, or with 0 what the shards' rings hold.
func (c *Config) clientConnectionsMax() int {
	if n := c.File.Client.ConnectionsMax; n != 0 {
		return n
	}
	return max(1, c.ShardCount*shard.ClientConnsShardMax(c.File.Shards.RingEntries))
}

// clientTicks is a [client] timeout in ticks (resolveClientLimits checked it is a whole count);
// 0 ms is shard.TimeoutNever.
func (c *Config) clientTicks(ms heartbeat.Millis) uint64 {
	if ms == 0 || c.File.Cluster.TickMs == 0 {
		return shard.TimeoutNever
	}
	return uint64(ms) / c.File.Cluster.TickMs
}

// Peers is the other nodes, sorted by node id, as shard.Node.Start takes them.
func (c *Config) Peers() []shard.Peer {
	return slices.DeleteFunc(slices.Clone(c.Nodes), func(p shard.Peer) bool { return p.Node == c.File.Node.ID })
}

// Heartbeat is the four R23 options in milliseconds, as read (Schedule holds them in ticks).
func (c *Config) Heartbeat() heartbeat.Config {
	return c.File.heartbeatConfig()
}

// Segment is the stream logs' segment config.
func (c *Config) Segment() segment.Config {
	s := &c.File.Storage
	return segment.Config{SegmentBytes: s.SegmentBytes, PrewriteBytes: s.PrewriteBytes,
		RecycleSegments: s.RecycleSegments}
}

// Retention is the limits for segment.Copy.Retain: bytes and age in milliseconds, 0 for no limit.
func (c *Config) Retention() (maxBytes, maxAgeMs int64) {
	return c.File.Storage.RetentionBytes, int64(c.File.Storage.RetentionAge)
}

// IdleCloseTicks is storage.idle_close_after in ticks (rounded up), as streamhost.Config takes it:
// -1 when it is 0 (never close).
func (c *Config) IdleCloseTicks() int64 {
	ms, tick := uint64(c.File.Storage.IdleCloseAfter), c.File.Cluster.TickMs
	if ms == 0 {
		return -1
	}
	return int64((ms + tick - 1) / tick)
}

// Control is the controller's config: liveness and eager failover grace in ticks and the assignment
// policy; the seal and proposal timeouts keep control's defaults.
func (c *Config) Control() control.Config {
	cc := control.DefaultConfig()
	cc.NodeLivenessTimeoutTicks = c.NodeLivenessTimeoutTicks
	cc.EagerFailoverGraceTicks = c.EagerFailoverGraceTicks
	cc.AssignmentPolicy = c.Policy
	return cc
}

// MetaGroupConfig has the fields of metahost.Config, in its order, so that the node converts
// one to the other with metahost.Config(cfg.MetaGroup()) (see the package doc for why this package
// does not import metahost). A test in package config_test holds the two types together.
type MetaGroupConfig struct {
	Dir                     string
	Cluster                 uint64
	Node                    uint16
	Members                 []shard.Member
	VSR                     vsr.Config
	LogCompactBytes         int64
	EagerFailoverGraceTicks uint64
	TickPeriod              time.Duration
	Logger                  *slog.Logger
}

// MetaGroup is the metadata group's config on this node: data_dir/meta, the replicas as members
// (member index = position in metadata.replicas), VSR defaults for them with this node's index, and
// the eager failover grace in ticks. ok is false when this node is not a metadata replica.
func (c *Config) MetaGroup() (mg MetaGroupConfig, ok bool) {
	f := &c.File
	self := slices.Index(f.Metadata.Replicas, f.Node.ID)
	if self < 0 {
		return MetaGroupConfig{}, false
	}
	members := make([]shard.Member, len(f.Metadata.Replicas))
	for i, id := range f.Metadata.Replicas {
		members[i] = shard.Member{Index: uint8(i), Node: id}
	}
	return MetaGroupConfig{
		Dir:                     filepath.Join(f.Node.DataDir, "meta"),
		Cluster:                 f.Cluster.ID,
		Node:                    f.Node.ID,
		Members:                 members,
		VSR:                     vsr.DefaultConfig(len(members), uint8(self)),
		EagerFailoverGraceTicks: uint64(c.EagerFailoverGraceTicks),
		TickPeriod:              time.Duration(f.Cluster.TickMs) * time.Millisecond,
	}, true
}
