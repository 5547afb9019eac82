package localcluster

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"github.com/ringstream/ringstream/engine/config"
)

// Kept reports whether dir holds a cluster this package laid out (node1/node.toml exists).
func Kept(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "node1", "node.toml"))
	return err == nil
}

// Reopen starts again the kept cluster in opts.Dir: it reads every DIR/nodeN/node.toml (nodes 1, 2, …
// until one is missing), keeps each node's ids, addresses, secret and data, and starts every node
// without formatting (the metadata replicas recover from their own disks). Options other than Dir,
// Binary, ReadyTimeout and Logger are taken from the files. The directory stays after Close. On error
// nothing is left running; when ctx ends, the cluster is closed.
func Reopen(ctx context.Context, opts Options) (*Cluster, error) {
	if opts.Dir == "" || !Kept(opts.Dir) {
		return nil, fmt.Errorf("%w: %q holds no kept cluster (no node1/node.toml)", ErrStart, opts.Dir)
	}
	c, err := newCluster(Options{Binary: opts.Binary, Dir: opts.Dir, Secret: "unused", ReadyTimeout: opts.ReadyTimeout,
		Logger: opts.Logger, Nodes: 3})
	if err != nil {
		return nil, err
	}
	if err := c.readKept(); err != nil {
		return nil, err
	}
	if err := c.startKept(ctx); err != nil {
		c.Close()
		return nil, err
	}
	c.stopCtx = context.AfterFunc(ctx, func() { c.Close() })
	return c, nil
}

// readKept loads every node's file and fills in the cluster from them.
func (c *Cluster) readKept() error {
	for id := 1; ; id++ {
		dir := filepath.Join(c.dir, "node"+strconv.Itoa(id))
		path := filepath.Join(dir, "node.toml")
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			break
		}
		cfg, err := config.Load(path)
		if err != nil {
			return fmt.Errorf("%w: node %d: %w", ErrStart, id, err)
		}
		f := cfg.File
		if int(f.Node.ID) != id {
			return fmt.Errorf("%w: %s: node.id %d, want %d (its directory's number)", ErrStart, path, f.Node.ID, id)
		}
		if id == 1 {
			c.opts.ClusterID, c.secret, c.opts.Shards = f.Cluster.ID, string(cfg.Secret), f.Shards.Count
		} else if f.Cluster.ID != c.opts.ClusterID {
			return fmt.Errorf("%w: %s: cluster.id %d, node 1 has %d", ErrStart, path, f.Cluster.ID, c.opts.ClusterID)
		}
		c.nodes = append(c.nodes, &Node{ID: f.Node.ID, Dir: dir, PeerAddr: f.Node.Listen, ClientAddr: f.Client.Listen,
			AdminAddr: f.Admin.Listen, binary: c.opts.Binary})
	}
	if len(c.nodes) < 3 {
		return fmt.Errorf("%w: %s holds %d node(s), a cluster has at least 3", ErrStart, c.dir, len(c.nodes))
	}
	c.opts.Nodes = len(c.nodes)
	return nil
}

// startKept starts every kept node once its ports are free, and waits until each is ready.
func (c *Cluster) startKept(ctx context.Context) error {
	for _, n := range c.nodes {
		wctx, cancel := context.WithTimeout(ctx, c.opts.ReadyTimeout)
		err := n.waitPortsFree(wctx)
		cancel()
		if err != nil {
			return err
		}
		if err := n.start(); err != nil {
			return err
		}
	}
	for _, n := range c.nodes {
		if err := c.waitReady(ctx, n); err != nil {
			return err
		}
	}
	c.log.Info("localcluster: kept cluster ready", "dir", c.dir, "nodes", len(c.nodes))
	return nil
}

// Exited is closed when the node's current process exits (nil if it never started); ExitError then
// says how it ended.
func (n *Node) Exited() <-chan struct{} {
	p := n.current()
	if p == nil {
		return nil
	}
	return p.done
}

// ExitError is the current process's exit (nil for status 0), valid once Exited is closed.
func (n *Node) ExitError() error {
	p := n.current()
	if p == nil {
		return nil
	}
	select {
	case <-p.done:
		return p.waitErr
	default:
		return nil
	}
}
