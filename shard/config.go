package shard

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringstream/ringstream/ring"
	"github.com/ringstream/ringstream/shard/heartbeat"
	"github.com/ringstream/ringstream/wire"
)

// Sentinel errors. Each has one meaning.
var (
	// ErrConfig: the configuration breaks a rule; the message names the option.
	ErrConfig = errors.New("shard: invalid configuration")
	// ErrLinkDown: the link to the peer node is not connected; the frame was not sent (counted).
	ErrLinkDown = errors.New("shard: link down")
	// ErrOutboxFull: the peer's outbox has no room for the frame this tick.
	ErrOutboxFull = errors.New("shard: outbox full")
	// ErrUnknownPeer: the node is not a configured peer.
	ErrUnknownPeer = errors.New("shard: unknown peer node")
	// ErrStarted: the operation is only allowed before Start.
	ErrStarted = errors.New("shard: node already started")
	// ErrSaveDeferred: a superblock save was not issued this tick (the ring had no room); the group is
	// left out of the batch and asked again on a later tick.
	ErrSaveDeferred = errors.New("shard: superblock save deferred, no room on the ring this tick")
	// ErrFrameTooLarge: the frame can never fit in an outbox (OutboxBytes less the batch reserve);
	// send it with SendData.
	ErrFrameTooLarge = errors.New("shard: frame larger than an outbox can take")
	// ErrTooManyGroups: the owning shard already holds GroupsPerShardMax groups.
	ErrTooManyGroups = errors.New("shard: too many groups on the shard")
	// ErrDuplicateGroup: a group with this id is already on the node.
	ErrDuplicateGroup = errors.New("shard: duplicate group")
	// ErrUnknownGroup: no group with this id is on the node.
	ErrUnknownGroup = errors.New("shard: unknown group")
	// ErrNotStarted: the operation needs a started node.
	ErrNotStarted = errors.New("shard: node not started")
	// ErrStopped: Stop was called; the node takes no more work.
	ErrStopped = errors.New("shard: node stopped")
)

// Peer is another node of the cluster and the address it listens on for peer links.
type Peer struct {
	Node uint16
	Addr netip.AddrPort
}

// Config sets up the shards of one node. Zero values take the defaults listed on each field.
type Config struct {
	Node    uint16 // this node's id, 1..65535
	Cluster uint64 // cluster id, checked in every handshake (R18)
	Shards  int    // shard count S (default 1)
	// PinCores pins shard i to the i-th CPU of the process's affinity set (mod its size).
	PinCores bool
	// Tick is tick_ms as a duration (default 10 ms): the period of the ring timeout that drives the
	// schedule. Tests run the same tick counts with a short Tick.
	Tick time.Duration
	// Schedule is the heartbeat schedule in ticks (heartbeat.Config.Ticks converts the [cluster]
	// options once, at load). Default: the R23 defaults at a 10 ms tick.
	Schedule heartbeat.Ticks
	// Listen is the address peer links connect to (default 127.0.0.1:0, an ephemeral port).
	Listen netip.AddrPort
	// Secret is the cluster secret that authenticates every peer and client handshake (wire/auth.go: a
	// challenge from both ends answered with an HMAC; the secret never crosses the wire). Empty:
	// authentication off, which only works with an empty secret on every node; a node with a secret
	// refuses a peer without one, and the other way round (counted in Stats.AuthRefused).
	Secret []byte
	// ClientListen is the address clients connect to; unset, the node has no client listener. Every
	// shard binds its own socket to it with SO_REUSEPORT (port 0: one ephemeral port for all of them,
	// see Node.ClientAddr). The client options are in client.go (ClientConfig).
	ClientListen netip.AddrPort
	Client       ClientConfig
	// KafkaListen is the address Kafka clients connect to; unset, the node has no Kafka listener.
	// Every shard binds its own socket to it with SO_REUSEPORT, as ClientListen. Its connections
	// take the bounds and timeouts of Client (kafka.go); the node must SetKafkaHandler.
	KafkaListen netip.AddrPort

	// Ring configures each shard's ring (default Entries 1024: room for the tick's superblock saves).
	Ring ring.Config
	// WrapRing, when set, wraps each shard's ring right after the shard created it, on the shard's
	// thread: a test seam for the storage fault model (ring/powerloss) and for rings that delay or fail
	// operations. Everything on the shard, its groups included, then uses the returned ring.
	WrapRing func(shard int, r ring.Ring) ring.Ring
	// QueueCapacity is the slot count of each cross-shard queue, a power of two (default 16384).
	QueueCapacity int
	// OutboxBytes is the capacity of each per-peer outbox buffer (default 4 MiB). It must hold the
	// largest pair of batches a tick builds, batchReserve: a Commit batch of GroupsPerShardMax entries
	// and a reply batch of ReplyOutboxEntries, with their headers (R13). SendFrame frames use what is
	// left above that reserve, so a tick's batches always fit in one frame each.
	OutboxBytes int
	// GroupsPerShardMax bounds the groups one shard holds; AddGroup refuses more. Unset, it and
	// ReplyOutboxEntries default to what fits in a quarter of OutboxBytes each (at most 16384 groups
	// and 65536 replies), so half of the outbox stays for SendFrame frames: at the default 4 MiB,
	// 16384 groups, 32768 replies and about 2.4 MiB for frames.
	GroupsPerShardMax int
	// DataQueueFrames bounds each per-peer queue of SendData frames (default 1024).
	DataQueueFrames int
	// ReplyOutboxEntries bounds each per-peer reply outbox (default 32768 entries at the default
	// OutboxBytes; see GroupsPerShardMax).
	ReplyOutboxEntries int
	// RecvBufferBytes is the receive buffer of an accepted connection, where batches, group frames and
	// data frames arrive (default 2 MiB + 512: a 1 MiB data frame and the next one's start). Frames up
	// to this size are received without an allocation; a larger one, up to wire.FrameSizeMax, into a
	// buffer grown for it and dropped after it. Outbound links receive only the peer's handshake and
	// read with linkRecvBytes.
	RecvBufferBytes int
	// ReconnectBaseTicks and ReconnectMaxTicks bound the reconnect backoff (defaults 10 and 200).
	ReconnectBaseTicks uint64
	ReconnectMaxTicks  uint64
	// HandshakeTimeoutTicks bounds connect plus handshake, on both ends (default 500): a peer that
	// accepts but never answers cannot hold a link or a connection forever.
	HandshakeTimeoutTicks uint64
	// PeerFrameTimeoutTicks bounds a frame on an accepted peer connection from its first byte to its
	// last (default 3000, 30 s at 10 ms; TimeoutNever: never): a peer that sent a header and stopped
	// cannot hold its connection, and the buffer its bytes grew, for good. Ticks the shard spends not
	// reading by its own choice (a full cross-shard queue) do not count. Accepted peer connections have
	// no idle timeout (see the package doc).
	PeerFrameTimeoutTicks uint64
	// DrainTimeout bounds how long Stop waits for each shard's in-flight operations after it shut
	// down every socket and told every group to stop (default 5 s). Operations still in flight then are
	// abandoned with the ring (counted in Stats.DrainAbandoned and logged).
	DrainTimeout time.Duration
	// Seed seeds each shard's jitter source (math/rand/v2 PCG, mixed with node and shard).
	Seed uint64

	Logger   *slog.Logger          // nil: slog.Default()
	Registry prometheus.Registerer // nil: no metrics registered (never the global registry)
}

// withDefaults fills zero fields.
func (c Config) withDefaults() Config {
	if c.Shards == 0 {
		c.Shards = 1
	}
	if c.Tick == 0 {
		c.Tick = 10 * time.Millisecond
	}
	if c.Schedule == (heartbeat.Ticks{}) {
		t, err := heartbeat.DefaultConfig().Ticks(10)
		if err == nil {
			c.Schedule = t
		}
	}
	if !c.Listen.IsValid() {
		c.Listen = netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), 0)
	}
	if c.Ring.Entries == 0 {
		c.Ring.Entries = 1024
	}
	if c.QueueCapacity == 0 {
		c.QueueCapacity = 16384
	}
	if c.OutboxBytes == 0 {
		c.OutboxBytes = 4 << 20
	}
	if c.DataQueueFrames == 0 {
		c.DataQueueFrames = 1024
	}

	if c.RecvBufferBytes == 0 {
		c.RecvBufferBytes = 2<<20 + 2*wire.HeaderSize
	}
	// Unset batch bounds default to 16384 groups and 65536 replies, or less so that each batch takes at
	// most a quarter of the outbox: half of it stays for SendFrame frames.
	quarter := c.OutboxBytes / 4
	if c.GroupsPerShardMax == 0 {
		c.GroupsPerShardMax = max(1, min(16384, quarter/wire.CommitEntrySize))
	}
	if c.ReplyOutboxEntries == 0 {
		c.ReplyOutboxEntries = max(1, min(65536, quarter/wire.CommitReplyEntrySize))
	}
	if c.ReconnectBaseTicks == 0 {
		c.ReconnectBaseTicks = 10
	}
	if c.ReconnectMaxTicks == 0 {
		c.ReconnectMaxTicks = 200
	}
	if c.HandshakeTimeoutTicks == 0 {
		c.HandshakeTimeoutTicks = 500
	}
	if c.PeerFrameTimeoutTicks == 0 {
		c.PeerFrameTimeoutTicks = 3000
	}
	if c.DrainTimeout == 0 {
		c.DrainTimeout = 5 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.Client = c.Client.withDefaults(c.HandshakeTimeoutTicks)
	return c
}

// FrameRoom is the largest frame SendFrame can ever take on a link, the defaults filled in: the outbox
// less the room its batches keep (larger ones are ErrFrameTooLarge).
func (c Config) FrameRoom() int {
	d := c.withDefaults()
	return d.OutboxBytes - d.batchReserve()
}

// batchReserve is the room a tick's batches may take in an outbox: the largest Commit batch (one
// entry per group of the shard) and the largest reply batch, each with its header (R13).
func (c Config) batchReserve() int {
	return 2*wire.HeaderSize + c.GroupsPerShardMax*wire.CommitEntrySize +
		c.ReplyOutboxEntries*wire.CommitReplyEntrySize
}

// Validate checks c as NewNode does, with the defaults filled in, without binding anything.
func (c Config) Validate() error {
	return c.withDefaults().validate()
}

// validate checks a config that withDefaults filled.
func (c Config) validate() error {
	switch {
	case c.Node == 0:
		return fmt.Errorf("%w: node id must be 1..65535", ErrConfig)
	case c.Shards < 1 || c.Shards > 1024:
		return fmt.Errorf("%w: shards is %d, want 1..1024", ErrConfig, c.Shards)
	case c.Tick < time.Microsecond*100:
		return fmt.Errorf("%w: tick_ms %v is below 0.1 ms", ErrConfig, c.Tick)
	case c.QueueCapacity&(c.QueueCapacity-1) != 0 || c.QueueCapacity < 0:
		return fmt.Errorf("%w: queue capacity %d is not a power of two", ErrConfig, c.QueueCapacity)
	case c.GroupsPerShardMax < 1 || c.GroupsPerShardMax > wire.CommitEntriesMax:
		return fmt.Errorf("%w: groups per shard %d, want 1..%d", ErrConfig, c.GroupsPerShardMax, wire.CommitEntriesMax)
	case c.ReplyOutboxEntries < 1 || c.ReplyOutboxEntries > wire.CommitReplyEntriesMax:
		return fmt.Errorf("%w: reply outbox entries %d, want 1..%d", ErrConfig, c.ReplyOutboxEntries,
			wire.CommitReplyEntriesMax)
	case c.OutboxBytes < c.batchReserve()+4096:
		return fmt.Errorf("%w: outbox bytes %d cannot hold a tick's largest batches (%d bytes for %d groups "+
			"and %d replies, R13) plus 4096 bytes of frames", ErrConfig, c.OutboxBytes, c.batchReserve(),
			c.GroupsPerShardMax, c.ReplyOutboxEntries)
	case c.DataQueueFrames < 1:
		return fmt.Errorf("%w: data queue frames %d is below 1", ErrConfig, c.DataQueueFrames)
	case c.RecvBufferBytes < 4096:
		return fmt.Errorf("%w: receive buffer bytes %d is below 4096", ErrConfig, c.RecvBufferBytes)
	case c.DrainTimeout < 0:
		return fmt.Errorf("%w: drain timeout %v is negative", ErrConfig, c.DrainTimeout)
	case c.ReconnectMaxTicks < c.ReconnectBaseTicks:
		return fmt.Errorf("%w: reconnect max ticks %d below base %d", ErrConfig, c.ReconnectMaxTicks,
			c.ReconnectBaseTicks)
	}
	if err := c.Schedule.Validate(); err != nil {
		return fmt.Errorf("%w: schedule: %w", ErrConfig, err)
	}
	return c.Client.validate()
}

// MetadataGroupID is the metadata group's group id. It lives on shard 0 of every node; stream ids
// never take this value.
const MetadataGroupID uint64 = 1<<64 - 1

// ShardOf is the shard that owns group on a node of shards shards: 0 for the metadata group, else a
// mix of the id modulo shards. Every node computes it from the id alone, so a receiving shard routes
// an entry without looking anything up (R16), whatever the sender's shard count.
func ShardOf(group uint64, shards int) int {
	if group == MetadataGroupID || shards == 1 {
		return 0
	}
	// splitmix64's finalizer: consecutive ids spread evenly.
	z := group + 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	z ^= z >> 31
	return int(z % uint64(shards))
}
