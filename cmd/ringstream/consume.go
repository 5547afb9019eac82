package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/ringstream/ringstream/client"
	"github.com/ringstream/ringstream/wire"
)

func newConsumeCommand() *cobra.Command {
	var f clientFlags
	var from uint64
	var count uint64
	var follow bool
	var consumer string
	var wait time.Duration
	var last uint64
	var fromEnd bool
	var format, fromTime string
	cmd := clientCommand(&cobra.Command{
		Use:   "consume STREAM",
		Short: "Print a stream's confirmed records to stdout, one record a line",
		Long: "Print the stream's confirmed records from --from (or from --consumer's committed cursor) to\n" +
			"stdout, one a line (its value); with --json one object a line ({\"offset\":N,\"timestamp\":MS,\"key\":...,\n" +
			"\"value\":...,\"headers\":[...]}), with --format as a template says (" + formatTokens + "; no newline\n" +
			"is added: end the template with \\n). It stops at\n" +
			"the confirmed tail, or after --count records; --follow waits for more until interrupted. With\n" +
			"--consumer it commits that consumer's cursor after each batch of records printed. --last N starts N\n" +
			"records before the confirmed tail, --from-end at it (with --follow: only new records). A start\n" +
			"past the confirmed tail prints nothing and says so on stderr (exit 0: the records may come).\n" +
			"--from-time T (RFC 3339 or unix ms) starts at the first record its stream's owner appended at or\n" +
			"after T: the nodes' append time, not the timestamps the producers gave the records.",
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
			starts := 0
			for _, name := range []string{"from", "last", "from-end", "from-time"} {
				if cmd.Flags().Changed(name) {
					starts++
				}
			}
			if starts > 1 {
				return usageErr(fmt.Errorf("give one of --from, --last, --from-end and --from-time"))
			}
			if consumer != "" && (fromEnd || cmd.Flags().Changed("last")) {
				return usageErr(fmt.Errorf("--consumer starts at its cursor: give --from or --from-time, not --last or --from-end"))
			}
			var tmpl recordTemplate
			if cmd.Flags().Changed("format") {
				if f.asJSON {
					return usageErr(fmt.Errorf("give one of --format and --json"))
				}
				var err error
				if tmpl, err = parseTemplate(format); err != nil {
					return usageErr(err)
				}
			}
			var since time.Time
			if cmd.Flags().Changed("from-time") {
				var err error
				if since, err = parseFromTime(fromTime); err != nil {
					return usageErr(err)
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
				consumer: consumer, wait: wait, fromSet: cmd.Flags().Changed("from"), fromEnd: fromEnd,
				last: last, lastSet: cmd.Flags().Changed("last"), tmpl: tmpl, since: since,
				sinceSet: cmd.Flags().Changed("from-time")})
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
	cmd.Flags().Uint64Var(&last, "last", 0, "start this many records before the confirmed tail (print the last N)")
	cmd.Flags().BoolVar(&fromEnd, "from-end", false, "start at the confirmed tail (with --follow: print only new records)")
	cmd.Flags().StringVar(&format, "format", "", "print each record as this template says: "+formatTokens)
	cmd.Flags().StringVar(&fromTime, "from-time", "", "start at the first record appended at or after this time (RFC 3339 or unix ms; the nodes' append time)")
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
	fromEnd  bool
	last     uint64
	lastSet  bool
	tmpl     recordTemplate // nil: the value and a newline (or --json)
	since    time.Time
	sinceSet bool
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
	if o.sinceSet {
		opCtx, cancel := context.WithTimeout(ctx, f.timeout)
		off, err := c.OffsetForTime(opCtx, stream, o.since)
		cancel()
		if err != nil {
			return clientErr(err)
		}
		start = off
	}
	if o.fromEnd || o.lastSet {
		tail, err := confirmedTail(ctx, f, c, stream)
		if err != nil {
			return err
		}
		start = tail
		if o.lastSet {
			start = tail - min(o.last, tail)
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
	var line []byte
	for {
		opCtx, cancel := context.WithTimeout(ctx, f.timeout+o.wait)
		recs, err := cs.Poll(opCtx)
		cancel()
		if err != nil {
			return clientErr(err)
		}
		n := uint64(0)
		for recs.Next() && (o.count == 0 || printed < o.count) {
			switch {
			case f.asJSON:
				if err := enc.Encode(newRecordJSON(recs)); err != nil {
					return err
				}
			case o.tmpl != nil:
				line = o.tmpl.appendRecord(line[:0], recs)
				if _, err := out.Write(line); err != nil {
					return err
				}
			default:
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
		if printed == 0 && n == 0 && start > recs.ConfirmedTail {
			fmt.Fprintf(cmd.ErrOrStderr(), "offset %d is past the confirmed tail of %q (%d): no record there yet\n", start, stream,
				recs.ConfirmedTail)
		}
		if !o.follow && cs.Offset() >= recs.ConfirmedTail {
			return nil
		}
	}
}

// confirmedTail is the stream's confirmed tail, as its owner answers a fetch that waits for nothing.
func confirmedTail(ctx context.Context, f *clientFlags, c *client.Client, stream string) (uint64, error) {
	probe, err := c.Consumer(stream, 0, client.FetchOptions{RecordsMax: 1})
	if err != nil {
		return 0, clientErr(err)
	}
	opCtx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	recs, err := probe.Poll(opCtx)
	if err != nil {
		return 0, clientErr(err)
	}
	return recs.ConfirmedTail, nil
}
