package config

import (
	"bytes"
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/engine/vsr"
	"github.com/ringstream/ringstream/ring"
	"github.com/ringstream/ringstream/shard"
	"github.com/ringstream/ringstream/shard/heartbeat"
)

// Config is a loaded and validated node configuration: the File as read, and the values resolved
// from it once, at load (addresses parsed, milliseconds turned into ticks, the secret read, the shard
// count chosen). The converters (Shard, Peers, Heartbeat, Segment, Control, MetaGroup) build the
// other packages' configs from it.
type Config struct {
	File File

	// Secret is the cluster secret from secret or secret_file; empty: authentication off.
	Secret []byte
	// ShardCount is shards.count, or the CPUs the process may use where it is 0.
	ShardCount int
	// Nodes is cluster.peers as shard peers, sorted by node id, this node included.
	Nodes []shard.Peer
	// ClientAddrs is every node's client address (cluster.clients, or its peer address with the port
	// plus one), sorted by node id, one per entry of Nodes.
	ClientAddrs []shard.Peer
	// Listen, ClientListen and AdminListen are node.listen, client.listen and admin.listen.
	Listen, ClientListen, AdminListen netip.AddrPort
	// KafkaListen is kafka.listen; the zero value: no Kafka listener.
	KafkaListen netip.AddrPort
	// KafkaAddrs is the Kafka address of every node of cluster.kafka (this node's kafka.listen when
	// it is left out and dialable), sorted by node id: the brokers of a Kafka Metadata response.
	KafkaAddrs []shard.Peer
	// Schedule is the four R23 options in ticks.
	Schedule heartbeat.Ticks
	// NodeLivenessTimeoutTicks and EagerFailoverGraceTicks are the [cluster] options in ticks.
	NodeLivenessTimeoutTicks uint32
	EagerFailoverGraceTicks  uint32
	// Policy is cluster.assignment_policy.
	Policy meta.Policy
	// WaitHoldsP is ring.Config.WaitHoldsP for every shard's ring: not a file option but the
	// process's choice; `ringstream serve` sets it (with GOMAXPROCS at shards + 1), in-process
	// clusters of several nodes leave it off.
	WaitHoldsP bool
	// Warnings lists what the configuration allows but advises against, one sentence each, for the
	// caller to log (`ringstream config check` prints them).
	Warnings []string
}

// resolve validates f and computes the resolved values; dir is where a relative secret_file is read.
func resolve(f File, dir string) (*Config, error) {
	c := &Config{File: f}
	steps := [...]func() error{
		c.resolveNode,
		c.resolveTicks,
		c.resolveShards,
		c.resolveStorage,
		c.resolveMetadata,
		c.resolveObservability,
		func() error { return c.resolveSecret(dir) },
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// parseAddr reads key's value as an ip:port literal.
func parseAddr(key, s string) (netip.AddrPort, error) {
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		return netip.AddrPort{}, invalid(key, "%q is not an ip:port address (IP literals only, no host names): %v", s, err)
	}
	return ap, nil
}

// resolveNode checks node.id, cluster.id, the listen addresses and the peers.
func (c *Config) resolveNode() error {
	f := &c.File
	if f.Node.ID == 0 {
		return invalid("node.id", "must be 1..65535")
	}
	if f.Cluster.ID == 0 || f.Cluster.ID > 1<<63-1 {
		return invalid("cluster.id", "must be 1..2^63-1")
	}
	if f.Node.DataDir == "" {
		return invalid("node.data_dir", "must not be empty")
	}
	var err error
	if c.Listen, err = parseAddr("node.listen", f.Node.Listen); err != nil {
		return err
	}
	if c.ClientListen, err = parseAddr("client.listen", f.Client.Listen); err != nil {
		return err
	}
	if c.AdminListen, err = parseAddr("admin.listen", f.Admin.Listen); err != nil {
		return err
	}
	if !c.AdminListen.Addr().IsLoopback() {
		c.Warnings = append(c.Warnings, fmt.Sprintf("config: admin.listen is %s, not a loopback address: "+
			"/metrics, /v1 and /debug/pprof are served without authentication to whoever reaches it", c.AdminListen))
	}
	if f.Kafka.Listen != "" {
		if c.KafkaListen, err = parseAddr("kafka.listen", f.Kafka.Listen); err != nil {
			return err
		}
	}
	if err := c.resolvePeers(); err != nil {
		return err
	}
	if err := c.resolveClients(); err != nil {
		return err
	}
	return c.resolveKafka()
}

// resolveKafka checks cluster.kafka (node ids of cluster.peers, dialable addresses) into KafkaAddrs.
func (c *Config) resolveKafka() error {
	f := &c.File
	for _, p := range c.Nodes {
		key := strconv.FormatUint(uint64(p.Node), 10)
		v, ok := f.Cluster.Kafka[key]
		if !ok {
			if p.Node == f.Node.ID && c.KafkaListen.IsValid() && c.KafkaListen.Port() != 0 &&
				!c.KafkaListen.Addr().IsUnspecified() {
				c.KafkaAddrs = append(c.KafkaAddrs, shard.Peer{Node: p.Node, Addr: c.KafkaListen})
			}
			continue
		}
		ap, err := parseAddr("cluster.kafka."+key, v)
		if err != nil {
			return err
		}
		if ap.Port() == 0 || ap.Addr().IsUnspecified() {
			return invalid("cluster.kafka."+key, "%s is not an address a client can dial (port 0 or unspecified IP)", ap)
		}
		c.KafkaAddrs = append(c.KafkaAddrs, shard.Peer{Node: p.Node, Addr: ap})
	}
	for _, k := range slices.Sorted(maps.Keys(f.Cluster.Kafka)) {
		if _, ok := f.Cluster.Peers[k]; !ok {
			return invalid("cluster.kafka", "key %q is not a node of cluster.peers", k)
		}
	}
	return nil
}

// resolveClients checks cluster.clients (node ids of cluster.peers, dialable addresses) and fills in
// the nodes it leaves out: their peer address with the port plus one.
func (c *Config) resolveClients() error {
	f := &c.File
	for _, k := range slices.Sorted(maps.Keys(f.Cluster.Clients)) {
		if _, ok := f.Cluster.Peers[k]; !ok {
			return invalid("cluster.clients", "key %q is not a node of cluster.peers", k)
		}
	}
	c.ClientAddrs = make([]shard.Peer, 0, len(c.Nodes))
	for _, p := range c.Nodes {
		key := strconv.FormatUint(uint64(p.Node), 10)
		v, ok := f.Cluster.Clients[key]
		if !ok {
			if p.Addr.Port() == 65535 {
				return invalid("cluster.clients", "node %d's peer port is 65535, which leaves no port plus one: "+
					"list its client address", p.Node)
			}
			c.ClientAddrs = append(c.ClientAddrs, shard.Peer{Node: p.Node, Addr: netip.AddrPortFrom(p.Addr.Addr(), p.Addr.Port()+1)})
			continue
		}
		ap, err := parseAddr("cluster.clients."+key, v)
		if err != nil {
			return err
		}
		if ap.Port() == 0 || ap.Addr().IsUnspecified() {
			return invalid("cluster.clients."+key, "%s is not an address a client can dial (port 0 or unspecified IP)", ap)
		}
		c.ClientAddrs = append(c.ClientAddrs, shard.Peer{Node: p.Node, Addr: ap})
	}
	return nil
}

// resolvePeers checks cluster.peers: node ids as keys, distinct ip:port addresses, this node included.
func (c *Config) resolvePeers() error {
	f := &c.File
	if len(f.Cluster.Peers) == 0 {
		return invalid("cluster.peers", "must list every node of the cluster, this one (node.id %d) included", f.Node.ID)
	}
	c.Nodes = make([]shard.Peer, 0, len(f.Cluster.Peers))
	keys := slices.Sorted(maps.Keys(f.Cluster.Peers)) // the first bad key named is the same every run
	for _, k := range keys {
		v := f.Cluster.Peers[k]
		id, err := strconv.ParseUint(k, 10, 16)
		if err != nil || id == 0 || strconv.FormatUint(id, 10) != k {
			return invalid("cluster.peers", "key %q is not a node id 1..65535 in plain decimal", k)
		}
		ap, err := parseAddr("cluster.peers."+k, v)
		if err != nil {
			return err
		}
		if ap.Port() == 0 || ap.Addr().IsUnspecified() {
			return invalid("cluster.peers."+k, "%s is not an address another node can dial (port 0 or unspecified IP)", ap)
		}
		c.Nodes = append(c.Nodes, shard.Peer{Node: uint16(id), Addr: ap})
	}
	slices.SortFunc(c.Nodes, func(a, b shard.Peer) int { return cmp.Compare(a.Node, b.Node) })
	byAddr := slices.Clone(c.Nodes)
	slices.SortFunc(byAddr, func(a, b shard.Peer) int { return a.Addr.Compare(b.Addr) })
	for i := 1; i < len(byAddr); i++ {
		if byAddr[i].Addr == byAddr[i-1].Addr {
			return invalid("cluster.peers", "nodes %d and %d share the address %s", byAddr[i-1].Node,
				byAddr[i].Node, byAddr[i].Addr)
		}
	}
	if _, ok := slices.BinarySearchFunc(c.Nodes, f.Node.ID, func(p shard.Peer, id uint16) int {
		return cmp.Compare(p.Node, id)
	}); !ok {
		return invalid("cluster.peers", "does not list this node (node.id %d)", f.Node.ID)
	}
	return nil
}

// resolveTicks turns every millisecond option into ticks of tick_ms, through the validators of
// shard/heartbeat (R9, R23) and engine/control.
func (c *Config) resolveTicks() error {
	f := &c.File
	if f.Cluster.TickMs == 0 || f.Cluster.TickMs > 1000 {
		return invalid("cluster.tick_ms", "is %d; must be 1..1000", f.Cluster.TickMs)
	}
	hb := f.heartbeatConfig()
	t, err := hb.Ticks(f.Cluster.TickMs)
	if err != nil {
		return wrapKey("cluster", err)
	}
	c.Schedule = t
	c.Warnings = append(c.Warnings, hb.Warnings()...)
	named := [...]struct {
		key   string
		value heartbeat.Millis
		ticks *uint32
	}{
		{"cluster.node_liveness_timeout", f.Cluster.NodeLivenessTimeout, &c.NodeLivenessTimeoutTicks},
		{"cluster.eager_failover_grace", f.Cluster.EagerFailoverGrace, &c.EagerFailoverGraceTicks},
	}
	for _, o := range named {
		if uint64(o.value)%f.Cluster.TickMs != 0 {
			return invalid(o.key, "%d ms is not a whole multiple of tick_ms (%d ms)", o.value, f.Cluster.TickMs)
		}
		n := uint64(o.value) / f.Cluster.TickMs
		if n > 1<<32-1 {
			return invalid(o.key, "%d ms is more than 2^32-1 ticks", o.value)
		}
		*o.ticks = uint32(n)
	}
	if c.Policy, err = ParsePolicy(f.Cluster.AssignmentPolicy); err != nil {
		return wrapKey("cluster.assignment_policy", err)
	}
	if err := c.Control().Validate(); err != nil {
		return wrapKey("cluster", err)
	}
	return nil
}

// resolveShards chooses the shard count and checks [shards] with ring's and shard's validators.
func (c *Config) resolveShards() error {
	f := &c.File
	c.ShardCount = f.Shards.Count
	if c.ShardCount == 0 {
		n, err := affinityCPUs()
		if err != nil {
			return wrapKey("shards.count", err)
		}
		c.ShardCount = n
	}
	if c.ShardCount < 0 {
		return invalid("shards.count", "is %d; must be 0 (one per CPU) or 1..1024", f.Shards.Count)
	}
	rc := ring.Config{Backend: ring.Backend(f.Shards.RingBackend), Entries: f.Shards.RingEntries,
		TaskRun: ring.TaskRun(f.Shards.RingTaskRun)}
	if f.Shards.RingBackend == "" || f.Shards.RingEntries == 0 || f.Shards.RingTaskRun == "" {
		return invalid("shards.ring_backend/ring_entries/ring_task_run",
			"must not be empty or 0 (auto, 1024 and coop are the defaults)")
	}
	if err := rc.Validate(); err != nil {
		return wrapKey("shards.ring_backend/ring_entries/ring_task_run", err)
	}
	if err := c.resolveClientLimits(); err != nil {
		return err
	}
	if err := (shard.Config{Node: c.File.Node.ID, Client: c.clientConfig()}).Validate(); err != nil {
		return wrapKey("client", err)
	}
	if err := c.Shard().Validate(); err != nil {
		return wrapKey("shards", err)
	}
	return nil
}

// resolveStorage checks [storage] with segment's validator.
func (c *Config) resolveStorage() error {
	f := &c.File
	if f.Storage.SegmentBytes < 0 {
		return invalid("storage.segment_bytes", "is %d; must be at least 4096", f.Storage.SegmentBytes)
	}
	if f.Storage.RetentionBytes < 0 {
		return invalid("storage.retention_bytes", "is %d; must be 0 (keep all) or more", f.Storage.RetentionBytes)
	}
	if f.Storage.RetentionAge > 1<<62 {
		return invalid("storage.retention_age", "is too large")
	}
	if f.Storage.IdleCloseAfter > 1<<62 {
		return invalid("storage.idle_close_after", "is too large")
	}
	if err := c.Segment().Validate(); err != nil {
		return wrapKey("storage (segment_bytes, prewrite_bytes, recycle_segments)", err)
	}
	return nil
}

// DefaultPerStreamMax is metrics.per_stream_max's default; PerStreamMaxLimit its largest value.
const (
	DefaultPerStreamMax = 1000
	PerStreamMaxLimit   = 100000
)

// resolveObservability checks [metrics] and [log].
func (c *Config) resolveObservability() error {
	f := &c.File
	if n := f.Metrics.PerStreamMax; n < 0 || n > PerStreamMaxLimit {
		return invalid("metrics.per_stream_max", "is %d; must be 0 (off) to %d", n, PerStreamMaxLimit)
	}
	switch f.Log.Format {
	case "text", "json":
	default:
		return invalid("log.format", "is %q; must be text or json", f.Log.Format)
	}
	return nil
}

// resolveMetadata checks metadata.replicas: 3 or 5 distinct nodes of cluster.peers.
func (c *Config) resolveMetadata() error {
	r := c.File.Metadata.Replicas
	if err := vsr.DefaultConfig(len(r), 0).Validate(); err != nil {
		return wrapKey("metadata.replicas", err)
	}
	for i, id := range r {
		if slices.Contains(r[:i], id) {
			return invalid("metadata.replicas", "node %d is listed twice", id)
		}
		if !slices.ContainsFunc(c.Nodes, func(p shard.Peer) bool { return p.Node == id }) {
			return invalid("metadata.replicas", "node %d is not in cluster.peers", id)
		}
	}
	// metahost.Group refuses a grace past the view change timeout (this package does not import
	// metahost: see the package doc), so the rule is checked again at load.
	if uint64(c.EagerFailoverGraceTicks) > vsr.DefaultConfig(len(r), 0).ViewChangeTimeoutTicks {
		return invalid("cluster.eager_failover_grace", "%d ticks is past the metadata group's view change "+
			"timeout (%d ticks)", c.EagerFailoverGraceTicks, vsr.DefaultConfig(len(r), 0).ViewChangeTimeoutTicks)
	}
	return nil
}

// resolveSecret reads the cluster secret from secret or secret_file.
func (c *Config) resolveSecret(dir string) error {
	f := &c.File
	switch {
	case f.Cluster.Secret != "" && f.Cluster.SecretFile != "":
		return invalid("cluster.secret", "set either secret or secret_file, not both")
	case f.Cluster.SecretFile != "":
		path := f.Cluster.SecretFile
		if !filepath.IsAbs(path) {
			path = filepath.Join(dir, path)
		}
		data, err := readBounded(path)
		if err != nil {
			return wrapKey("cluster.secret_file", err)
		}
		c.Secret = bytes.TrimRight(data, "\r\n")
		if len(c.Secret) == 0 {
			return invalid("cluster.secret_file", "%s is empty", path)
		}
		if st, err := os.Stat(path); err == nil && st.Mode().Perm()&0o077 != 0 {
			c.Warnings = append(c.Warnings, fmt.Sprintf("config: cluster.secret_file %s is readable by "+
				"group or others (mode %04o): chmod 600 it", path, st.Mode().Perm()))
		}
	default:
		c.Secret = []byte(f.Cluster.Secret)
	}
	if len(c.Secret) > 0 && len(c.Secret) < SecretBytesMin {
		return invalid("cluster.secret", "is %d bytes; a secret must be at least %d bytes (or empty for no "+
			"authentication)", len(c.Secret), SecretBytesMin)
	}
	if len(c.Secret) == 0 {
		c.Warnings = append(c.Warnings, "config: cluster.secret is empty: peer and client handshakes are not "+
			"authenticated, and anyone who can reach node.listen or client.listen may join; set the same secret "+
			"on every node")
	}
	return nil
}

// resolveClientLimits checks the [client] limits that name other options: timeouts in whole ticks,
// the idle timeout not below the handshake's, pending bytes enough for the largest frame. shard's
// validator checks the same relations again, in ticks.
func (c *Config) resolveClientLimits() error {
	cl, tick := &c.File.Client, c.File.Cluster.TickMs
	for _, o := range [...]struct {
		key string
		ms  heartbeat.Millis
	}{{"client.handshake_timeout", cl.HandshakeTimeout}, {"client.idle_timeout", cl.IdleTimeout},
		{"client.frame_timeout", cl.FrameTimeout}} {
		if uint64(o.ms)%tick != 0 {
			return invalid(o.key, "%d ms is not a whole multiple of tick_ms (%d ms)", o.ms, tick)
		}
	}
	switch {
	case cl.HandshakeTimeout == 0:
		return invalid("client.handshake_timeout", "must be at least one tick (%d ms)", tick)
	case cl.IdleTimeout != 0 && cl.IdleTimeout < cl.HandshakeTimeout:
		return invalid("client.idle_timeout", "%d ms is below client.handshake_timeout (%d ms); 0 turns it off",
			cl.IdleTimeout, cl.HandshakeTimeout)
	case cl.ConnectionsMax < 0:
		return invalid("client.connections_max", "is %d; must be 0 (what the shards hold) or more", cl.ConnectionsMax)
	case cl.PendingBytesMax < cl.FrameBytesMax:
		return invalid("client.pending_bytes_max", "%d is below client.frame_bytes_max (%d): the largest "+
			"request could never be taken", cl.PendingBytesMax, cl.FrameBytesMax)
	}
	if room := c.ShardCount * shard.ClientConnsShardMax(c.File.Shards.RingEntries); cl.ConnectionsMax > room {
		c.Warnings = append(c.Warnings, fmt.Sprintf("config: client.connections_max is %d, but %d shards with "+
			"ring_entries %d hold %d client connections (half of ring_entries each): connections past that are "+
			"refused (raise shards.ring_entries for more)", cl.ConnectionsMax, c.ShardCount, c.File.Shards.RingEntries, room))
	}
	return nil
}
