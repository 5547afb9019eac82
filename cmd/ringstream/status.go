package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/ringstream/ringstream/engine/adminapi"
)

func newStatusCommand() *cobra.Command {
	var f adminFlags
	cmd := clientCommand(&cobra.Command{
		Use:   "status",
		Short: "Show a node's view: metadata, controller, links, streams, copies, heartbeats",
		Long: "Read GET /v1/status from a node's admin HTTP listener (the first of the admin list that answers:\n" +
			"--admin, or the profile's) and print it: the node, its metadata\n" +
			"replica and controller, its links, the streams with their owners and epochs (from its metadata\n" +
			"replica), its own copies with their tails and confirmed tails, and the heartbeat states.\n" +
			"--json prints the node's document as it is.",
		Args: exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			list, err := f.addrs(cmd)
			if err != nil {
				return err
			}
			var st adminapi.Status
			if _, err := f.getFirst(cmd.Context(), list, "/v1/status", &st); err != nil {
				return err
			}
			if f.asJSON {
				return writeJSON(cmd.OutOrStdout(), st)
			}
			return printStatus(cmd.OutOrStdout(), &st)
		},
	})
	f.register(cmd.Flags())
	return cmd
}

func printStatus(w io.Writer, st *adminapi.Status) error {
	fmt.Fprintf(w, "node %d of cluster %d: %s, %d shard(s), registered %v\n", st.Node, st.Cluster, st.State, st.Shards,
		st.Registered)
	fmt.Fprintf(w, "  client %s  peer %s  admin %s\n", st.ClientAddr, st.PeerAddr, st.AdminAddr)
	if m := st.Meta; m != nil {
		role := "backup"
		if m.Primary {
			role = "primary"
		}
		fmt.Fprintf(w, "metadata: %s, view %d, op %d, commit %d, primary node %d, normal %v", role, m.View, m.Op, m.Commit,
			m.PrimaryID, m.Normal)
		if m.Recovering {
			fmt.Fprint(w, ", recovering")
		}
		if m.PersistError != "" {
			fmt.Fprintf(w, ", PERSIST FAILED: %s", m.PersistError)
		}
		fmt.Fprintln(w)
	} else {
		fmt.Fprintln(w, "metadata: no replica on this node")
	}
	if c := st.Controller; c != nil {
		fmt.Fprintf(w, "controller: active %v, nodes lost %d, proposals %d (%d refused), seals %d, attention %d\n",
			c.Active, c.NodesLost, c.Proposals, c.ProposalsRefused, c.Seals, c.Attention)
	}
	var links []string
	for _, l := range st.Links {
		state := "down"
		if l.Up {
			state = "up"
		}
		links = append(links, fmt.Sprintf("shard %d->node %d %s", l.Shard, l.Peer, state))
	}
	fmt.Fprintf(w, "links: %s\n", strings.Join(links, ", "))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "\nSTREAM\tNAME\tINC\tCOPIES\tPOLICY\tEPOCH\tOWNER\tFOLLOWERS\tRECOVERY\n")
	for _, s := range st.Streams {
		fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%s\t%d\t%d\t%v\t%s\n", s.ID, s.Name, s.Incarnation, s.Copies, s.Policy, s.Epoch,
			s.Owner, s.Followers, dash(s.Recovery))
	}
	fmt.Fprintf(tw, "\nCOPY\tINC\tSHARD\tROLE\tEPOCH\tAPPENDED\tDURABLE\tCONFIRMED\tOPEN\n")
	for _, c := range st.Copies {
		fmt.Fprintf(tw, "%d\t%d\t%d\t%s\t%d\t%d\t%d\t%d\t%v\n", c.Stream, c.Incarnation, c.Shard, c.Role, c.Epoch, c.Appended,
			c.Durable, c.Confirmed, c.Open)
	}
	if len(st.Heartbeats.Nodes) > 0 {
		fmt.Fprintf(tw, "\nNODE\tCLIENT\tSTATUS\tLINK\n")
		for _, n := range st.Heartbeats.Nodes {
			link := "down"
			if n.LinkUp {
				link = "up"
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", n.Node, n.Address, n.Status, link)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nheartbeats sent %d, failed %d\n", st.Heartbeats.Sent, st.Heartbeats.Failures)
	for _, fl := range st.Failures {
		fmt.Fprintf(w, "FAILED copy of stream %d (incarnation %d) in %s: %s\n", fl.Stream, fl.Incarnation, fl.Dir, fl.Error)
	}
	return nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
