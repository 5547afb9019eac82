package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/ringstream/ringstream/engine"
)

// newFormatCommand is `ringstream format --dir D --cluster C --node N --replica R (--new-cluster |
// --recover)`: the format step of a metadata replica's directory (engine.FormatMeta). One of the two
// modes is required, since choosing wrong loses data: --new-cluster for a member of a cluster being
// created (it starts fresh), --recover for a replica that replaces one whose disk was lost (it learns
// the group's state from a quorum before it acts).
func newFormatCommand() *cobra.Command {
	var f engine.MetaFormat
	var node, replica uint
	var newCluster bool
	cmd := &cobra.Command{
		Use:   "format",
		Short: "Format a metadata replica's directory (cluster, node and replica identity)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
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
			if err := engine.FormatMeta(f); err != nil {
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
	cmd.Flags().StringVar(&f.Dir, "dir", "", "the metadata replica's directory (data/meta)")
	cmd.Flags().Uint64Var(&f.Cluster, "cluster", 0, "cluster id")
	cmd.Flags().UintVar(&node, "node", 0, "this node's id")
	cmd.Flags().UintVar(&replica, "replica", 0, "this replica's member index in the metadata group")
	cmd.Flags().BoolVar(&newCluster, "new-cluster", false, "a member of a cluster being created")
	cmd.Flags().BoolVar(&f.Recover, "recover", false, "a replica replacing one whose disk was lost")
	return cmd
}
