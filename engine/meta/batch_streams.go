package meta

import (
	"fmt"
	"strings"
)

// CreateStreams creates many streams in one op (a batched client create, issue 25 item 2): each
// entry is applied as the CreateStream it is, with its own guards, in entry order; a refused entry
// (its name taken, a member not registered) changes nothing and the others are created. Entries are
// strictly ascending by name (one entry a name), 1..BatchEntriesMax. The Result names each entry's
// outcome in entry order: Stream is the id the name was given, 0 for a refused entry.
type CreateStreams struct {
	Entries []CreateStream
}

// DeleteStreams deletes many streams in one op, each entry applied as the DeleteStream it is; a
// refused entry is refused alone. Entries are strictly ascending by stream, 1..BatchEntriesMax.
type DeleteStreams struct {
	Entries []DeleteStream
}

func (CreateStreams) Kind() OpKind { return OpCreateStreams }
func (DeleteStreams) Kind() OpKind { return OpDeleteStreams }

func (o DeleteStreams) Validate() error { return validateEntries(o.Entries, DeleteStream.stream) }

func (o DeleteStream) stream() uint64 { return o.Stream }

// Validate is validateEntries' rule with names for keys: 1..BatchEntriesMax entries, names strictly
// ascending, every entry valid as its single op.
func (o CreateStreams) Validate() error {
	if len(o.Entries) == 0 || len(o.Entries) > BatchEntriesMax {
		return fmt.Errorf("%w: %d entries (1..%d)", ErrOpInvalid, len(o.Entries), BatchEntriesMax)
	}
	for i, e := range o.Entries {
		if i > 0 && o.Entries[i-1].Name >= e.Name {
			if o.Entries[i-1].Name == e.Name {
				return fmt.Errorf("%w: name %q has two entries", ErrOpInvalid, e.Name)
			}
			return fmt.Errorf("%w: entry names not strictly ascending", ErrOpInvalid)
		}
		if err := e.Validate(); err != nil {
			return fmt.Errorf("entry %d (%q): %w", i, e.Name, err)
		}
	}
	return nil
}

// Streams returns the streams of the entries, in entry order.
func (o DeleteStreams) Streams() []uint64 { return entryStreams(o.Entries, DeleteStream.stream) }

func (o CreateStreams) appendBody(dst []byte) []byte { return appendEntries(dst, o.Entries) }
func (o DeleteStreams) appendBody(dst []byte) []byte { return appendEntries(dst, o.Entries) }

func (d *decoder) createStream() CreateStream {
	return CreateStream{Name: d.str(), Copies: d.u8(), Policy: d.policy(), Owner: d.u16(),
		Followers: d.nodes(CopiesMax - 1), Stamped: d.policy()}
}

func (d *decoder) deleteStream() DeleteStream {
	return DeleteStream{Stream: d.u64(), Incarnation: d.u32()}
}

// applyCreateStreams applies each entry alone, as applyEntries does; an entry's outcome names the id
// it created (0 when refused), which is only known once it is applied.
func (s *State) applyCreateStreams(o CreateStreams) Result {
	out := Result{Code: ResultOK, Entries: make([]EntryResult, 0, len(o.Entries))}
	created := 0
	var refusals strings.Builder
	for _, e := range o.Entries {
		r := s.applyCreateStream(e)
		er := EntryResult{Code: r.Code}
		if r.OK() {
			created++
			er.Stream = s.names[e.Name]
		} else if refusals.Len() < ResultMessageBytesMax {
			fmt.Fprintf(&refusals, "; %q refused: %s", e.Name, r)
		}
		out.Entries = append(out.Entries, er)
	}
	out.Message = fmt.Sprintf("%d of %d streams created%s", created, len(o.Entries), refusals.String())
	return out
}

func (s *State) applyDeleteStreams(o DeleteStreams) Result {
	return applyEntries(o.Entries, DeleteStream.stream, s.applyDeleteStream)
}
