package meta

import (
	"encoding/binary"
	"fmt"
	"strings"
)

// BatchEntriesMax bounds the entries of one batch op (RecordRecoveries, CommitRecoveries,
// SetAssignments). The largest entry, a CommitRecovery with CopiesMax sealed copies, takes 67 bytes,
// so a batch of 100 stays under 6.8 KiB: the op fits in a superblock copy inline (vsr.InlineMax,
// 8096 bytes) with room for its log record header, and a persist of it costs one fsync. Its Result
// (9 bytes an entry) stays under 1 KiB.
const BatchEntriesMax = 100

// RecordRecoveries records the pending recoveries of many streams in one op: each entry is applied
// as the RecordRecovery it is, with its own guards, at the op's number (so the recoveries recorded
// by one op share their id, which is unique per stream). An entry whose guard fails is refused alone;
// the others take effect. The Result names every entry's outcome (Result.Entries).
type RecordRecoveries struct {
	Entries []RecordRecovery // ascending stream id, 1..BatchEntriesMax
}

// CommitRecoveries commits the guarded assignments of many sealed recoveries in one op: each entry
// is applied as the CommitRecovery it is, with its own guards and checks; one refused entry changes
// nothing for its stream and does not stop the others.
type CommitRecoveries struct {
	Entries []CommitRecovery // ascending stream id, 1..BatchEntriesMax
}

// SetAssignments applies many changes that need no recovery in one op, each entry as the
// SetAssignment it is, with its own guards; a refused entry is refused alone.
type SetAssignments struct {
	Entries []SetAssignment // ascending stream id, 1..BatchEntriesMax
}

func (RecordRecoveries) Kind() OpKind { return OpRecordRecoveries }
func (CommitRecoveries) Kind() OpKind { return OpCommitRecoveries }
func (SetAssignments) Kind() OpKind   { return OpSetAssignments }

func (o RecordRecoveries) Validate() error { return validateEntries(o.Entries, RecordRecovery.stream) }
func (o CommitRecoveries) Validate() error { return validateEntries(o.Entries, CommitRecovery.stream) }
func (o SetAssignments) Validate() error   { return validateEntries(o.Entries, SetAssignment.stream) }

func (o RecordRecovery) stream() uint64 { return o.Stream }
func (o CommitRecovery) stream() uint64 { return o.Stream }
func (o SetAssignment) stream() uint64  { return o.Stream }

// Streams returns the streams of the entries, in entry order.
func (o RecordRecoveries) Streams() []uint64 { return entryStreams(o.Entries, RecordRecovery.stream) }
func (o CommitRecoveries) Streams() []uint64 { return entryStreams(o.Entries, CommitRecovery.stream) }
func (o SetAssignments) Streams() []uint64   { return entryStreams(o.Entries, SetAssignment.stream) }

// validateEntries is the one rule for a batch op's input: 1..BatchEntriesMax entries, stream ids
// strictly ascending (so no stream appears twice and the order of apply is the encoding's), and
// every entry valid as its single op.
func validateEntries[E Op](entries []E, stream func(E) uint64) error {
	if len(entries) == 0 || len(entries) > BatchEntriesMax {
		return fmt.Errorf("%w: %d entries (1..%d)", ErrOpInvalid, len(entries), BatchEntriesMax)
	}
	for i, e := range entries {
		if i > 0 && stream(entries[i-1]) >= stream(e) {
			if stream(entries[i-1]) == stream(e) {
				return fmt.Errorf("%w: stream %d has two entries", ErrOpInvalid, stream(e))
			}
			return fmt.Errorf("%w: entry streams not strictly ascending", ErrOpInvalid)
		}
		if err := e.Validate(); err != nil {
			return fmt.Errorf("entry %d (stream %d): %w", i, stream(e), err)
		}
	}
	return nil
}

func entryStreams[E any](entries []E, stream func(E) uint64) []uint64 {
	out := make([]uint64, len(entries))
	for i, e := range entries {
		out[i] = stream(e)
	}
	return out
}

func (o RecordRecoveries) appendBody(dst []byte) []byte { return appendEntries(dst, o.Entries) }
func (o CommitRecoveries) appendBody(dst []byte) []byte { return appendEntries(dst, o.Entries) }
func (o SetAssignments) appendBody(dst []byte) []byte   { return appendEntries(dst, o.Entries) }

func appendEntries[E Op](dst []byte, entries []E) []byte {
	dst = binary.LittleEndian.AppendUint16(dst, uint16(len(entries)))
	for _, e := range entries {
		dst = e.appendBody(dst)
	}
	return dst
}

// decodeEntries reads a u16 entry count and the entries. A count above BatchEntriesMax marks the
// input bad before anything is allocated for it.
func decodeEntries[E any](d *decoder, entry func(*decoder) E) []E {
	n := int(d.u16())
	if n > BatchEntriesMax {
		d.short = true
		return nil
	}
	out := make([]E, 0, n)
	for range n {
		out = append(out, entry(d))
		if d.short {
			return nil
		}
	}
	return out
}

// applyEntries applies each entry of a batch op alone, in order, and gathers every outcome: an entry
// whose guard fails changes nothing, and the others still take effect. The op's code is ResultOK
// (it was applied, entry by entry); Entries say which took effect.
func applyEntries[E any](entries []E, stream func(E) uint64, apply func(E) Result) Result {
	out := Result{Code: ResultOK, Entries: make([]EntryResult, 0, len(entries))}
	applied := 0
	var refusals strings.Builder
	for _, e := range entries {
		r := apply(e)
		out.Entries = append(out.Entries, EntryResult{Stream: stream(e), Code: r.Code})
		if r.OK() {
			applied++
			continue
		}
		if refusals.Len() < ResultMessageBytesMax {
			fmt.Fprintf(&refusals, "; stream %d refused: %s", stream(e), r)
		}
	}
	out.Message = fmt.Sprintf("%d of %d entries took effect%s", applied, len(entries), refusals.String())
	return out
}

func (s *State) applyRecordRecoveries(o RecordRecoveries, opNumber uint64) Result {
	return applyEntries(o.Entries, RecordRecovery.stream, func(e RecordRecovery) Result {
		return s.applyRecordRecovery(e, opNumber)
	})
}

func (s *State) applyCommitRecoveries(o CommitRecoveries) Result {
	return applyEntries(o.Entries, CommitRecovery.stream, s.applyCommitRecovery)
}

func (s *State) applySetAssignments(o SetAssignments) Result {
	return applyEntries(o.Entries, SetAssignment.stream, s.applySetAssignment)
}
