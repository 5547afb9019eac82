package meta

import (
	"fmt"
	"testing"
)

func newStreamEntry(name string, owner uint16) CreateStream {
	majority := Policy{Kind: PolicyMajorityDurable}
	return CreateStream{Name: name, Copies: 1, Policy: majority, Owner: owner, Stamped: majority}
}

// A batched create takes each name as its single create would: a taken name or an unregistered
// member refuses that entry alone, the others are created, and each entry's outcome names the id
// its name was given.
func TestCreateStreams_TakenNameRefusedAloneOthersCreated(t *testing.T) {
	f, sts := batchFixture(t) // a, b, c exist
	unregistered := newStreamEntry("e", 99)
	r := f.apply(CreateStreams{Entries: []CreateStream{newStreamEntry("a", 1), newStreamEntry("d", 2), unregistered,
		newStreamEntry("f", 3)}})
	d, okD := f.s.StreamByName("d")
	fs, okF := f.s.StreamByName("f")
	if !okD || !okF {
		t.Fatalf("the good entries were not created: %s", r)
	}
	if _, ok := f.s.StreamByName("e"); ok {
		t.Fatal("the entry naming an unregistered node was created")
	}
	if a, _ := f.s.StreamByName("a"); a != sts[0] {
		t.Fatalf("the taken name's stream changed: %+v, was %+v", a, sts[0])
	}
	wantEntries(t, r, EntryResult{Code: ResultNameInUse}, EntryResult{Stream: d.ID, Code: ResultOK},
		EntryResult{Code: ResultNodeNotRegistered}, EntryResult{Stream: fs.ID, Code: ResultOK})
	if d.ID == fs.ID || d.ID == sts[2].ID {
		t.Fatalf("ids not distinct: d %d f %d c %d", d.ID, fs.ID, sts[2].ID)
	}
}

// The batch is its entries' single ops: the state after it equals the state after the single creates
// of its good entries.
func TestCreateStreams_EqualsTheSingleCreates(t *testing.T) {
	batch, _ := batchFixture(t)
	single, _ := batchFixture(t)
	var entries []CreateStream
	for i := range BatchEntriesMax {
		entries = append(entries, newStreamEntry(fmt.Sprintf("s%03d", i), uint16(1+i%3)))
	}
	batch.apply(CreateStreams{Entries: entries})
	for _, e := range entries {
		single.mustApply(e)
	}
	if batch.s.Digest() != single.s.Digest() {
		t.Fatal("a batch of creates left another state than its single creates")
	}
}

// A batched delete refuses an entry at a stale incarnation alone and deletes the others.
func TestDeleteStreams_StaleIncarnationRefusedAlone(t *testing.T) {
	f, sts := batchFixture(t)
	r := f.apply(DeleteStreams{Entries: []DeleteStream{{Stream: sts[0].ID, Incarnation: sts[0].Incarnation},
		{Stream: sts[1].ID, Incarnation: sts[1].Incarnation + 1}, {Stream: sts[2].ID, Incarnation: sts[2].Incarnation}}})
	if _, ok := f.s.StreamByName("b"); !ok {
		t.Fatal("the stale entry's stream was deleted")
	}
	for _, n := range []string{"a", "c"} {
		if _, ok := f.s.StreamByName(n); ok {
			t.Fatalf("%s was not deleted: %s", n, r)
		}
	}
	wantEntries(t, r, EntryResult{Stream: sts[0].ID, Code: ResultOK}, EntryResult{Stream: sts[1].ID, Code: ResultIncarnationMismatch},
		EntryResult{Stream: sts[2].ID, Code: ResultOK})
}
