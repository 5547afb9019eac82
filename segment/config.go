package segment

import (
	"fmt"
	"log/slog"
	"time"
)

// Config sets up the logs of one stream copy. Zero values take the defaults below.
type Config struct {
	// SegmentBytes is the size at which the active segment rolls (default 64 MiB). A batch never
	// spans two segments, so a segment may pass it by one batch.
	SegmentBytes int64
	// IndexIntervalBytes is the spacing of sparse index entries (default 4 KiB).
	IndexIntervalBytes int64
	// PendingBytesMax bounds the bytes queued for the next group commit (default 8 MiB); Append
	// returns ErrBackpressure past it.
	PendingBytesMax int
	// ReadsMax bounds concurrent asynchronous reads per log (default 64).
	ReadsMax int
	// DigestChunkBytes is the read size of digest computation and verify mode (default 1 MiB).
	DigestChunkBytes int
	// CursorSyncBytes: once this many cursor-event bytes are queued, the cursor log commits by
	// itself instead of waiting for the caller's SyncCursors (default 256 KiB).
	CursorSyncBytes int
	// PrewriteBytes: the record log writes zeros this far ahead of the active segment's data,
	// through the ring, so group commits overwrite blocks already allocated and written (default
	// 1 MiB, or SegmentBytes if smaller; -1 turns it off; otherwise 4 KiB..SegmentBytes). The
	// cursor log never prewrites: its commits are rare. See BENCHMARKS.md, "segment benchmarks".
	PrewriteBytes int
	// RecycleSegments: the record log keeps up to this many retired segments (from retention)
	// and renames one to the next segment's name on a roll, so commits overwrite written blocks
	// (default 2; -1 turns it off). See BENCHMARKS.md, "segment benchmarks".
	RecycleSegments int
	// Logger receives recovery warnings. Nil means slog.Default().
	Logger *slog.Logger
	// CommitObserver, when set, hears every group commit that succeeded, on the goroutine that
	// dispatches the log's completions: the log, and the time from queueing its writes to the last
	// completion (each file's writev and linked fdatasync, and the directory fsync of a group that
	// created a segment file). It must not block or drive the ring; segment allocates nothing for it.
	CommitObserver func(log LogKind, d time.Duration)
}

const (
	defaultSegmentBytes       = 64 << 20
	defaultIndexIntervalBytes = 4 << 10
	defaultPendingBytesMax    = 8 << 20
	defaultReadsMax           = 64
	defaultDigestChunkBytes   = 1 << 20
	defaultCursorSyncBytes    = 256 << 10
	defaultPrewriteBytes      = 1 << 20
	defaultRecycleSegments    = 2
)

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	if c.SegmentBytes == 0 {
		c.SegmentBytes = defaultSegmentBytes
	}
	if c.IndexIntervalBytes == 0 {
		c.IndexIntervalBytes = defaultIndexIntervalBytes
	}
	if c.PendingBytesMax == 0 {
		c.PendingBytesMax = defaultPendingBytesMax
	}
	if c.ReadsMax == 0 {
		c.ReadsMax = defaultReadsMax
	}
	if c.DigestChunkBytes == 0 {
		c.DigestChunkBytes = defaultDigestChunkBytes
	}
	if c.PrewriteBytes == 0 {
		c.PrewriteBytes = int(min(defaultPrewriteBytes, c.SegmentBytes))
	}
	if c.RecycleSegments == 0 {
		c.RecycleSegments = defaultRecycleSegments
	}
	if c.CursorSyncBytes == 0 {
		c.CursorSyncBytes = defaultCursorSyncBytes
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Validate checks the rules between the options (after defaults are applied).
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.SegmentBytes < 4<<10:
		return fmt.Errorf("%w: SegmentBytes %d below 4 KiB", ErrConfig, c.SegmentBytes)
	case c.IndexIntervalBytes < BatchHeaderSize:
		return fmt.Errorf("%w: IndexIntervalBytes %d below one batch header", ErrConfig, c.IndexIntervalBytes)
	case c.PendingBytesMax < BatchHeaderSize+BatchPayloadMax:
		return fmt.Errorf("%w: PendingBytesMax %d cannot hold one full batch (%d)", ErrConfig,
			c.PendingBytesMax, BatchHeaderSize+BatchPayloadMax)
	case c.ReadsMax < 1:
		return fmt.Errorf("%w: ReadsMax %d below 1", ErrConfig, c.ReadsMax)
	case c.DigestChunkBytes < 4<<10:
		return fmt.Errorf("%w: DigestChunkBytes %d below 4 KiB", ErrConfig, c.DigestChunkBytes)
	case c.PrewriteBytes != -1 && (c.PrewriteBytes < 4<<10 || int64(c.PrewriteBytes) > c.SegmentBytes):
		return fmt.Errorf("%w: PrewriteBytes %d is neither -1 nor in 4 KiB..SegmentBytes", ErrConfig, c.PrewriteBytes)
	case c.RecycleSegments < -1:
		return fmt.Errorf("%w: RecycleSegments %d below -1", ErrConfig, c.RecycleSegments)
	case c.CursorSyncBytes < 1:
		return fmt.Errorf("%w: CursorSyncBytes %d below 1", ErrConfig, c.CursorSyncBytes)
	}
	return nil
}
