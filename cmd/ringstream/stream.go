package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/ringstream/ringstream/client"
	"github.com/ringstream/ringstream/wire"
)

// newStreamCommand is `ringstream stream create|list|delete|lookup`.
func newStreamCommand() *cobra.Command {
	cmd := clientCommand(&cobra.Command{
		Use:   "stream",
		Short: "Create, list, delete, look up and describe streams",
		Args:  cobra.NoArgs,
	})
	cmd.AddCommand(newStreamCreateCommand(), newStreamListCommand(), newStreamDeleteCommand(), newStreamLookupCommand(),
		newStreamDescribeCommand())
	return cmd
}

// streamJSON is one stream in --json output.
type streamJSON struct {
	Name        string `json:"name"`
	ID          uint64 `json:"id"`
	Incarnation uint32 `json:"incarnation"`
	Copies      uint8  `json:"copies"`
	Policy      string `json:"policy"`
}

func toStreamJSON(s client.StreamInfo) streamJSON {
	return streamJSON{Name: s.Name, ID: s.Stream, Incarnation: s.Incarnation, Copies: s.Copies, Policy: s.Policy.String()}
}

// parsePolicy reads majority_durable, local_durable or count_durable(N).
func parsePolicy(s string) (client.Policy, error) {
	switch s {
	case "majority_durable", "majority", "":
		return client.Policy{Kind: wire.PolicyMajority}, nil
	case "local_durable", "all":
		return client.Policy{Kind: wire.PolicyAll}, nil
	}
	if inner, ok := strings.CutPrefix(s, "count_durable("); ok {
		if n, ok := strings.CutSuffix(inner, ")"); ok {
			v, err := strconv.ParseUint(n, 10, 8)
			if err == nil && v > 0 {
				return client.Policy{Kind: wire.PolicyCount, Count: uint8(v)}, nil
			}
		}
	}
	return client.Policy{}, fmt.Errorf("--policy %q: want majority_durable, local_durable or count_durable(N) with N >= 1", s)
}

func newStreamCreateCommand() *cobra.Command {
	var f clientFlags
	var copies uint8
	var policy string
	cmd := clientCommand(&cobra.Command{
		Use:   "create NAME...",
		Short: "Create streams with E copies and a confirm policy",
		Long: "Create a stream kept as --copies copies on different nodes. A record is confirmed once the\n" +
			"policy's number of copies hold it on disk: majority_durable (the default), local_durable (every\n" +
			"copy) or count_durable(N). Prints the stream's id and incarnation.\n\n" +
			"More than one NAME creates them all with the same options in batched requests (200\n" +
			"names a request, a hundred a metadata op), one line per name; a name refused (taken, say) does\n" +
			"not stop the others, and the exit status is that of the first refused name, 0 when none was.\n\n" +
			"NAME: " + wire.StreamNameRule + ".\n" +
			"--copies: " + wire.CopiesRule + ".\n" +
			"A name or copy count that breaks its rule exits 7, before or after the cluster is asked.",
		Args: streamNamesArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := parsePolicy(policy)
			if err != nil {
				return usageErr(err)
			}
			if err := wire.ValidateCopies(copies, 0); err != nil {
				return invalidErr(fmt.Errorf("--copies: %w", err))
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), f.timeout)
			defer cancel()
			c, err := f.dial(ctx, cmd)
			if err != nil {
				return err
			}
			defer c.Close()
			opts := client.StreamOptions{Copies: copies, Policy: p}
			if len(args) == 1 {
				info, err := c.CreateStream(ctx, args[0], opts)
				if err != nil {
					return clientErr(err)
				}
				if f.asJSON {
					return writeJSON(cmd.OutOrStdout(), toStreamJSON(info))
				}
				printCreated(cmd.OutOrStdout(), info)
				return nil
			}
			results, err := c.CreateStreams(ctx, args, opts)
			if err != nil {
				return clientErr(err)
			}
			return printResults(cmd, f.asJSON, results, printCreated)
		},
	})
	f.register(cmd.Flags(), true)
	cmd.Flags().Uint8Var(&copies, "copies", 3, "E: copies of the stream, each on another node")
	cmd.Flags().StringVar(&policy, "policy", "majority_durable", "confirm policy: majority_durable, local_durable or count_durable(N)")
	return cmd
}

func newStreamListCommand() *cobra.Command {
	var f clientFlags
	cmd := clientCommand(&cobra.Command{
		Use:   "list",
		Short: "List every stream of the cluster",
		Args:  exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), f.timeout)
			defer cancel()
			c, err := f.dial(ctx, cmd)
			if err != nil {
				return err
			}
			defer c.Close()
			all, err := c.ListStreams(ctx)
			if err != nil {
				return clientErr(err)
			}
			if f.asJSON {
				out := make([]streamJSON, len(all))
				for i, s := range all {
					out[i] = toStreamJSON(s)
				}
				return writeJSON(cmd.OutOrStdout(), out)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tNAME\tINCARNATION\tCOPIES\tPOLICY")
			for _, s := range all {
				fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%s\n", s.Stream, s.Name, s.Incarnation, s.Copies, s.Policy)
			}
			return tw.Flush()
		},
	})
	f.register(cmd.Flags(), true)
	return cmd
}

func newStreamDeleteCommand() *cobra.Command {
	var f clientFlags
	cmd := clientCommand(&cobra.Command{
		Use:   "delete NAME...",
		Short: "Delete streams with their records and cursors",
		Long: "Delete a stream with its records and cursors. More than one NAME deletes them all in batched\n" +
			"requests, one line per name; an unknown name does not stop the others, and the exit status is\n" +
			"that of the first refused name (4 for an unknown one), 0 when none was.",
		Args: streamNamesArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), f.timeout)
			defer cancel()
			c, err := f.dial(ctx, cmd)
			if err != nil {
				return err
			}
			defer c.Close()
			if len(args) == 1 {
				if err := c.DeleteStream(ctx, args[0]); err != nil {
					return clientErr(err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "deleted stream %q\n", args[0])
				return nil
			}
			results, err := c.DeleteStreams(ctx, args)
			if err != nil {
				return clientErr(err)
			}
			return printResults(cmd, false, results, func(w io.Writer, info client.StreamInfo) {
				fmt.Fprintf(w, "deleted stream %q\n", info.Name)
			})
		},
	})
	f.register(cmd.Flags(), false)
	return cmd
}

// printCreated prints one created stream as `stream create` does.
func printCreated(w io.Writer, info client.StreamInfo) {
	fmt.Fprintf(w, "created stream %q: id %d, incarnation %d, %d copies, %s\n", info.Name,
		info.Stream, info.Incarnation, info.Copies, info.Policy)
}

// printResults prints a batched create's or delete's results, one line per name (a refused name on
// stderr), or as a JSON array of the streams that took effect, and returns the exit error of the first
// refused name.
func printResults(cmd *cobra.Command, asJSON bool, results []client.StreamResult, took func(io.Writer, client.StreamInfo)) error {
	var first error
	var out []streamJSON
	for _, r := range results {
		if r.Err != nil {
			fmt.Fprintf(cmd.ErrOrStderr(), "%s: %v\n", r.Info.Name, r.Err)
			if first == nil {
				first = clientErr(r.Err)
			}
			continue
		}
		if asJSON {
			out = append(out, toStreamJSON(r.Info))
			continue
		}
		took(cmd.OutOrStdout(), r.Info)
	}
	if asJSON {
		if err := writeJSON(cmd.OutOrStdout(), out); err != nil {
			return err
		}
	}
	return first
}

// lookupJSON is `stream lookup --json`'s output.
type lookupJSON struct {
	Name        string `json:"name"`
	ID          uint64 `json:"id"`
	Incarnation uint32 `json:"incarnation"`
	Epoch       uint32 `json:"epoch"`
	Owner       uint16 `json:"owner"`
	OwnerAddr   string `json:"owner_addr"`
}

func newStreamLookupCommand() *cobra.Command {
	var f clientFlags
	cmd := clientCommand(&cobra.Command{
		Use:   "lookup NAME",
		Short: "Show which node owns a stream now, at which epoch",
		Args:  streamArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), f.timeout)
			defer cancel()
			c, err := f.dial(ctx, cmd)
			if err != nil {
				return err
			}
			defer c.Close()
			r, err := c.Lookup(ctx, args[0])
			if err != nil {
				return clientErr(err)
			}
			if f.asJSON {
				return writeJSON(cmd.OutOrStdout(), lookupJSON{Name: r.Name, ID: r.Stream, Incarnation: r.Incarnation,
					Epoch: r.Epoch, Owner: r.Owner, OwnerAddr: r.OwnerAddr})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "stream %q: id %d, incarnation %d, epoch %d, owner node %d at %s\n", r.Name,
				r.Stream, r.Incarnation, r.Epoch, r.Owner, r.OwnerAddr)
			return nil
		},
	})
	f.register(cmd.Flags(), true)
	return cmd
}
