package bench

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// recordMagic marks a record written by the bench; its first 16 bytes are the magic, the producer
// index and the record's sequence within that producer, so every record is unique and can be told
// apart when it is read back.
const recordMagic = 0x52534231 // "RSB1"

// recordHeaderBytes is the record id at the start of every record; --record-size is at least this.
const recordHeaderBytes = 16

// ErrVerify: a confirmed record was missing, misplaced or duplicated when the streams were read back.
var ErrVerify = errors.New("bench: verification failed")

// recordID names one record: the producer that wrote it and its sequence there.
type recordID struct {
	producer uint32
	seq      uint64
}

// putRecord writes id's header into rec (len(rec) >= recordHeaderBytes) and fills the rest from pad.
func putRecord(rec []byte, id recordID, pad []byte) {
	binary.BigEndian.PutUint32(rec[0:4], recordMagic)
	binary.BigEndian.PutUint32(rec[4:8], id.producer)
	binary.BigEndian.PutUint64(rec[8:16], id.seq)
	copy(rec[recordHeaderBytes:], pad)
}

// parseRecord reads a record's id; ok is false for a record the bench did not write.
func parseRecord(rec []byte) (id recordID, ok bool) {
	if len(rec) < recordHeaderBytes || binary.BigEndian.Uint32(rec[0:4]) != recordMagic {
		return recordID{}, false
	}
	return recordID{producer: binary.BigEndian.Uint32(rec[4:8]), seq: binary.BigEndian.Uint64(rec[8:16])}, true
}

// confirmation is one confirmed record: where the produce reply said it is.
type confirmation struct {
	id     recordID
	offset uint64
}

// ledger is one stream's confirmed records and, once read back, where each record was found.
type ledger struct {
	stream    string
	confirmed []confirmation
	found     map[recordID]uint64 // first offset each record was read at
	readBack  int64               // records read back
	foreign   int64               // records read back that the bench did not write
	dupes     int64               // records read at a second offset
	dupeIDs   []string            // the first few, for the report
}

// Verification is the outcome of reading every stream back.
type Verification struct {
	Confirmed  int64 `json:"confirmed"`
	ReadBack   int64 `json:"read_back"`
	Missing    int64 `json:"missing"`
	Misplaced  int64 `json:"misplaced"`
	Duplicated int64 `json:"duplicated"`
	Foreign    int64 `json:"foreign"`
	// Examples names up to ten faulty records (stream, producer, sequence, offsets).
	Examples []string `json:"examples,omitempty"`
}

// OK is whether no confirmed record was missing, misplaced or duplicated.
func (v Verification) OK() bool { return v.Missing == 0 && v.Misplaced == 0 && v.Duplicated == 0 }

// Err is ErrVerify naming the counts, or nil when OK.
func (v Verification) Err() error {
	if v.OK() {
		return nil
	}
	return fmt.Errorf("%w: %d confirmed records, %d missing, %d at another offset than confirmed, %d duplicated",
		ErrVerify, v.Confirmed, v.Missing, v.Misplaced, v.Duplicated)
}

// beginRead resets what was read back.
func (l *ledger) beginRead() {
	l.found = make(map[recordID]uint64, len(l.confirmed))
	l.readBack, l.foreign, l.dupes, l.dupeIDs = 0, 0, 0, nil
}

// read notes that rec was read back at offset.
func (l *ledger) read(offset uint64, rec []byte) {
	l.readBack++
	id, ok := parseRecord(rec)
	if !ok {
		l.foreign++
		return
	}
	if first, seen := l.found[id]; seen {
		if first != offset {
			l.dupes++
			if len(l.dupeIDs) < 10 {
				l.dupeIDs = append(l.dupeIDs, fmt.Sprintf("%s: producer %d record %d at offsets %d and %d",
					l.stream, id.producer, id.seq, first, offset))
			}
		}
		return
	}
	l.found[id] = offset
}

// check compares what was read back with what was confirmed and adds the outcome to v.
func (l *ledger) check(v *Verification) {
	v.Confirmed += int64(len(l.confirmed))
	v.ReadBack += l.readBack
	v.Foreign += l.foreign
	v.Duplicated += l.dupes
	v.Examples = append(v.Examples, l.dupeIDs...)
	for _, c := range l.confirmed {
		at, ok := l.found[c.id]
		switch {
		case !ok:
			v.Missing++
			if len(v.Examples) < 10 {
				v.Examples = append(v.Examples, fmt.Sprintf("%s: producer %d record %d confirmed at offset %d: missing",
					l.stream, c.id.producer, c.id.seq, c.offset))
			}
		case at != c.offset:
			v.Misplaced++
			if len(v.Examples) < 10 {
				v.Examples = append(v.Examples, fmt.Sprintf("%s: producer %d record %d confirmed at offset %d, read at %d",
					l.stream, c.id.producer, c.id.seq, c.offset, at))
			}
		}
	}
	if len(v.Examples) > 10 {
		v.Examples = v.Examples[:10]
	}
}
