package localcluster

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/ringstream/ringstream/engine/config"
)

// layout builds a cluster of n nodes with its configs written, without formatting or starting any.
func layout(t *testing.T, opts Options) *Cluster {
	t.Helper()
	opts.Dir = t.TempDir()
	opts.Binary = "/nonexistent/ringstream" // nothing is run
	c, err := newCluster(opts)
	if err != nil {
		t.Fatal(err)
	}
	addrs, err := freePorts(addrsPerNode * c.opts.Nodes)
	if err != nil {
		t.Fatal(err)
	}
	for i := range c.opts.Nodes {
		id := uint16(i + 1)
		c.nodes = append(c.nodes, &Node{ID: id, Dir: filepath.Join(c.dir, "node"+strconv.Itoa(i+1)),
			PeerAddr: addrs[addrsPerNode*i], ClientAddr: addrs[addrsPerNode*i+1], AdminAddr: addrs[addrsPerNode*i+2],
			KafkaAddr: addrs[addrsPerNode*i+3], binary: c.opts.Binary})
	}
	for _, n := range c.nodes {
		if err := c.writeConfig(n); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

func TestConfigsLoadWithTheClusterAddressesAndSecret(t *testing.T) {
	c := layout(t, Options{Nodes: 5, Shards: 2, ClusterID: 42})
	seen := map[string]bool{}
	for _, n := range c.Nodes() {
		cfg, err := config.Load(n.ConfigPath())
		if err != nil {
			t.Fatalf("node %d: %v", n.ID, err)
		}
		f := cfg.File
		if f.Node.ID != n.ID || f.Cluster.ID != 42 || cfg.ShardCount != 2 {
			t.Errorf("node %d: id %d cluster %d shards %d", n.ID, f.Node.ID, f.Cluster.ID, cfg.ShardCount)
		}
		if string(cfg.Secret) != c.Secret() || len(c.Secret()) != 64 {
			t.Errorf("node %d: secret %q, cluster's %q", n.ID, cfg.Secret, c.Secret())
		}
		if len(f.Cluster.Peers) != 5 || f.Cluster.Peers[strconv.Itoa(int(n.ID))] != n.PeerAddr {
			t.Errorf("node %d: peers %v", n.ID, f.Cluster.Peers)
		}
		if len(f.Cluster.Clients) != 5 || f.Cluster.Clients[strconv.Itoa(int(n.ID))] != n.ClientAddr {
			t.Errorf("node %d: clients %v", n.ID, f.Cluster.Clients)
		}
		if len(f.Metadata.Replicas) != 5 {
			t.Errorf("node %d: replicas %v, want 5 in a 5-node cluster", n.ID, f.Metadata.Replicas)
		}
		for _, a := range []string{n.PeerAddr, n.ClientAddr, n.AdminAddr} {
			if seen[a] {
				t.Errorf("address %s given twice", a)
			}
			seen[a] = true
		}
		if st, err := os.Stat(n.ConfigPath()); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("node %d: config file mode %v (%v), want 0600: it holds the secret", n.ID, st.Mode(), err)
		}
	}
}

func TestReconfigureRewritesOnlyThatNode(t *testing.T) {
	c := layout(t, Options{})
	if err := c.Reconfigure(2, func(f *config.File) { f.Shards.Count = 3 }); err != nil {
		t.Fatal(err)
	}
	for _, n := range c.Nodes() {
		cfg, err := config.Load(n.ConfigPath())
		if err != nil {
			t.Fatal(err)
		}
		want := 1
		if n.ID == 2 {
			want = 3
		}
		if cfg.ShardCount != want {
			t.Errorf("node %d: %d shards, want %d", n.ID, cfg.ShardCount, want)
		}
		if len(cfg.File.Metadata.Replicas) != 3 {
			t.Errorf("node %d: replicas %v", n.ID, cfg.File.Metadata.Replicas)
		}
	}
}

func TestBadOptionsAndStatesAreRefused(t *testing.T) {
	if _, err := newCluster(Options{Nodes: 2}); !errors.Is(err, ErrStart) {
		t.Errorf("2 nodes: %v, want ErrStart", err)
	}
	c := layout(t, Options{})
	if err := c.Kill(9); !errors.Is(err, ErrState) {
		t.Errorf("kill of an unknown node: %v, want ErrState", err)
	}
	if err := c.Kill(1); !errors.Is(err, ErrState) {
		t.Errorf("kill of a node never started: %v, want ErrState", err)
	}
	bad := layout(t, Options{})
	bad.opts.Configure = func(_ uint16, f *config.File) { f.Cluster.TickMs = 0 }
	if err := bad.writeConfig(bad.Node(1)); !errors.Is(err, ErrStart) || !errors.Is(err, config.ErrConfig) {
		t.Errorf("invalid config written: %v, want ErrStart wrapping config.ErrConfig", err)
	}
	if err := bad.Restart(t.Context(), 1); !errors.Is(err, ErrStart) {
		t.Errorf("start of a missing binary: %v, want ErrStart", err)
	}
}
