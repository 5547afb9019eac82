package localcluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/ringstream/ringstream/engine/config"
)

// Errors of the package; each wraps the cause.
var (
	// ErrStart: a node could not be configured, formatted or started, or was not ready in time.
	ErrStart = errors.New("localcluster: start failed")
	// ErrStop: a node did not exit cleanly after SIGTERM.
	ErrStop = errors.New("localcluster: stop failed")
	// ErrState: the operation does not fit the node's state (not running, already running, unknown id).
	ErrState = errors.New("localcluster: wrong node state")
)

// Options describe the cluster to start. The zero value is 3 nodes with 1 shard each in a new
// temporary directory, run by the current executable.
type Options struct {
	// Binary is the ringstream executable; empty: the running one (os.Executable).
	Binary string
	// Dir is the cluster's directory, created if missing; empty: a new temporary directory, removed
	// by Close.
	Dir string
	// Nodes is the node count, at least 3; 0 means 3.
	Nodes int
	// Shards is shards.count of every node; 0 means 1.
	Shards int
	// ClusterID is cluster.id; 0 means 1.
	ClusterID uint64
	// Secret is the cluster secret; empty: 32 random bytes, hex-encoded.
	Secret string
	// ReadyTimeout bounds the wait for each node's /v1/status; 0 means 30 s.
	ReadyTimeout time.Duration
	// Hosts, if set, gives each node its own IP (node i+1 at Hosts[i]), for nodes in network
	// namespaces: every node then listens on its IP at HostPorts, and the launcher no longer checks
	// that ports are free (they live in the node's namespace).
	Hosts []string
	// Command, if set, wraps a node's command line (for example `ip netns exec NS` in front of it).
	Command func(id uint16, argv []string) []string
	// Configure, if set, changes every node's file after the launcher filled it in.
	Configure func(id uint16, f *config.File)
	// Logger receives the launcher's own events; nil: slog.Default().
	Logger *slog.Logger
}

// Cluster is a running local cluster. Close it (or end the context given to Start) to stop every node.
type Cluster struct {
	opts    Options
	dir     string
	tempDir bool
	secret  string
	nodes   []*Node
	hc      *http.Client
	log     *slog.Logger

	closeOnce sync.Once
	stopCtx   func() bool
}

// Start writes the configs, formats the metadata replicas, starts every node and waits until each is
// ready. On error nothing is left running. When ctx ends, the cluster is closed.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	c, err := newCluster(opts)
	if err != nil {
		return nil, err
	}
	if err := c.setup(ctx); err != nil {
		c.Close()
		return nil, err
	}
	c.stopCtx = context.AfterFunc(ctx, func() { c.Close() })
	return c, nil
}

// newCluster fills in the defaults and lays out the nodes; it starts nothing.
func newCluster(opts Options) (*Cluster, error) {
	if opts.Nodes == 0 {
		opts.Nodes = 3
	}
	if opts.Nodes < 3 || opts.Nodes > 64 {
		return nil, fmt.Errorf("%w: %d nodes: the metadata group needs 3 to 64 nodes", ErrStart, opts.Nodes)
	}
	opts.Shards = cmpOr(opts.Shards, 1)
	opts.ClusterID = cmpOr(opts.ClusterID, 1)
	opts.ReadyTimeout = cmpOr(opts.ReadyTimeout, 30*time.Second)
	c := &Cluster{opts: opts, hc: &http.Client{Timeout: 2 * time.Second}, log: opts.Logger}
	if c.log == nil {
		c.log = slog.Default()
	}
	if opts.Binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("%w: the ringstream binary: %w", ErrStart, err)
		}
		c.opts.Binary = exe
	}
	c.secret = opts.Secret
	if c.secret == "" {
		s, err := newSecret()
		if err != nil {
			return nil, err
		}
		c.secret = s
	}
	c.dir = opts.Dir
	if c.dir == "" {
		d, err := os.MkdirTemp("", "ringstream-cluster-")
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrStart, err)
		}
		c.dir, c.tempDir = d, true
	}
	return c, nil
}

// cmpOr is v, or def where v is zero.
func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// setup lays out, configures, formats and starts every node.
func (c *Cluster) setup(ctx context.Context) error {
	addrs, err := c.addresses()
	if err != nil {
		return err
	}
	for i := range c.opts.Nodes {
		id := uint16(i + 1)
		c.nodes = append(c.nodes, &Node{
			ID: id, Dir: filepath.Join(c.dir, "node"+strconv.Itoa(int(id))),
			PeerAddr: addrs[addrsPerNode*i], ClientAddr: addrs[addrsPerNode*i+1], AdminAddr: addrs[addrsPerNode*i+2],
			KafkaAddr: addrs[addrsPerNode*i+3],
			binary:    c.opts.Binary,
		})
	}
	for _, n := range c.nodes {
		n.command = c.opts.Command
		if err := c.writeConfig(n); err != nil {
			return err
		}
		if err := c.format(ctx, n); err != nil {
			return err
		}
	}
	for _, n := range c.nodes {
		if err := n.start(); err != nil {
			return err
		}
	}
	for _, n := range c.nodes {
		if err := c.waitReady(ctx, n); err != nil {
			return err
		}
	}
	c.log.Info("localcluster: cluster ready", "dir", c.dir, "nodes", len(c.nodes))
	return nil
}

// HostPorts are the peer, client, admin and Kafka ports of nodes given their own IP (Options.Hosts).
var HostPorts = [addrsPerNode]int{7001, 7002, 7003, 7004}

// addrsPerNode is the addresses each node listens on: peer, client, admin and Kafka.
const addrsPerNode = 4

// addresses is the peer, client, admin and Kafka address of every node, four per node in id order.
func (c *Cluster) addresses() ([]string, error) {
	if c.opts.Hosts == nil {
		return freePorts(addrsPerNode * c.opts.Nodes)
	}
	if len(c.opts.Hosts) != c.opts.Nodes {
		return nil, fmt.Errorf("%w: %d hosts for %d nodes", ErrStart, len(c.opts.Hosts), c.opts.Nodes)
	}
	var out []string
	for _, h := range c.opts.Hosts {
		for _, p := range HostPorts {
			out = append(out, net.JoinHostPort(h, strconv.Itoa(p)))
		}
	}
	return out, nil
}

// format runs `ringstream format --new-cluster` for the node's metadata replica, if it holds one.
func (c *Cluster) format(ctx context.Context, n *Node) error {
	idx := c.replicaIndex(n.ID)
	if idx < 0 {
		return nil
	}
	cmd := exec.CommandContext(ctx, c.opts.Binary, "format", "--dir", metaDir(n.DataDir()),
		"--cluster", strconv.FormatUint(c.opts.ClusterID, 10), "--node", strconv.Itoa(int(n.ID)),
		"--replica", strconv.Itoa(idx), "--new-cluster")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%w: node %d: %s: %w: %s", ErrStart, n.ID, cmd, err, out)
	}
	return nil
}

// waitReady waits for node n's /v1/status within ReadyTimeout.
func (c *Cluster) waitReady(ctx context.Context, n *Node) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.ReadyTimeout)
	defer cancel()
	return n.waitReady(ctx, c.hc)
}

// Dir is the cluster's directory.
func (c *Cluster) Dir() string { return c.dir }

// Secret is the cluster secret the nodes were configured with.
func (c *Cluster) Secret() string { return c.secret }

// ClusterID is the cluster's id.
func (c *Cluster) ClusterID() uint64 { return c.opts.ClusterID }

// Nodes is every node, in id order (node i+1 at index i).
func (c *Cluster) Nodes() []*Node { return c.nodes }

// Node is the node with id, or nil.
func (c *Cluster) Node(id uint16) *Node {
	if id == 0 || int(id) > len(c.nodes) {
		return nil
	}
	return c.nodes[id-1]
}

// KafkaAddrs is every node's Kafka address, in id order.
func (c *Cluster) KafkaAddrs() []string {
	out := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = n.KafkaAddr
	}
	return out
}

// ClientAddrs is every node's client address, in id order.
func (c *Cluster) ClientAddrs() []string {
	out := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = n.ClientAddr
	}
	return out
}

// node is Node(id), or an ErrState error.
func (c *Cluster) node(id uint16) (*Node, error) {
	n := c.Node(id)
	if n == nil {
		return nil, fmt.Errorf("%w: no node %d in a cluster of %d", ErrState, id, len(c.nodes))
	}
	return n, nil
}

// Kill sends SIGKILL to node id's process group and waits until it is gone.
func (c *Cluster) Kill(id uint16) error {
	n, err := c.node(id)
	if err != nil {
		return err
	}
	return n.kill()
}

// Pause sends SIGSTOP to node id.
func (c *Cluster) Pause(id uint16) error {
	n, err := c.node(id)
	if err != nil {
		return err
	}
	_, err = n.signal(syscall.SIGSTOP, false)
	return err
}

// Resume sends SIGCONT to node id.
func (c *Cluster) Resume(id uint16) error {
	n, err := c.node(id)
	if err != nil {
		return err
	}
	_, err = n.signal(syscall.SIGCONT, false)
	return err
}

// Terminate sends SIGTERM to node id and waits for it to exit; a non-zero exit status is an error.
func (c *Cluster) Terminate(ctx context.Context, id uint16) error {
	n, err := c.node(id)
	if err != nil {
		return err
	}
	return n.terminate(ctx)
}

// Reconfigure changes node id's file with change (for example its shard count) and writes it again;
// the node must not be running. The change stays for later restarts.
func (c *Cluster) Reconfigure(id uint16, change func(f *config.File)) error {
	n, err := c.node(id)
	if err != nil {
		return err
	}
	if n.Running() {
		return fmt.Errorf("%w: node %d is running; stop it before changing its config", ErrState, id)
	}
	prev := n.configure
	n.configure = func(f *config.File) {
		if prev != nil {
			prev(f)
		}
		change(f)
	}
	return c.writeConfig(n)
}

// Restart starts node id again (it must have been stopped) and waits until it is ready. It first waits
// until the node's three ports can be bound again: a SIGKILLed node's sockets can outlive its process
// for a while (its io_uring ring is torn down by the kernel after the exit, and the listening socket
// with it), and a node started before that fails with "address already in use".
func (c *Cluster) Restart(ctx context.Context, id uint16) error {
	n, err := c.node(id)
	if err != nil {
		return err
	}
	if n.Running() {
		return fmt.Errorf("%w: node %d is running (pid %d)", ErrState, n.ID, n.PID())
	}
	wctx, cancel := context.WithTimeout(ctx, c.opts.ReadyTimeout)
	defer cancel()
	if c.opts.Hosts == nil {
		if err := n.waitPortsFree(wctx); err != nil {
			return err
		}
	}
	if err := n.start(); err != nil {
		return err
	}
	return c.waitReady(ctx, n)
}

// Close kills every node still running (SIGKILL to each process group), waits for them, and removes
// the directory if Start made it. It is safe to call more than once.
func (c *Cluster) Close() error {
	var errs []error
	c.closeOnce.Do(func() {
		if c.stopCtx != nil {
			c.stopCtx()
		}
		for _, n := range c.nodes {
			if !n.Running() {
				continue
			}
			if err := n.kill(); err != nil && !errors.Is(err, ErrState) {
				errs = append(errs, err)
			}
		}
		if c.tempDir {
			if err := os.RemoveAll(c.dir); err != nil {
				errs = append(errs, fmt.Errorf("localcluster: %w", err))
			}
		}
	})
	return errors.Join(errs...)
}
