package stream

import (
	"errors"
	"fmt"
)

// Sentinel errors. Each has one meaning.
var (
	// ErrConfig: a configuration value or an assignment breaks a rule; the message names it.
	ErrConfig = errors.New("stream: invalid config")
	// ErrBatchOrder: the retained batches fed on open do not follow each other (damaged log).
	ErrBatchOrder = errors.New("stream: retained batches out of order")
)

// BatchDecoder reads the encoded batch at the start of b: its header and its whole size in bytes. It
// is segment's batch format (the host passes an adapter over segment.DecodeBatch), so this package
// reads batches without importing storage. It must never panic: a buffer that is not a whole valid
// batch returns an error (a short buffer included).
type BatchDecoder func(b []byte) (BatchHeader, int, error)

// Config sets up one copy. Self, Stream, Incarnation, Decode and BatchHeaderBytes are required; the
// other zero values take the defaults below.
type Config struct {
	Self        uint16 // this node
	Stream      uint64 // the stream id (its group id); never 0
	Incarnation uint32 // the stream's incarnation; at least 1

	// Decode reads one encoded batch; BatchHeaderBytes is its header's size (segment.BatchHeaderSize),
	// so an encoded batch takes BatchHeaderBytes + payload bytes.
	Decode           BatchDecoder
	BatchHeaderBytes int
	// DecodeHeader, optional, reads a batch whose every byte a checksum already covered on its way
	// here: a prepare's batches (the frame's body checksum) and a read's data (the host checks every
	// batch of a read before ReadDone, and reports a read that fails as the log's failure). It
	// checks the header and skips hashing the payload again (segment.DecodeBatchHeader). Nil means
	// Decode, for a host that does not check its reads.
	DecodeHeader BatchDecoder

	// BatchBytesMax bounds one produced batch's payload (default 1 MiB). A bigger produce is refused
	// with CodeBatchTooLarge; a replicated batch above it is refused by a follower.
	BatchBytesMax int
	// PendingBytesMax bounds the bytes the owner has appended that its log has not yet reported
	// durable (default 8 MiB); produces past it are refused with CodeOverloaded. The host sets it at
	// most to its log's own bound (segment's Config.PendingBytesMax, also 8 MiB by default), so the
	// log never refuses an append the copy made.
	PendingBytesMax int
	// ProducesMax bounds the produces waiting for the confirmed tail (default 4096).
	ProducesMax int
	// InflightBytesMax bounds the bytes sent to one follower and not yet acknowledged (default 8 MiB);
	// InflightPreparesMax the prepares (default 256). A follower past either is served later from
	// the log, never buffered for.
	InflightBytesMax    int
	InflightPreparesMax int
	// ReadBytes is the size of one catch-up read from the log (default 2 MiB).
	ReadBytes int
	// ResendTicks: a follower that acknowledged nothing new for this long while prepares were due is
	// probed again from its acknowledged tail (default 50).
	ResendTicks uint64
	// TickMs converts a fetch's WaitMs into ticks (default 10); FetchWaitTicksMax caps the wait
	// (default 3000). FetchesMax bounds the fetches held or reading at once (default 64).
	TickMs            uint32
	FetchWaitTicksMax uint64
	FetchesMax        int
	// CursorSyncTicks: cursor events queued on the owner are committed (one fsync for all of them)
	// at most this many ticks after the first (default 10).
	CursorSyncTicks uint64
	// ProducersMax bounds the producer table (default 4096); the producer with the oldest last batch
	// is dropped first.
	ProducersMax int
}

const (
	defaultBatchBytesMax       = 1 << 20
	defaultPendingBytesMax     = 8 << 20
	defaultProducesMax         = 4096
	defaultInflightBytesMax    = 8 << 20
	defaultInflightPreparesMax = 256
	defaultReadBytes           = 2 << 20
	defaultResendTicks         = 50
	defaultTickMs              = 10
	defaultFetchWaitTicksMax   = 3000
	defaultFetchesMax          = 64
	defaultCursorSyncTicks     = 10
	defaultProducersMax        = 4096
)

func (c Config) withDefaults() Config {
	set := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	set(&c.BatchBytesMax, defaultBatchBytesMax)
	set(&c.PendingBytesMax, defaultPendingBytesMax)
	set(&c.ProducesMax, defaultProducesMax)
	set(&c.InflightBytesMax, defaultInflightBytesMax)
	set(&c.InflightPreparesMax, defaultInflightPreparesMax)
	set(&c.ReadBytes, defaultReadBytes)
	set(&c.FetchesMax, defaultFetchesMax)
	set(&c.ProducersMax, defaultProducersMax)
	if c.ResendTicks == 0 {
		c.ResendTicks = defaultResendTicks
	}
	if c.TickMs == 0 {
		c.TickMs = defaultTickMs
	}
	if c.FetchWaitTicksMax == 0 {
		c.FetchWaitTicksMax = defaultFetchWaitTicksMax
	}
	if c.CursorSyncTicks == 0 {
		c.CursorSyncTicks = defaultCursorSyncTicks
	}
	return c
}

// Validate checks the options and the rules between them (after defaults).
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.Self == 0:
		return fmt.Errorf("%w: Self is 0", ErrConfig)
	case c.Stream == 0:
		return fmt.Errorf("%w: Stream is 0", ErrConfig)
	case c.Incarnation == 0:
		return fmt.Errorf("%w: Incarnation is 0", ErrConfig)
	case c.Decode == nil:
		return fmt.Errorf("%w: no Decode", ErrConfig)
	case c.BatchHeaderBytes <= 0:
		return fmt.Errorf("%w: BatchHeaderBytes %d", ErrConfig, c.BatchHeaderBytes)
	case c.BatchBytesMax < 0 || c.PendingBytesMax < 0 || c.InflightBytesMax < 0 || c.ReadBytes < 0:
		return fmt.Errorf("%w: a byte limit is negative", ErrConfig)
	case c.ProducesMax < 0 || c.InflightPreparesMax < 0 || c.FetchesMax < 0 || c.ProducersMax < 0:
		return fmt.Errorf("%w: a count limit is negative", ErrConfig)
	case c.PendingBytesMax < c.BatchHeaderBytes+c.BatchBytesMax:
		return fmt.Errorf("%w: PendingBytesMax %d below one batch of BatchBytesMax %d", ErrConfig, c.PendingBytesMax, c.BatchBytesMax)
	case c.InflightBytesMax < c.BatchHeaderBytes+c.BatchBytesMax:
		return fmt.Errorf("%w: InflightBytesMax %d below one batch of BatchBytesMax %d", ErrConfig, c.InflightBytesMax, c.BatchBytesMax)
	case c.ReadBytes < c.BatchHeaderBytes+c.BatchBytesMax:
		return fmt.Errorf("%w: ReadBytes %d below one batch of BatchBytesMax %d", ErrConfig, c.ReadBytes, c.BatchBytesMax)
	}
	return nil
}

// decodeReceived decodes a batch of a prepare or a read, whose payload was checked (Config.DecodeHeader).
func (c *Copy) decodeReceived(b []byte) (BatchHeader, int, error) {
	if c.cfg.DecodeHeader != nil {
		return c.cfg.DecodeHeader(b)
	}
	return c.cfg.Decode(b)
}
