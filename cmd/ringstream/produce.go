package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/ringstream/ringstream/client"
)

// produceResult is what `produce` prints at the end (--json: as JSON).
type produceResult struct {
	Stream     string `json:"stream"`
	Records    uint64 `json:"records"`
	Batches    int    `json:"batches"`
	Duplicates int    `json:"duplicate_batches"`
	FirstOff   uint64 `json:"first_offset"`
	NextOff    uint64 `json:"next_offset"`
	ProducerID uint64 `json:"producer_id"`
	// Complete: every line of stdin was confirmed. Otherwise Stopped says why the command stopped, and
	// Records and NextOff cover what was confirmed before it (NextOff-1 is the last confirmed offset).
	Complete bool   `json:"complete"`
	Stopped  string `json:"stopped,omitempty"`
	Read     uint64 `json:"lines_read"`
}

func newProduceCommand() *cobra.Command {
	var f clientFlags
	var codec string
	var linger time.Duration
	var batchBytes, inFlight int
	var keySep, recordFormat string
	var headerFlags []string
	cmd := clientCommand(&cobra.Command{
		Use:   "produce STREAM",
		Short: "Append stdin's lines to a stream, one record a line, and wait for their confirm",
		Long: "Read stdin until its end and append each line (without its newline) as one record, in batches\n" +
			"sent with a producer id and sequence, so a batch retried across a failover is never appended twice.\n" +
			"It exits once every record is confirmed and prints how many there were and their offsets. --timeout\n" +
			"bounds each wait for the cluster (a batch's confirm), not the time spent reading stdin. A produce\n" +
			"that stops early (an interrupt, a timeout, a refusal) says how many records were confirmed and the\n" +
			"last confirmed offset, and exits non-zero (1 for an interrupt, else the error's status).\n" +
			"With --key-separator SEP each line is split at its first SEP into the record's key and value; a\n" +
			"line without SEP stops the produce (exit 1), naming the line: a line meant to be keyed that is not\n" +
			"is an input error, not a record without a key. --header KEY=VALUE (repeatable) gives every record\n" +
			"those headers. Records are written in record format 2 (key, value, headers, timestamp: the time\n" +
			"each line is read); --record-format values writes format 1, values only, for readers that predate it.",
		Args: streamArgs("STREAM"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := client.ParseCodec(codec)
			if err != nil {
				return usageErr(err)
			}
			if inFlight < 1 || inFlight > 4 {
				return usageErr(fmt.Errorf("--in-flight %d: want 1..4", inFlight))
			}
			if batchBytes < 16 || batchBytes > 1<<20 {
				return usageErr(fmt.Errorf("--batch-bytes %d: want 16..1048576", batchBytes))
			}
			headers, err := parseHeaderFlags(headerFlags)
			if err != nil {
				return usageErr(err)
			}
			if cmd.Flags().Changed("key-separator") && keySep == "" {
				return usageErr(fmt.Errorf("--key-separator: an empty separator"))
			}
			var format client.Format
			switch recordFormat {
			case "records":
				format = client.FormatRecords
			case "values":
				format = client.FormatValues
				if keySep != "" || len(headers) > 0 {
					return usageErr(fmt.Errorf("--record-format values: records without keys or headers; drop --key-separator and --header"))
				}
			default:
				return usageErr(fmt.Errorf("--record-format %q: want records or values", recordFormat))
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return runProduce(ctx, cmd, &f, args[0], client.ProducerConfig{Stream: args[0], Codec: c, Linger: linger,
				BatchBytes: batchBytes, InFlight: inFlight, Format: format}, produceLines{keySep: []byte(keySep), headers: headers})
		},
	})
	f.register(cmd.Flags(), true)
	cmd.Flags().StringVar(&codec, "codec", "none", "batch compression: none, zstd or s2")
	cmd.Flags().DurationVar(&linger, "linger", 5*time.Millisecond, "with --in-flight above 1, how long a batch waits for more records while others are in flight (a record with nothing in flight goes at once)")
	cmd.Flags().IntVar(&inFlight, "in-flight", 1, "batches waiting for their confirm at once, 1..4")
	cmd.Flags().IntVar(&batchBytes, "batch-bytes", 1<<20, "send a batch once its records reach this many bytes (also the largest record)")
	cmd.Flags().StringVar(&keySep, "key-separator", "", "split each line at its first SEP into the record's key and value (a line without it is an error)")
	cmd.Flags().StringArrayVar(&headerFlags, "header", nil, "KEY=VALUE: a header every record carries (repeatable)")
	cmd.Flags().StringVar(&recordFormat, "record-format", "records", "records (format 2: key, value, headers, timestamp) or values (format 1, for older readers)")
	return cmd
}

// produceLines says how produce makes a record of a line.
type produceLines struct {
	keySep  []byte // split each line at its first keySep into key and value (nil: the line is the value)
	headers []client.Header
}

func runProduce(ctx context.Context, cmd *cobra.Command, f *clientFlags, stream string, pc client.ProducerConfig,
	pl produceLines) error {
	dialCtx, cancel := context.WithTimeout(ctx, f.timeout)
	c, err := f.dial(dialCtx, cmd)
	cancel()
	if err != nil {
		return err
	}
	defer c.Close()
	res := produceResult{Stream: stream}
	var mu sync.Mutex
	pc.OnConfirm = func(cf client.Confirmed) {
		mu.Lock()
		defer mu.Unlock()
		if res.Batches == 0 {
			res.FirstOff = cf.BaseOffset
		}
		res.Batches++
		res.Records += uint64(cf.Count)
		res.NextOff = cf.BaseOffset + uint64(cf.Count)
		if cf.Duplicate {
			res.Duplicates++
		}
	}
	p, err := c.Producer(pc)
	if err != nil {
		return clientErr(err)
	}
	res.ProducerID = p.ID()
	stdin := cmd.InOrStdin()
	if closer, ok := stdin.(io.Closer); ok {
		// An interrupt ends a read of stdin that waits (a terminal, a pipe that stays open).
		stopRead := context.AfterFunc(ctx, func() { _ = closer.Close() })
		defer stopRead()
	}
	in := bufio.NewReaderSize(stdin, 64<<10)
	var line []byte
	for ctx.Err() == nil {
		line, err = readLine(in, line[:0], pc.BatchBytes)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil && ctx.Err() != nil {
			break // the interrupt closed stdin
		}
		if err != nil {
			return stoppedEarly(cmd, f, p, &mu, &res, ctx, clientErr(fmt.Errorf("produce: read stdin: %w", err)))
		}
		rec := client.Record{Value: line, Headers: pl.headers}
		if len(pl.keySep) > 0 {
			k, v, ok := bytes.Cut(line, pl.keySep)
			if !ok {
				return stoppedEarly(cmd, f, p, &mu, &res, ctx, fmt.Errorf("produce: line %d has no key separator %q (--key-separator)",
					res.Read+1, pl.keySep))
			}
			rec.Key, rec.Value = k, v
		}
		opCtx, cancel := context.WithTimeout(ctx, f.timeout)
		err = p.AppendRecord(opCtx, rec)
		cancel()
		if err != nil {
			return stoppedEarly(cmd, f, p, &mu, &res, ctx, clientErr(err))
		}
		mu.Lock()
		res.Read++
		mu.Unlock()
	}
	if err := ctx.Err(); err != nil {
		return stoppedEarly(cmd, f, p, &mu, &res, ctx, err)
	}
	closeCtx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	if err := p.Close(closeCtx); err != nil {
		return stoppedEarly(cmd, f, p, &mu, &res, ctx, clientErr(err))
	}
	mu.Lock()
	defer mu.Unlock()
	res.Complete = true
	if f.asJSON {
		return writeJSON(cmd.OutOrStdout(), res)
	}
	if res.Records == 0 {
		fmt.Fprintf(cmd.OutOrStdout(), "produced no records to %q (stdin was empty)\n", stream)
		return nil
	}
	fmt.Fprintf(cmd.OutOrStdout(), "produced %d records to %q at offsets %d..%d (%d batch(es), all confirmed)\n",
		res.Records, stream, res.FirstOff, res.NextOff-1, res.Batches)
	return nil
}

// produceCloseGrace bounds the wait for the confirms of batches in flight when a produce stops early.
const produceCloseGrace = 2 * time.Second

// stoppedEarly ends a produce that could not finish: it gives the batches in flight a short grace to
// be confirmed, then reports what was confirmed (stdout: the result; stderr: the line an operator
// reads) and returns cause with a non-zero status (1 for an interrupt).
func stoppedEarly(cmd *cobra.Command, f *clientFlags, p *client.Producer, mu *sync.Mutex, res *produceResult,
	ctx context.Context, cause error) error {
	graceCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), produceCloseGrace)
	_ = p.Close(graceCtx) // its own failure adds nothing to cause
	cancel()
	mu.Lock()
	defer mu.Unlock()
	interrupted := ctx.Err() != nil
	why := cause.Error()
	if interrupted {
		why = "interrupted"
	}
	res.Stopped = why
	confirmed := "no record confirmed"
	if res.Records > 0 {
		confirmed = fmt.Sprintf("%d records confirmed at offsets %d..%d, the last confirmed offset %d", res.Records,
			res.FirstOff, res.NextOff-1, res.NextOff-1)
	}
	msg := fmt.Sprintf("produce to %q stopped early (%s): %s; %d lines read, %d not confirmed", res.Stream, why, confirmed,
		res.Read, res.Read-min(res.Read, res.Records))
	if f.asJSON {
		_ = writeJSON(cmd.OutOrStdout(), res)
	}
	code := exitCode(cause)
	if interrupted {
		code = exitFailure
	}
	return &exitError{code: code, err: fmt.Errorf("%s: %w", msg, cause)}
}

// readLine reads one line into dst without its "\n" (or "\r\n"); io.EOF once nothing is left. A line
// longer than limit is an error naming the limit.
func readLine(r *bufio.Reader, dst []byte, limit int) ([]byte, error) {
	for {
		chunk, err := r.ReadSlice('\n')
		dst = append(dst, chunk...)
		if len(dst) > limit+2 {
			return nil, fmt.Errorf("%w: a line of more than %d bytes (the largest record; see --batch-bytes)",
				client.ErrRecordTooLarge, limit)
		}
		switch {
		case err == nil:
			dst = dst[:len(dst)-1]
			if n := len(dst); n > 0 && dst[n-1] == '\r' {
				dst = dst[:n-1]
			}
			return dst, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(dst) > 0:
			return dst, nil // a last line without a newline
		default:
			return nil, err
		}
	}
}
