package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/ringstream/ringstream/engine/adminapi"
	"github.com/ringstream/ringstream/engine/kafka"
	"github.com/ringstream/ringstream/localcluster"
)

// clusterStopTimeout bounds the SIGTERM of each node when `cluster up` stops; a node still running
// after it is killed.
const clusterStopTimeout = 10 * time.Second

// newClusterCommand is `ringstream cluster`, the local cluster of real processes.
func newClusterCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "Run a local cluster of real ringstream processes on 127.0.0.1, and check a cluster's health",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newClusterUpCommand(), newClusterHealthCommand())
	return cmd
}

// newClusterUpCommand is `ringstream cluster up --nodes 3 [--dir D]`.
func newClusterUpCommand() *cobra.Command {
	var opts localcluster.Options
	var profileName string
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Start a local cluster (one `ringstream serve` process per node) and run it until Ctrl-C",
		Long: "Start a local cluster on 127.0.0.1: one `ringstream serve` process per node, each with its " +
			"config, data and log in DIR/nodeN. The ports are free ones the kernel picked; the command prints " +
			"them. It writes the cluster secret to DIR/secret and a profile (--profile-name, default \"local\") " +
			"with the cluster id, the client and admin addresses and that secret file, and makes it the current " +
			"profile: every other command then reaches this cluster with no flag and no exported variable.\n\n" +
			"While it runs it watches the nodes: a node that exits is reported at once, with the end of its " +
			"log. Ctrl-C (or SIGTERM) stops every node with SIGTERM, then kills any left. The directory is " +
			"kept; `cluster up --dir DIR` on it starts that cluster again (same ids, ports, secret and data). " +
			"A DIR that is not empty and holds no cluster is refused.\n\n" +
			"Exit status: 0 after a clean stop, 1 if the cluster could not start, a node exited while it ran, or " +
			"a node did not stop cleanly.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := validateProfileName(profileName); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runClusterUp(ctx, cmd.OutOrStdout(), opts, profileName)
		},
	}
	cmd.Flags().IntVar(&opts.Nodes, "nodes", 3, "node count (at least 3: the metadata group has 3 replicas)")
	cmd.Flags().IntVar(&opts.Shards, "shards", 1, "shards per node")
	cmd.Flags().StringVar(&opts.Dir, "dir", "", "the cluster's directory: new, empty, or a kept cluster to start again (default: a new one under $TMPDIR, kept)")
	cmd.Flags().StringVar(&opts.Binary, "binary", "", "the ringstream binary the nodes run (default: this one)")
	cmd.Flags().StringVar(&profileName, profileFlagName, defaultLocalProfile, "the profile to write for this cluster (made current)")
	return cmd
}

// runClusterUp starts the cluster (or the kept one in opts.Dir), writes its profile, reports nodes that
// exit, and stops the cluster when ctx ends.
func runClusterUp(ctx context.Context, out io.Writer, opts localcluster.Options, profileName string) error {
	c, err := startOrReopen(ctx, &opts)
	if err != nil {
		return err
	}
	defer c.Close()
	profPath, err := writeClusterProfile(c, profileName)
	if err != nil {
		return err
	}
	if err := waitRegistered(ctx, c); err != nil {
		return err
	}
	printCluster(out, c, profileName, profPath)
	exited := watchNodes(ctx, c)
	died := 0
	for running := true; running; {
		select {
		case n := <-exited:
			died++
			fmt.Fprintf(out, "\nnode %d exited (%v) while the cluster ran; the end of %s:\n%s\n", n.ID, exitText(n.ExitError()),
				n.LogPath(), n.LogTail())
		case <-ctx.Done():
			running = false
		}
	}
	fmt.Fprintln(out, "\nstopping the cluster (SIGTERM to every node)")
	var errs []error
	for _, n := range c.Nodes() {
		if !n.Running() {
			continue
		}
		stopCtx, cancel := context.WithTimeout(context.Background(), clusterStopTimeout)
		if err := c.Terminate(stopCtx, n.ID); err != nil {
			errs = append(errs, err)
		}
		cancel()
	}
	if died > 0 {
		errs = append(errs, fmt.Errorf("%d node(s) exited while the cluster ran (see above)", died))
	}
	fmt.Fprintf(out, "stopped; data and logs kept in %s (`ringstream cluster up --dir %s` starts it again)\n", c.Dir(), c.Dir())
	if err := errors.Join(errs...); err != nil {
		return &exitError{code: 1, err: err}
	}
	return nil
}

// registerTimeout bounds the wait for the metadata group to commit every node's registration.
const registerTimeout = 30 * time.Second

// waitRegistered waits until every node says the metadata group committed its registration: before
// that a stream cannot be placed on it, and the cluster is not ready for the commands `cluster up`
// prints. It polls each node's /v1/status (another process: there is no event to wait on).
func waitRegistered(ctx context.Context, c *localcluster.Cluster) error {
	f := adminFlags{timeout: 2 * time.Second}
	deadline := time.Now().Add(registerTimeout)
	for _, n := range c.Nodes() {
		for {
			var st adminapi.Status
			err := f.get(ctx, n.AdminAddr, "/v1/status", &st)
			if err == nil && st.Registered {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("cluster up: node %d not registered with the metadata group after %v (%v); the end of %s:\n%s",
					n.ID, registerTimeout, err, n.LogPath(), n.LogTail())
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	return nil
}

// startOrReopen starts a new cluster, or the kept one in opts.Dir.
func startOrReopen(ctx context.Context, opts *localcluster.Options) (*localcluster.Cluster, error) {
	// The cluster outlives ctx's end until the nodes are stopped, so it gets its own context.
	bg := context.WithoutCancel(ctx)
	if opts.Dir == "" {
		d, err := os.MkdirTemp("", "ringstream-cluster-")
		if err != nil {
			return nil, err
		}
		opts.Dir = d
	} else if localcluster.Kept(opts.Dir) {
		return localcluster.Reopen(bg, *opts)
	} else if entries, err := os.ReadDir(opts.Dir); err == nil && len(entries) > 0 {
		return nil, fmt.Errorf("cluster up: %s is not empty and holds no cluster (no node1/node.toml); give a new, "+
			"empty or kept cluster directory", opts.Dir)
	}
	return localcluster.Start(bg, *opts)
}

// writeClusterProfile writes DIR/secret, DIR/kafka-password (the Kafka listener's SASL PLAIN
// password, derived from the secret) and the profile of the cluster, and makes it current.
func writeClusterProfile(c *localcluster.Cluster, name string) (string, error) {
	secretPath := filepath.Join(c.Dir(), "secret")
	if err := os.WriteFile(secretPath, []byte(c.Secret()+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("cluster up: %w", err)
	}
	if err := os.WriteFile(filepath.Join(c.Dir(), "kafka-password"), []byte(kafka.Password([]byte(c.Secret()))+"\n"),
		0o600); err != nil {
		return "", fmt.Errorf("cluster up: %w", err)
	}
	root, err := profileRoot()
	if err != nil {
		return "", err
	}
	p := profile{Cluster: c.ClusterID(), Addrs: c.ClientAddrs(), SecretFile: secretPath, Dir: c.Dir()}
	for _, n := range c.Nodes() {
		p.Admin = append(p.Admin, n.AdminAddr)
	}
	return writeProfile(root, name, p, true)
}

// watchNodes sends each node that exits before ctx ends.
func watchNodes(ctx context.Context, c *localcluster.Cluster) <-chan *localcluster.Node {
	ch := make(chan *localcluster.Node, len(c.Nodes()))
	for _, n := range c.Nodes() {
		done := n.Exited()
		go func() {
			select {
			case <-done:
				ch <- n
			case <-ctx.Done():
			}
		}()
	}
	return ch
}

func exitText(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

// printCluster writes the nodes' addresses and how to use them.
func printCluster(out io.Writer, c *localcluster.Cluster, profileName, profPath string) {
	fmt.Fprintf(out, "ringstream local cluster: %d nodes, cluster id %d, directory %s\n\n", len(c.Nodes()),
		c.ClusterID(), c.Dir())
	fmt.Fprintf(out, "%-5s %-7s %-21s %-21s %-21s %-21s %s\n", "node", "pid", "client", "admin", "peer", "kafka", "log")
	for _, n := range c.Nodes() {
		fmt.Fprintf(out, "%-5d %-7d %-21s %-21s %-21s %-21s %s\n", n.ID, n.PID(), n.ClientAddr, n.AdminAddr, n.PeerAddr,
			n.KafkaAddr, n.LogPath())
	}
	fmt.Fprintf(out, "\nprofile %q (now current): %s; secret in %s\n", profileName, profPath,
		filepath.Join(c.Dir(), "secret"))
	fmt.Fprintf(out, "\nIn another terminal (every command reads the profile):\n")
	fmt.Fprintf(out, "  ringstream status\n")
	fmt.Fprintf(out, "  ringstream stream create demo\n")
	fmt.Fprintf(out, "  printf 'hello\\nworld\\n' | ringstream produce demo\n")
	fmt.Fprintf(out, "  ringstream consume demo --last 2\n")
	fmt.Fprintf(out, "  ringstream stream describe demo\n")
	fmt.Fprintf(out, "  ringstream cluster health\n")
	fmt.Fprintf(out, "  ringstream bench --cluster %s --admin %s\n", strings.Join(c.ClientAddrs(), ","),
		strings.Join(clusterAdmins(c), ","))
	// SASL PLAIN with the Kafka password, read from its file by the shell.
	kcat := fmt.Sprintf("kcat -b %s -X security.protocol=SASL_PLAINTEXT -X sasl.mechanisms=PLAIN "+
		"-X sasl.username=ringstream -X sasl.password=$(cat %s)", strings.Join(c.KafkaAddrs(), ","),
		filepath.Join(c.Dir(), "kafka-password"))
	fmt.Fprintf(out, "\nKafka clients (SASL PLAIN, any user name, the password in %s; docs/kafka.md):\n",
		filepath.Join(c.Dir(), "kafka-password"))
	fmt.Fprintf(out, "  printf 'k1:hello\\nk2:world\\n' | %s -P -t events -K:\n", kcat)
	fmt.Fprintf(out, "  %s -C -t events -e -f '%%k: %%s (offset %%o)\\n'\n", kcat)
	fmt.Fprintf(out, "  %s -L\n", kcat)
	fmt.Fprintf(out, "\nCtrl-C stops the cluster.\n")
}

func clusterAdmins(c *localcluster.Cluster) []string {
	out := make([]string, 0, len(c.Nodes()))
	for _, n := range c.Nodes() {
		out = append(out, n.AdminAddr)
	}
	return out
}
