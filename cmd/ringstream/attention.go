package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/ringstream/ringstream/engine/adminapi"
)

func newAttentionCommand() *cobra.Command {
	var f adminFlags
	cmd := clientCommand(&cobra.Command{
		Use:   "attention",
		Short: "List what waits for an operator or a node, as the active controller sees it",
		Long: "Read GET /v1/attention from a node's admin HTTP listener and print its entries: recoveries\n" +
			"waiting for copies to answer a seal, owners silent past their timeout, and the like, each with\n" +
			"why. Only the metadata primary's node runs the active controller; another node says which node\n" +
			"that is. --json prints the node's document as it is.",
		Args: exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			var a adminapi.Attention
			if err := f.get(cmd.Context(), "/v1/attention", &a); err != nil {
				return err
			}
			if f.asJSON {
				return writeJSON(cmd.OutOrStdout(), a)
			}
			return printAttention(cmd.OutOrStdout(), &a)
		},
	})
	f.register(cmd.Flags())
	return cmd
}

func printAttention(w io.Writer, a *adminapi.Attention) error {
	if !a.Active {
		if a.Primary != 0 {
			fmt.Fprintf(w, "node %d does not run the active controller: ask node %d (the metadata primary)\n", a.Node, a.Primary)
		} else {
			fmt.Fprintf(w, "node %d does not run the active controller, and knows no metadata primary now\n", a.Node)
		}
		return nil
	}
	if len(a.Entries) == 0 {
		fmt.Fprintf(w, "node %d (active controller): nothing needs attention\n", a.Node)
		return nil
	}
	fmt.Fprintf(w, "node %d (active controller): %d entries\n", a.Node, len(a.Entries))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "KIND\tSTREAM\tINC\tRECOVERY\tNODE\tANSWERS\tWHY\n")
	for _, e := range a.Entries {
		answers := "-"
		if e.Needed != 0 {
			answers = fmt.Sprintf("%d/%d", e.Answers, e.Needed)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\t%s\n", e.Kind, e.Stream, e.Incarnation, e.Recovery, e.Node, answers, e.Why)
	}
	return tw.Flush()
}
