package segment

import "errors"

// Sentinel errors. Each has one meaning; wrapped errors add the file and position.
var (
	// ErrShortWrite: a write to a segment file wrote fewer bytes than asked, with no errno. On a
	// regular file Linux does that when the file system fills up (or a quota or file size limit is
	// met) in the middle of the write; the next write would fail with ENOSPC or EDQUOT, so the cause
	// reported for it is "no space" (the message says so).
	ErrShortWrite = errors.New("segment: short write (no space left on the device)")
	// ErrShortBatch: the buffer ends inside a batch (a read that stopped early, or a torn tail).
	ErrShortBatch = errors.New("segment: short batch")
	// ErrCorrupt: bytes on disk are not what this package wrote (checksum, magic, version, lengths,
	// offsets out of sequence) at a place where a crash cannot explain them.
	ErrCorrupt = errors.New("segment: corrupt data")
	// ErrFenced: an append or role change carries an epoch below the copy's fence epoch.
	ErrFenced = errors.New("segment: epoch below fence")
	// ErrBelowHead: an offset lies below the retained head of the log.
	ErrBelowHead = errors.New("segment: offset below retained head")
	// ErrBeyondTail: an offset lies past the end of the log.
	ErrBeyondTail = errors.New("segment: offset beyond tail")
	// ErrBackpressure: the log holds as many queued bytes or appends as its config allows; flush
	// and dispatch completions, then retry.
	ErrBackpressure = errors.New("segment: append queue full")
	// ErrFailed: a write or fsync failed earlier; the log refuses everything until it is reopened
	// (after a failed fsync the page cache can no longer be trusted).
	ErrFailed = errors.New("segment: log failed")
	// ErrBusy: an operation that needs the log quiet (cut, retention, seal) found a group commit or
	// digest still in flight; drain completions and retry.
	ErrBusy = errors.New("segment: operation in flight")
	// ErrDigestMismatch: verify mode found a segment whose bytes no longer match its stored digest.
	ErrDigestMismatch = errors.New("segment: digest mismatch")
	// ErrConfig: a configuration value breaks a rule; the message names the option.
	ErrConfig = errors.New("segment: invalid config")
	// ErrClosed: the log or copy was closed.
	ErrClosed = errors.New("segment: closed")
	// ErrInvalidBatch: an append's batch breaks a rule (no records, payload too large, bad encoding).
	ErrInvalidBatch = errors.New("segment: invalid batch")
	// ErrNotBoundary: a cut offset falls inside a batch.
	ErrNotBoundary = errors.New("segment: offset is not a batch boundary")
	// ErrEpochOrder: a log epoch entry does not follow the last one (epochs and starts only grow).
	ErrEpochOrder = errors.New("segment: log epoch out of order")
	// ErrOffsetOrder: an appended batch's base offset is not the log's next offset.
	ErrOffsetOrder = errors.New("segment: batch offset out of order")
)
