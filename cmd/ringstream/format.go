package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/ringstream/ringstream/engine/config"
	"github.com/ringstream/ringstream/engine/metahost"
)

// newFormatCommand is `ringstream format --dir D --cluster C --node N --replica R (--new-cluster |
// --recover)`: the format step of a metadata replica's directory (metahost.Format). One of the two
// modes is required, since choosing wrong loses data: --new-cluster for a member of a cluster being
// created (it starts fresh), --recover for a replica that replaces one whose disk was lost (it learns
// the group's state from a quorum before it acts).
func newFormatCommand() *cobra.Command {
	var f metahost.FormatConfig
	var node, replica uint
	var newCluster bool
	var configPath string
	cmd := &cobra.Command{
		Use:   "format",
		Short: "Format a metadata replica's directory (cluster, node and replica identity)",
		Long: "Format a metadata replica's directory. With --config node.toml the directory (data_dir/meta), the\n" +
			"cluster id, the node id and the replica index (the node's position in metadata.replicas) come from\n" +
			"the node's config; a flag given as well must agree with it, and a node the config does not list in\n" +
			"metadata.replicas is refused. Without --config, --dir, --cluster, --node and --replica say it all.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if configPath != "" {
				if err := formatFromConfig(cmd, configPath, &f, &node, &replica); err != nil {
					return err
				}
			}
			switch {
			case f.Dir == "":
				return usageErr(errors.New("format: --dir is required"))
			case newCluster == f.Recover:
				return usageErr(errors.New("format: say --new-cluster (a member of a cluster being created) or --recover " +
					"(a replica replacing one whose disk was lost), exactly one"))
			case node == 0 || node > 0xffff:
				return usageErr(fmt.Errorf("format: --node %d: want 1 to 65535", node))
			case replica > 0xff:
				return usageErr(fmt.Errorf("format: --replica %d: want a member index", replica))
			}
			f.Node, f.Replica = uint16(node), uint8(replica)
			if err := metahost.Format(f); err != nil {
				return err
			}
			mode := "new cluster member"
			if f.Recover {
				mode = "replacement, starts in recovery"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "formatted %s: cluster %d node %d replica %d (%s)\n", f.Dir, f.Cluster,
				f.Node, f.Replica, mode)
			return nil
		},
	}
	cmd.Flags().StringVar(&configPath, "config", "", "the node's config file: the directory and every id come from it")
	cmd.Flags().StringVar(&f.Dir, "dir", "", "the metadata replica's directory (data/meta)")
	cmd.Flags().Uint64Var(&f.Cluster, "cluster", 0, "cluster id")
	cmd.Flags().UintVar(&node, "node", 0, "this node's id")
	cmd.Flags().UintVar(&replica, "replica", 0, "this replica's member index in the metadata group")
	cmd.Flags().BoolVar(&newCluster, "new-cluster", false, "a member of a cluster being created")
	cmd.Flags().BoolVar(&f.Recover, "recover", false, "a replica replacing one whose disk was lost")
	return cmd
}

// formatFromConfig fills the format's directory and ids from the node's config, refusing a flag that
// disagrees with it and a node the config gives no metadata replica.
func formatFromConfig(cmd *cobra.Command, path string, f *metahost.FormatConfig, node, replica *uint) error {
	cfg, err := config.Load(path)
	if err != nil {
		return usageErr(fmt.Errorf("format --config: %w", err))
	}
	file := cfg.File
	idx := slices.Index(file.Metadata.Replicas, file.Node.ID)
	if idx < 0 {
		return usageErr(fmt.Errorf("format --config %s: node %d holds no metadata replica (metadata.replicas = %v): "+
			"only the replicas' nodes are formatted", path, file.Node.ID, file.Metadata.Replicas))
	}
	want := map[string]string{
		"dir":     filepath.Join(file.Node.DataDir, "meta"),
		"cluster": strconv.FormatUint(file.Cluster.ID, 10),
		"node":    strconv.Itoa(int(file.Node.ID)),
		"replica": strconv.Itoa(idx),
	}
	for _, name := range []string{"dir", "cluster", "node", "replica"} {
		fl := cmd.Flags().Lookup(name)
		if fl.Changed && fl.Value.String() != want[name] {
			return usageErr(fmt.Errorf("format: --%s %s disagrees with %s, which gives %s (node.id %d, "+
				"metadata.replicas = %v, node.data_dir %s)", name, fl.Value, path, want[name], file.Node.ID,
				file.Metadata.Replicas, file.Node.DataDir))
		}
	}
	f.Dir, f.Cluster = want["dir"], file.Cluster.ID
	*node, *replica = uint(file.Node.ID), uint(idx)
	return nil
}
