package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/ringstream/ringstream/engine/adminapi"
)

// attentionDoc is `attention --json`: the active controller's document (its fields at the top level,
// as GET /v1/attention serves them) with what the nodes' statuses add: the nodes down, the streams
// under-replicated or without an owner, and, when no controller answered, why.
type attentionDoc struct {
	adminapi.Attention
	From            string         `json:"from_admin,omitempty"` // the admin address that answered
	NodesDown       []healthNode   `json:"nodes_down"`
	UnderReplicated []healthStream `json:"under_replicated"`
	WithoutOwner    []healthStream `json:"without_owner"`
	NoController    string         `json:"no_controller,omitempty"`
}

func newAttentionCommand() *cobra.Command {
	var f adminFlags
	cmd := clientCommand(&cobra.Command{
		Use:   "attention",
		Short: "List what waits for an operator or a node: the controller's list, nodes down, streams under-replicated",
		Long: "Read GET /v1/attention from the active controller (the metadata primary's node, found among the\n" +
			"admin list: --admin, or the profile's) and print its entries: recoveries waiting for copies to\n" +
			"answer a seal, owners silent past their timeout, and the like, each with why. Beside them it lists\n" +
			"the nodes down and the streams under-replicated or without an owner (from every node's\n" +
			"/v1/status, as `cluster health` does). When no controller runs it says so and why (no metadata\n" +
			"primary: which replicas answered). \"nothing needs attention\" means all of these are empty.",
		Args: exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			list, err := f.addrs(cmd)
			if err != nil {
				return err
			}
			sts := f.statuses(cmd.Context(), list)
			h := buildHealth(sts)
			if len(h.statusesByNodeID) == 0 {
				return &exitError{code: exitUnavailable, err: fmt.Errorf("no admin listener answered: %s", unreachableText(h))}
			}
			doc, err := readAttention(cmd, &f, list, sts, h)
			if err != nil {
				return err
			}
			if f.asJSON {
				return writeJSON(cmd.OutOrStdout(), doc)
			}
			return printAttention(cmd.OutOrStdout(), doc)
		},
	})
	f.register(cmd.Flags())
	return cmd
}

// readAttention reads the active controller's list from the primary's admin address and adds the health's
// findings.
func readAttention(cmd *cobra.Command, f *adminFlags, list []string, sts []nodeStatus, h *healthDoc) (*attentionDoc, error) {
	doc := &attentionDoc{NodesDown: []healthNode{}, UnderReplicated: h.UnderReplicated, WithoutOwner: h.WithoutOwner}
	for _, n := range h.Nodes {
		if n.State == "down" {
			doc.NodesDown = append(doc.NodesDown, n)
		}
	}
	addr := adminAddrOf(sts, h.Metadata.Primary)
	if addr == "" {
		var err error
		if addr, err = f.getFirst(cmd.Context(), list, "/v1/attention", &doc.Attention); err != nil {
			return nil, err
		}
	} else if err := f.get(cmd.Context(), addr, "/v1/attention", &doc.Attention); err != nil {
		return nil, err
	}
	doc.From = addr
	if !doc.Active {
		switch {
		case h.Metadata.Primary == 0:
			doc.NoController = "no controller runs: " + h.Metadata.Why
		case doc.Primary != 0:
			doc.NoController = fmt.Sprintf("node %d does not run the active controller; node %d does, and its admin "+
				"address is not in the admin list", doc.Node, doc.Primary)
		default:
			doc.NoController = fmt.Sprintf("node %d does not run the active controller, and knows no metadata primary now", doc.Node)
		}
	}
	return doc, nil
}

func printAttention(w io.Writer, a *attentionDoc) error {
	if a.NoController != "" {
		fmt.Fprintln(w, a.NoController)
	}
	empty := len(a.Entries) == 0 && len(a.NodesDown) == 0 && len(a.UnderReplicated) == 0 && len(a.WithoutOwner) == 0
	if a.Active && empty {
		fmt.Fprintf(w, "node %d (active controller): nothing needs attention\n", a.Node)
		return nil
	}
	if a.Active {
		fmt.Fprintf(w, "node %d (active controller): %d controller entries\n", a.Node, len(a.Entries))
	}
	for _, n := range a.NodesDown {
		fmt.Fprintf(w, "node %d is down (client %s)\n", n.Node, dash(n.Client))
	}
	printStreamProblems(w, "under-replicated", a.UnderReplicated)
	printStreamProblems(w, "without an owner", a.WithoutOwner)
	if len(a.Entries) == 0 {
		return nil
	}
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
