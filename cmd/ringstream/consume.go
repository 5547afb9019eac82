package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/signal"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/ringstream/ringstream/client"
	"github.com/ringstream/ringstream/wire"
)

// recordJSON is one record in `consume --json` output (one JSON object a line).
type recordJSON struct {
	Offset uint64  `json:"offset"`
	Value  *string `json:"value,omitempty"`        // the record, when it is UTF-8
	Base64 []byte  `json:"value_base64,omitempty"` // the record, when it is not
}

func newConsumeCommand() *cobra.Command {
	var f clientFlags
	var from uint64
	var count uint64
	var follow bool
	var consumer string
	var wait time.Duration
	cmd := clientCommand(&cobra.Command{
		Use:   "consume STREAM",
		Short: "Print a stream's confirmed records to stdout, one record a line",
		Long: "Print the stream's confirmed records from --from (or from --consumer's committed cursor) to\n" +
			"stdout, one a line; with --json one object a line ({\"offset\":N,\"value\":\"...\"}). It stops at\n" +
			"the confirmed tail, or after --count records; --follow waits for more until interrupted. With\n" +
			"--consumer it commits that consumer's cursor after each batch of records printed.",
		Args: streamArgs("STREAM"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if wait < 0 {
				return usageErr(fmt.Errorf("--wait %v: must not be negative", wait))
			}
			if consumer != "" {
				if err := wire.ValidateConsumerName(consumer); err != nil {
					return invalidErr(fmt.Errorf("--consumer: %w", err))
				}
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			c, err := f.dial(ctx, cmd)
			if err != nil {
				return err
			}
			defer c.Close()
			err = runConsume(ctx, cmd, &f, c, args[0], consumeOpts{from: from, count: count, follow: follow,
				consumer: consumer, wait: wait, fromSet: cmd.Flags().Changed("from")})
			if err != nil && errors.Is(err, context.Canceled) && ctx.Err() != nil {
				return nil // interrupted: a clean end for --follow
			}
			return err
		},
	})
	f.register(cmd.Flags(), true)
	cmd.Flags().Uint64Var(&from, "from", 0, "the first offset to print (default 0, or the consumer's cursor)")
	cmd.Flags().Uint64Var(&count, "count", 0, "stop after this many records (0: no limit)")
	cmd.Flags().BoolVar(&follow, "follow", false, "wait for new records at the tail until interrupted")
	cmd.Flags().StringVar(&consumer, "consumer", "", "a consumer name: start at its cursor and commit it as records are printed")
	cmd.Flags().DurationVar(&wait, "wait", time.Second, "with --follow: how long one fetch waits at the tail (the long poll)")
	return cmd
}

type consumeOpts struct {
	from     uint64
	fromSet  bool
	count    uint64
	follow   bool
	consumer string
	wait     time.Duration
}

func runConsume(ctx context.Context, cmd *cobra.Command, f *clientFlags, c *client.Client, stream string, o consumeOpts) error {
	start := o.from
	if o.consumer != "" && !o.fromSet {
		opCtx, cancel := context.WithTimeout(ctx, f.timeout)
		off, found, err := c.Cursor(opCtx, stream, o.consumer)
		cancel()
		if err != nil {
			return clientErr(err)
		}
		if found {
			start = off
		}
	}
	wait := time.Duration(0) // without --follow, stop at the tail at once
	if o.follow {
		wait = o.wait
	}
	cs, err := c.Consumer(stream, start, client.FetchOptions{Wait: wait})
	if err != nil {
		return clientErr(err)
	}
	out := cmd.OutOrStdout()
	enc := json.NewEncoder(out)
	var printed uint64
	for {
		opCtx, cancel := context.WithTimeout(ctx, f.timeout+o.wait)
		recs, err := cs.Poll(opCtx)
		cancel()
		if err != nil {
			return clientErr(err)
		}
		n := uint64(0)
		for recs.Next() && (o.count == 0 || printed < o.count) {
			if f.asJSON {
				r := recordJSON{Offset: recs.Offset()}
				if v := recs.Value(); utf8.Valid(v) {
					s := string(v)
					r.Value = &s
				} else {
					r.Base64 = v
				}
				if err := enc.Encode(r); err != nil {
					return err
				}
			} else {
				if _, err := fmt.Fprintf(out, "%s\n", recs.Value()); err != nil {
					return err
				}
			}
			printed++
			n++
			if o.count != 0 && printed == o.count {
				cs.Seek(recs.Offset() + 1)
			}
		}
		if err := recs.Err(); err != nil {
			return clientErr(err)
		}
		if n > 0 && o.consumer != "" {
			opCtx, cancel := context.WithTimeout(ctx, f.timeout)
			err := c.CommitCursor(opCtx, stream, o.consumer, cs.Offset())
			cancel()
			if err != nil {
				return clientErr(err)
			}
		}
		if o.count != 0 && printed >= o.count {
			return nil
		}
		if !o.follow && cs.Offset() >= recs.ConfirmedTail {
			return nil
		}
	}
}
