package localcluster

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"

	"github.com/BurntSushi/toml"

	"github.com/ringstream/ringstream/engine/config"
)

// Ports below the kernel's ephemeral range are chosen from portsMin up when the range leaves room
// there; otherwise from just above the range.
const portsMin = 10000

// freePorts binds n ports on 127.0.0.1 at once, so that no two are alike, and releases them. The
// ports lie outside the kernel's ephemeral range (net.ipv4.ip_local_port_range): a node that is down
// is redialed by its peers, and a dial's ephemeral source port may be the dead node's own listening
// port, which the kernel then connects to itself (a TCP self-connect), holding the port when the
// node restarts. A port outside the range is never a dial's source port.
func freePorts(n int) ([]string, error) {
	lo, hi := portWindow()
	addrs := make([]string, 0, n)
	lns := make([]net.Listener, 0, n)
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	span := hi - lo + 1
	start := mrand.IntN(span)
	for i := 0; i < span && len(lns) < n; i++ {
		port := lo + (start+i)%span
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		lns = append(lns, ln)
		addrs = append(addrs, ln.Addr().String())
	}
	if len(lns) < n {
		return nil, fmt.Errorf("%w: %d free ports on 127.0.0.1 in %d..%d, want %d", ErrStart, len(lns), lo, hi, n)
	}
	return addrs, nil
}

// portWindow is the range ports are chosen from: below the ephemeral range where it leaves room,
// else above it.
func portWindow() (lo, hi int) {
	ephLo, ephHi := 32768, 60999
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		var a, z int
		if _, err := fmt.Sscan(string(b), &a, &z); err == nil && a > 0 && z >= a {
			ephLo, ephHi = a, z
		}
	}
	if ephLo-1-portsMin >= 1000 {
		return portsMin, ephLo - 1
	}
	return ephHi + 1, 65535
}

// newSecret is 32 random bytes, hex-encoded.
func newSecret() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("%w: cluster secret: %w", ErrStart, err)
	}
	return hex.EncodeToString(b[:]), nil
}

// metaReplicas is the node ids of the metadata group for a cluster of n nodes: 1 to 3, or 1 to 5
// from five nodes on.
func metaReplicas(n int) []uint16 {
	count := 3
	if n >= 5 {
		count = 5
	}
	ids := make([]uint16, count)
	for i := range ids {
		ids[i] = uint16(i + 1)
	}
	return ids
}

// File is node n's configuration as the cluster writes it: the defaults, with the cluster's ids,
// addresses, secret and shard count, then Options.Configure's changes and the node's own.
func (c *Cluster) File(n *Node) config.File {
	f := config.Defaults()
	f.Node = config.NodeSection{ID: n.ID, DataDir: n.DataDir(), Listen: n.PeerAddr}
	f.Cluster.ID = c.opts.ClusterID
	f.Cluster.Secret = c.secret
	f.Cluster.Peers = make(map[string]string, len(c.nodes))
	f.Cluster.Clients = make(map[string]string, len(c.nodes)) // lookups hand these out
	f.Cluster.Kafka = make(map[string]string, len(c.nodes))   // Kafka Metadata lists these brokers
	for _, p := range c.nodes {
		f.Cluster.Peers[strconv.Itoa(int(p.ID))] = p.PeerAddr
		f.Cluster.Clients[strconv.Itoa(int(p.ID))] = p.ClientAddr
		f.Cluster.Kafka[strconv.Itoa(int(p.ID))] = p.KafkaAddr
	}
	f.Shards.Count = c.opts.Shards
	f.Metadata.Replicas = metaReplicas(len(c.nodes))
	f.Admin.Listen = n.AdminAddr
	f.Client.Listen = n.ClientAddr
	f.Kafka.Listen = n.KafkaAddr
	if c.opts.Configure != nil {
		c.opts.Configure(n.ID, &f)
	}
	if n.configure != nil {
		n.configure(&f)
	}
	return f
}

// writeConfig encodes node n's File, checks that config.Parse accepts it, and writes it to
// n.ConfigPath (mode 0600: it holds the secret).
func (c *Cluster) writeConfig(n *Node) error {
	var b bytes.Buffer
	b.WriteString("# written by ringstream's local cluster launcher\n")
	if err := toml.NewEncoder(&b).Encode(c.File(n)); err != nil {
		return fmt.Errorf("%w: node %d config: %w", ErrStart, n.ID, err)
	}
	if _, err := config.Parse(b.Bytes(), n.Dir); err != nil {
		return fmt.Errorf("%w: node %d config: %w", ErrStart, n.ID, err)
	}
	if err := os.MkdirAll(n.Dir, 0o755); err != nil {
		return fmt.Errorf("%w: %w", ErrStart, err)
	}
	if err := os.WriteFile(n.ConfigPath(), b.Bytes(), 0o600); err != nil {
		return fmt.Errorf("%w: %w", ErrStart, err)
	}
	return nil
}

// replicaIndex is node id's member index in the metadata group, or -1 if it holds no replica.
func (c *Cluster) replicaIndex(id uint16) int {
	for i, r := range metaReplicas(len(c.nodes)) {
		if r == id {
			return i
		}
	}
	return -1
}

// metaDir is the metadata replica's directory inside a node's data directory.
func metaDir(dataDir string) string { return filepath.Join(dataDir, "meta") }
