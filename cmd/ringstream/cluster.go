package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/ringstream/ringstream/internal/localcluster"
)

// clusterStopTimeout bounds the SIGTERM of each node when `cluster up` stops; a node still running
// after it is killed.
const clusterStopTimeout = 10 * time.Second

// newClusterCommand is `ringstream cluster`, the local cluster of real processes.
func newClusterCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "Run a local cluster of real ringstream processes on 127.0.0.1",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newClusterUpCommand())
	return cmd
}

// newClusterUpCommand is `ringstream cluster up --nodes 3 [--dir D]`.
func newClusterUpCommand() *cobra.Command {
	var opts localcluster.Options
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Start a local cluster (one `ringstream serve` process per node) and run it until Ctrl-C",
		Long: "Start a local cluster on 127.0.0.1: one `ringstream serve` process per node, each with its " +
			"config, data and log in DIR/nodeN. The ports are free ones the kernel picked; the command prints " +
			"them with the cluster secret. Ctrl-C (or SIGTERM) stops every node with SIGTERM, then kills any " +
			"left. The directory is kept. DIR must not hold a cluster already.\n\n" +
			"Exit status: 0 after a clean stop, 1 if the cluster could not start or a node did not stop cleanly.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runClusterUp(ctx, cmd.OutOrStdout(), opts)
		},
	}
	cmd.Flags().IntVar(&opts.Nodes, "nodes", 3, "node count (at least 3: the metadata group has 3 replicas)")
	cmd.Flags().IntVar(&opts.Shards, "shards", 1, "shards per node")
	cmd.Flags().StringVar(&opts.Dir, "dir", "", "the cluster's directory (default: a new one under $TMPDIR, kept)")
	cmd.Flags().StringVar(&opts.Binary, "binary", "", "the ringstream binary the nodes run (default: this one)")
	return cmd
}

// runClusterUp starts the cluster, prints how to reach it, and stops it when ctx ends.
func runClusterUp(ctx context.Context, out io.Writer, opts localcluster.Options) error {
	if opts.Dir == "" {
		d, err := os.MkdirTemp("", "ringstream-cluster-")
		if err != nil {
			return err
		}
		opts.Dir = d
	} else if entries, err := os.ReadDir(opts.Dir); err == nil && len(entries) > 0 {
		return fmt.Errorf("cluster up: %s is not empty; give a new or empty directory", opts.Dir)
	}
	// The cluster outlives ctx's end until the nodes are stopped below, so it gets its own context.
	c, err := localcluster.Start(context.WithoutCancel(ctx), opts)
	if err != nil {
		return err
	}
	defer c.Close()
	printCluster(out, c)
	<-ctx.Done()
	fmt.Fprintln(out, "\nstopping the cluster (SIGTERM to every node)")
	var errs []error
	for _, n := range c.Nodes() {
		stopCtx, cancel := context.WithTimeout(context.Background(), clusterStopTimeout)
		if err := c.Terminate(stopCtx, n.ID); err != nil {
			errs = append(errs, err)
		}
		cancel()
	}
	if err := errors.Join(errs...); err != nil {
		return &exitError{code: 1, err: err}
	}
	fmt.Fprintf(out, "stopped; data and logs kept in %s\n", c.Dir())
	return nil
}

// printCluster writes the nodes' addresses and how to use them.
func printCluster(out io.Writer, c *localcluster.Cluster) {
	fmt.Fprintf(out, "ringstream local cluster: %d nodes, cluster id %d, directory %s\n\n", len(c.Nodes()),
		c.ClusterID(), c.Dir())
	fmt.Fprintf(out, "%-5s %-7s %-21s %-21s %-21s %s\n", "node", "pid", "client", "admin", "peer", "log")
	for _, n := range c.Nodes() {
		fmt.Fprintf(out, "%-5d %-7d %-21s %-21s %-21s %s\n", n.ID, n.PID(), n.ClientAddr, n.AdminAddr, n.PeerAddr,
			n.LogPath())
	}
	first := c.Nodes()[0]
	admins := make([]string, 0, len(c.Nodes()))
	for _, n := range c.Nodes() {
		admins = append(admins, n.AdminAddr)
	}
	fmt.Fprintf(out, "\nIn another terminal:\n")
	fmt.Fprintf(out, "  export RINGSTREAM_ADDR=%s\n", strings.Join(c.ClientAddrs(), ","))
	fmt.Fprintf(out, "  export RINGSTREAM_ADMIN=%s\n", first.AdminAddr)
	fmt.Fprintf(out, "  export RINGSTREAM_SECRET=%s\n", c.Secret())
	fmt.Fprintf(out, "  ringstream stream create demo\n")
	fmt.Fprintf(out, "  printf 'hello\\nworld\\n' | ringstream produce demo\n")
	fmt.Fprintf(out, "  ringstream consume demo\n")
	fmt.Fprintf(out, "  ringstream status\n")
	fmt.Fprintf(out, "  ringstream bench --cluster $RINGSTREAM_ADDR --admin %s\n", strings.Join(admins, ","))
	fmt.Fprintf(out, "\nCtrl-C stops the cluster.\n")
}
