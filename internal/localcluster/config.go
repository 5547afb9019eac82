package localcluster

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"

	"github.com/BurntSushi/toml"

	"github.com/ringstream/ringstream/engine/config"
)

// freePorts binds n ports on 127.0.0.1:0 at once, so that no two are alike, and releases them.
func freePorts(n int) ([]string, error) {
	addrs := make([]string, 0, n)
	lns := make([]net.Listener, 0, n)
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("%w: no free port on 127.0.0.1: %w", ErrStart, err)
		}
		lns = append(lns, ln)
		addrs = append(addrs, ln.Addr().String())
	}
	return addrs, nil
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
	for _, p := range c.nodes {
		f.Cluster.Peers[strconv.Itoa(int(p.ID))] = p.PeerAddr
		f.Cluster.Clients[strconv.Itoa(int(p.ID))] = p.ClientAddr
	}
	f.Shards.Count = c.opts.Shards
	f.Metadata.Replicas = metaReplicas(len(c.nodes))
	f.Admin.Listen = n.AdminAddr
	f.Client.Listen = n.ClientAddr
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
