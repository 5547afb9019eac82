package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/ringstream/ringstream/client"
	"github.com/ringstream/ringstream/wire"
)

// newCursorCommand is `ringstream cursor list|describe|reset|delete`: a stream's consumers and their
// committed cursors, as the stream's owner holds them. A cursor is the next offset its consumer will
// read; its lag is the stream's confirmed tail minus the cursor.
func newCursorCommand() *cobra.Command {
	cmd := clientCommand(&cobra.Command{
		Use:   "cursor",
		Short: "List, describe, reset and delete a stream's consumer cursors",
		Long: "A consumer's cursor is the next offset it will read, committed through the stream's owner (consume\n" +
			"--consumer NAME commits one as it prints). Its lag is the stream's confirmed tail minus the cursor.\n" +
			"reset moves a cursor forwards or backwards by a commit; delete forgets it once as many copies as\n" +
			"confirm a record hold the delete on disk. A consumer still running commits over a reset: stop it first.",
		Args: cobra.NoArgs,
	})
	cmd.AddCommand(newCursorListCommand(), newCursorDescribeCommand(), newCursorResetCommand(), newCursorDeleteCommand())
	return cmd
}

// cursorArgs checks STREAM CONSUMER: a name that breaks wire's rule exits 7 with the rule.
func cursorArgs(cmd *cobra.Command, args []string) error {
	if err := streamArgs("STREAM", "CONSUMER")(cmd, args); err != nil {
		return err
	}
	return invalidErr(wire.ValidateConsumerName(args[1]))
}

// cursorJSON is one consumer in --json output.
type cursorJSON struct {
	Consumer string `json:"consumer"`
	Cursor   uint64 `json:"cursor"`
	Lag      uint64 `json:"lag"`
}

// cursorListJSON is `cursor list --json`.
type cursorListJSON struct {
	Stream        string       `json:"stream"`
	ConfirmedTail uint64       `json:"confirmed_tail"`
	Head          uint64       `json:"head"`
	Consumers     []cursorJSON `json:"consumers"`
}

func toCursorListJSON(stream string, l client.CursorList) cursorListJSON {
	doc := cursorListJSON{Stream: stream, ConfirmedTail: l.ConfirmedTail, Head: l.Head, Consumers: []cursorJSON{}}
	for _, c := range l.Cursors {
		doc.Consumers = append(doc.Consumers, cursorJSON{Consumer: c.Consumer, Cursor: c.Offset, Lag: c.Lag})
	}
	return doc
}

// withClient dials the cluster for one command and runs f with a context bounded by --timeout.
func withClient(cmd *cobra.Command, f *clientFlags, run func(ctx context.Context, c *client.Client) error) error {
	ctx, cancel := context.WithTimeout(cmd.Context(), f.timeout)
	defer cancel()
	c, err := f.dial(ctx, cmd)
	if err != nil {
		return err
	}
	defer c.Close()
	return run(ctx, c)
}

func noCursor(stream, consumer string) error {
	return &exitError{code: exitNotFound, err: fmt.Errorf("consumer %q has no cursor on stream %q", consumer, stream)}
}

func newCursorListCommand() *cobra.Command {
	var f clientFlags
	cmd := clientCommand(&cobra.Command{
		Use:   "list STREAM",
		Short: "List a stream's consumers with their cursor and lag",
		Long: "Print every consumer of STREAM with a committed cursor, in name order, with its cursor and lag, and\n" +
			"the confirmed tail and retained head they are measured against. --json prints one document.",
		Args: streamArgs("STREAM"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withClient(cmd, &f, func(ctx context.Context, c *client.Client) error {
				l, err := c.ListCursors(ctx, args[0])
				if err != nil {
					return clientErr(err)
				}
				if f.asJSON {
					return writeJSON(cmd.OutOrStdout(), toCursorListJSON(args[0], l))
				}
				return printCursorList(cmd.OutOrStdout(), args[0], l)
			})
		},
	})
	f.register(cmd.Flags(), true)
	return cmd
}

func printCursorList(w io.Writer, stream string, l client.CursorList) error {
	fmt.Fprintf(w, "stream %q: confirmed tail %d, head %d, %s\n", stream, l.ConfirmedTail, l.Head, consumersText(len(l.Cursors)))
	if len(l.Cursors) == 0 {
		return nil
	}
	return printCursorTable(w, l.Cursors)
}

func printCursorTable(w io.Writer, cs []client.CursorInfo) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\nCONSUMER\tCURSOR\tLAG")
	for _, c := range cs {
		fmt.Fprintf(tw, "%s\t%d\t%d\n", c.Consumer, c.Offset, c.Lag)
	}
	return tw.Flush()
}

func consumersText(n int) string {
	switch n {
	case 0:
		return "no consumers"
	case 1:
		return "1 consumer"
	}
	return fmt.Sprintf("%d consumers", n)
}

// cursorDescribeJSON is `cursor describe --json`.
type cursorDescribeJSON struct {
	Stream        string `json:"stream"`
	Consumer      string `json:"consumer"`
	Cursor        uint64 `json:"cursor"`
	Lag           uint64 `json:"lag"`
	ConfirmedTail uint64 `json:"confirmed_tail"`
	Head          uint64 `json:"head"`
}

func newCursorDescribeCommand() *cobra.Command {
	var f clientFlags
	cmd := clientCommand(&cobra.Command{
		Use:   "describe STREAM CONSUMER",
		Short: "Show one consumer's cursor and lag",
		Long: "Print CONSUMER's committed cursor on STREAM, its lag, and the confirmed tail and retained head. A\n" +
			"consumer without a cursor exits 3. --json prints one document.",
		Args: cursorArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return withClient(cmd, &f, func(ctx context.Context, c *client.Client) error {
				info, l, found, err := c.DescribeCursor(ctx, args[0], args[1])
				if err != nil {
					return clientErr(err)
				}
				if !found {
					return noCursor(args[0], args[1])
				}
				if f.asJSON {
					return writeJSON(cmd.OutOrStdout(), cursorDescribeJSON{Stream: args[0], Consumer: args[1], Cursor: info.Offset,
						Lag: info.Lag, ConfirmedTail: l.ConfirmedTail, Head: l.Head})
				}
				fmt.Fprintf(cmd.OutOrStdout(), "consumer %q on stream %q: cursor %d, lag %d (confirmed tail %d, head %d)\n",
					args[1], args[0], info.Offset, info.Lag, l.ConfirmedTail, l.Head)
				if info.Offset < l.Head {
					fmt.Fprintf(cmd.OutOrStdout(), "the cursor is below the retained head: the consumer resumes at %d\n", l.Head)
				}
				return nil
			})
		},
	})
	f.register(cmd.Flags(), true)
	return cmd
}

// cursorResetJSON is `cursor reset --json`.
type cursorResetJSON struct {
	Stream   string  `json:"stream"`
	Consumer string  `json:"consumer"`
	Before   *uint64 `json:"before"` // null: the consumer had no cursor
	Cursor   uint64  `json:"cursor"`
	Lag      uint64  `json:"lag"`
}

func newCursorResetCommand() *cobra.Command {
	var f clientFlags
	var toOffset uint64
	var shiftBy int64
	var toEarliest, toLatest bool
	cmd := clientCommand(&cobra.Command{
		Use:   "reset STREAM CONSUMER (--to-offset N | --to-earliest | --to-latest | --shift-by N)",
		Short: "Move a consumer's cursor forwards or backwards",
		Long: "Commit CONSUMER's cursor on STREAM at a new offset: --to-offset N (lowered to the confirmed tail),\n" +
			"--to-earliest (the retained head), --to-latest (the confirmed tail: nothing left to read) or --shift-by\n" +
			"N (N may be negative; clamped to the head and the tail). A consumer without a cursor gets one. The\n" +
			"reset applies at once; a consumer still running commits over it, so stop it first.",
		Args: cursorArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var reset client.CursorReset
			n := 0
			if cmd.Flags().Changed("to-offset") {
				reset.ToOffset, n = &toOffset, n+1
			}
			if cmd.Flags().Changed("shift-by") {
				reset.ShiftBy, n = &shiftBy, n+1
			}
			if toEarliest {
				reset.ToEarliest, n = true, n+1
			}
			if toLatest {
				reset.ToLatest, n = true, n+1
			}
			if n != 1 {
				return usageErr(fmt.Errorf("give exactly one of --to-offset, --to-earliest, --to-latest and --shift-by"))
			}
			return withClient(cmd, &f, func(ctx context.Context, c *client.Client) error {
				res, err := c.ResetCursor(ctx, args[0], args[1], reset)
				if err != nil {
					return clientErr(err)
				}
				lag := res.ConfirmedTail - min(res.After, res.ConfirmedTail)
				if f.asJSON {
					doc := cursorResetJSON{Stream: args[0], Consumer: args[1], Cursor: res.After, Lag: lag}
					if res.Found {
						doc.Before = &res.Before
					}
					return writeJSON(cmd.OutOrStdout(), doc)
				}
				before := "none"
				if res.Found {
					before = fmt.Sprint(res.Before)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "reset consumer %q on stream %q: cursor %s -> %d, lag %d\n", args[1], args[0],
					before, res.After, lag)
				return nil
			})
		},
	})
	f.register(cmd.Flags(), true)
	cmd.Flags().Uint64Var(&toOffset, "to-offset", 0, "the offset to move the cursor to (lowered to the confirmed tail)")
	cmd.Flags().BoolVar(&toEarliest, "to-earliest", false, "move the cursor to the retained head")
	cmd.Flags().BoolVar(&toLatest, "to-latest", false, "move the cursor to the confirmed tail")
	cmd.Flags().Int64Var(&shiftBy, "shift-by", 0, "move the cursor by N records (negative: back), within the head and the tail")
	return cmd
}

// cursorDeleteJSON is `cursor delete --json`.
type cursorDeleteJSON struct {
	Stream   string `json:"stream"`
	Consumer string `json:"consumer"`
	Cursor   uint64 `json:"cursor"` // the offset the deleted cursor had
}

func newCursorDeleteCommand() *cobra.Command {
	var f clientFlags
	cmd := clientCommand(&cobra.Command{
		Use:   "delete STREAM CONSUMER",
		Short: "Forget a consumer's cursor",
		Long: "Delete CONSUMER's cursor on STREAM. The command returns once as many copies as confirm a record\n" +
			"hold the delete on disk, so a failover does not bring the cursor back; the consumer's next commit\n" +
			"makes a new one. A consumer without a cursor exits 3.",
		Args: cursorArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return withClient(cmd, &f, func(ctx context.Context, c *client.Client) error {
				off, found, err := c.DeleteCursor(ctx, args[0], args[1])
				if err != nil {
					return clientErr(err)
				}
				if !found {
					return noCursor(args[0], args[1])
				}
				if f.asJSON {
					return writeJSON(cmd.OutOrStdout(), cursorDeleteJSON{Stream: args[0], Consumer: args[1], Cursor: off})
				}
				fmt.Fprintf(cmd.OutOrStdout(), "deleted consumer %q of stream %q (its cursor was at %d)\n", args[1], args[0], off)
				return nil
			})
		},
	})
	f.register(cmd.Flags(), true)
	return cmd
}
