package meta

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

	"github.com/ringstream/ringstream/engine/vsr"
)

// batchFixture makes two fixtures holding streams a, b, c (owner 1, followers 2 3), so a batch
// applied to one can be compared with the single ops of its good entries applied to the other.
func batchFixture(t *testing.T) (*fixture, []Stream) {
	f := newFixture(t).withCluster()
	return f, []Stream{f.createStream("a", 1, 2, 3), f.createStream("b", 1, 2, 3), f.createStream("c", 1, 2, 3)}
}

func recordEntry(st Stream, epoch uint32) RecordRecovery {
	return RecordRecovery{Stream: st.ID, Incarnation: st.Incarnation, ExpectedEpoch: epoch, ProposedOwner: 2,
		Members: []uint16{2, 3, 4}, Policy: Policy{Kind: PolicyMajorityDurable}, Reason: ReasonEagerFailover}
}

func wantEntries(t *testing.T, r Result, want ...EntryResult) {
	t.Helper()
	if r.Code != ResultOK || !reflect.DeepEqual(r.Entries, want) {
		t.Fatalf("result %s entries %+v, want ok with %+v", r, r.Entries, want)
	}
}

// An entry whose guard fails is refused alone: the state after the batch is the state after the
// single ops of the other entries, applied at the same op number.
func TestRecordRecoveries_EntryWithStaleEpochRefusedAloneOthersRecorded(t *testing.T) {
	f, sts := batchFixture(t)
	g, _ := batchFixture(t)
	r := f.apply(RecordRecoveries{Entries: []RecordRecovery{recordEntry(sts[0], 1), recordEntry(sts[1], 2),
		recordEntry(sts[2], 1)}})
	wantEntries(t, r, EntryResult{sts[0].ID, ResultOK}, EntryResult{sts[1].ID, ResultEpochMismatch},
		EntryResult{sts[2].ID, ResultOK})
	for _, st := range []Stream{sts[0], sts[2]} {
		if rec, ok := f.s.RecoveryOf(st.ID); !ok || rec.ID != f.op || rec.Status != RecoveryPending {
			t.Fatalf("stream %d: recovery %+v %v, want pending with id %d", st.ID, rec, ok, f.op)
		}
	}
	if _, ok := f.s.RecoveryOf(sts[1].ID); ok {
		t.Fatal("refused entry recorded a recovery")
	}
	g.op = f.op - 1
	g.s.appliedOp = g.op
	for _, st := range []Stream{sts[0], sts[2]} {
		g.s.applyRecordRecovery(recordEntry(st, 1), f.op)
	}
	g.s.appliedOp = f.op
	if f.s.Digest() != g.s.Digest() {
		t.Fatal("batch with a refused entry differs from the single ops of its good entries")
	}
}

func TestRecordRecoveries_EveryGuardOfTheSingleOpHolds(t *testing.T) {
	f, sts := batchFixture(t)
	f.recordRecovery(sts[0], 2, 2, 3)
	f.mustApply(DeleteStream{Stream: sts[1].ID, Incarnation: 1})
	stale := recordEntry(sts[2], 1)
	stale.Incarnation = 2
	r := f.apply(RecordRecoveries{Entries: []RecordRecovery{recordEntry(sts[0], 1), recordEntry(sts[1], 1), stale}})
	wantEntries(t, r, EntryResult{sts[0].ID, ResultRecoveryRecorded}, EntryResult{sts[1].ID, ResultStreamNotFound},
		EntryResult{sts[2].ID, ResultIncarnationMismatch})
}

// Each guard of CommitRecovery (recovery id, epoch, starts version) refuses its entry alone.
func TestCommitRecoveries_EachGuardRefusesItsEntryAlone(t *testing.T) {
	f, sts := batchFixture(t)
	d := f.createStream("d", 1, 2, 3)
	sts = append(sts, d)
	for _, st := range sts {
		f.recordRecovery(st, 2, 2, 3)
	}
	entry := func(st Stream) CommitRecovery {
		rec, _ := f.s.RecoveryOf(st.ID)
		return CommitRecovery{Stream: st.ID, Incarnation: 1, Recovery: rec.ID, ExpectedEpoch: 1,
			Owner: 2, RecordTail: 40, CursorTail: 4, Sealed: []uint16{2, 3}}
	}
	good, wrongID, wrongEpoch, wrongStarts := entry(sts[0]), entry(sts[1]), entry(sts[2]), entry(sts[3])
	wrongID.Recovery++
	wrongEpoch.ExpectedEpoch = 2
	wrongStarts.ExpectedStartsVersion = 1
	before := map[uint64]Assignment{}
	for _, st := range sts[1:] {
		before[st.ID] = f.assignment(st)
	}
	r := f.apply(CommitRecoveries{Entries: []CommitRecovery{good, wrongID, wrongEpoch, wrongStarts}})
	wantEntries(t, r, EntryResult{sts[0].ID, ResultOK}, EntryResult{sts[1].ID, ResultRecoveryMismatch},
		EntryResult{sts[2].ID, ResultEpochMismatch}, EntryResult{sts[3].ID, ResultStartsVersionMismatch})
	if a := f.assignment(sts[0]); a.Epoch != 2 || a.Owner != 2 {
		t.Fatalf("good entry not committed: %+v", a)
	}
	if s := f.starts(sts[0]); s.Version != 1 || len(s.List) != 1 || s.List[0].RecordStart != 40 {
		t.Fatalf("good entry's history start: %+v", s)
	}
	for _, st := range sts[1:] {
		if a := f.assignment(st); !reflect.DeepEqual(a, before[st.ID]) {
			t.Fatalf("refused stream %d moved: %+v", st.ID, a)
		}
		if rec, ok := f.s.RecoveryOf(st.ID); !ok || rec.Status != RecoveryPending {
			t.Fatalf("refused stream %d lost its recovery", st.ID)
		}
		if s := f.starts(st); s.Version != 0 {
			t.Fatalf("refused stream %d got a history start", st.ID)
		}
	}
}

func TestCommitRecoveries_BelowConfirmedPrefixRefusedAlone(t *testing.T) {
	f, sts := batchFixture(t)
	var entries []CommitRecovery
	for _, st := range sts[:2] {
		rec := f.recordRecovery(st, 2, 2, 3)
		f.mustApply(CommitRecovery{Stream: st.ID, Incarnation: 1, Recovery: rec.ID, ExpectedEpoch: 1,
			Owner: 2, RecordTail: 100, Sealed: []uint16{2, 3}})
		rec = f.recordRecovery(st, 3, 3)
		entries = append(entries, CommitRecovery{Stream: st.ID, Incarnation: 1, Recovery: rec.ID, ExpectedEpoch: 2,
			ExpectedStartsVersion: 1, Owner: 3, RecordTail: 100, Sealed: []uint16{3}})
	}
	entries[0].RecordTail = 99
	r := f.apply(CommitRecoveries{Entries: entries})
	wantEntries(t, r, EntryResult{sts[0].ID, ResultBelowConfirmedPrefix}, EntryResult{sts[1].ID, ResultOK})
}

func TestSetAssignments_RefusedEntryAloneOthersAssigned(t *testing.T) {
	f, sts := batchFixture(t)
	f.recordRecovery(sts[1], 2, 2, 3)
	add := func(st Stream) SetAssignment {
		return SetAssignment{Stream: st.ID, Incarnation: 1, ExpectedEpoch: 1, Owner: 1, Followers: []uint16{2, 3, 4},
			Policy: Policy{Kind: PolicyCountDurable, Count: 2}}
	}
	dropsFollower := add(sts[2])
	dropsFollower.Followers = []uint16{2}
	r := f.apply(SetAssignments{Entries: []SetAssignment{add(sts[0]), add(sts[1]), dropsFollower}})
	wantEntries(t, r, EntryResult{sts[0].ID, ResultOK}, EntryResult{sts[1].ID, ResultRecoveryRecorded},
		EntryResult{sts[2].ID, ResultNeedsRecovery})
	if a := f.assignment(sts[0]); a.Epoch != 2 || !reflect.DeepEqual(a.Followers, []uint16{2, 3, 4}) {
		t.Fatalf("good entry not assigned: %+v", a)
	}
	for _, st := range sts[1:] {
		if a := f.assignment(st); a.Epoch != 1 {
			t.Fatalf("refused stream %d moved to epoch %d", st.ID, a.Epoch)
		}
	}
}

// One validation rule for a batch's input, used by EncodeOp before proposing and by DecodeOp.
func TestBatchOps_ValidationRefusesCountDuplicatesOrderAndBadEntries(t *testing.T) {
	st := func(id uint64) Stream { return Stream{ID: id, Incarnation: 1} }
	many := make([]RecordRecovery, BatchEntriesMax+1)
	for i := range many {
		many[i] = recordEntry(st(uint64(i+1)), 1)
	}
	badEntry := recordEntry(st(2), 1)
	badEntry.ExpectedEpoch = 0
	cases := map[string]Op{
		"no entries":        RecordRecoveries{},
		"too many entries":  RecordRecoveries{Entries: many},
		"stream twice":      RecordRecoveries{Entries: []RecordRecovery{recordEntry(st(1), 1), recordEntry(st(1), 1)}},
		"descending":        RecordRecoveries{Entries: []RecordRecovery{recordEntry(st(2), 1), recordEntry(st(1), 1)}},
		"invalid entry":     RecordRecoveries{Entries: []RecordRecovery{recordEntry(st(1), 1), badEntry}},
		"commit twice":      CommitRecoveries{Entries: []CommitRecovery{{Stream: 1, Incarnation: 1, Recovery: 1, ExpectedEpoch: 1, Owner: 1, Sealed: []uint16{1}}, {Stream: 1, Incarnation: 1, Recovery: 1, ExpectedEpoch: 1, Owner: 1, Sealed: []uint16{1}}}},
		"commit bad entry":  CommitRecoveries{Entries: []CommitRecovery{{Stream: 1, Incarnation: 1, Recovery: 1, ExpectedEpoch: 1, Owner: 2, Sealed: []uint16{1}}}},
		"set twice":         SetAssignments{Entries: []SetAssignment{{Stream: 5, Incarnation: 1, ExpectedEpoch: 1, Owner: 1}, {Stream: 5, Incarnation: 1, ExpectedEpoch: 1, Owner: 1}}},
		"set bad entry":     SetAssignments{Entries: []SetAssignment{{Stream: 5, Incarnation: 1, ExpectedEpoch: 1, Owner: 1, Followers: []uint16{1}}}},
		"set empty":         SetAssignments{},
		"commit none valid": CommitRecoveries{Entries: []CommitRecovery{{}}},
		"create none":       CreateStreams{},
		"create name twice": CreateStreams{Entries: []CreateStream{newStreamEntry("x", 1), newStreamEntry("x", 2)}},
		"create descending": CreateStreams{Entries: []CreateStream{newStreamEntry("y", 1), newStreamEntry("x", 2)}},
		"create bad entry":  CreateStreams{Entries: []CreateStream{newStreamEntry("x", 1), newStreamEntry("y z", 2)}},
		"delete twice":      DeleteStreams{Entries: []DeleteStream{{Stream: 1, Incarnation: 1}, {Stream: 1, Incarnation: 1}}},
		"delete bad entry":  DeleteStreams{Entries: []DeleteStream{{Stream: 1, Incarnation: 0}}},
	}
	for name, op := range cases {
		t.Run(name, func(t *testing.T) {
			if b, err := EncodeOp([]byte("x"), op); !errors.Is(err, ErrOpInvalid) || string(b) != "x" {
				t.Fatalf("EncodeOp: err %v, dst %q; want ErrOpInvalid and dst unchanged", err, b)
			}
			raw := op.appendBody([]byte{opVersion, byte(op.Kind())})
			if _, err := DecodeOp(raw); !errors.Is(err, ErrOpInvalid) && !errors.Is(err, ErrOpShort) {
				t.Fatalf("DecodeOp: err %v, want ErrOpInvalid", err)
			}
			f, _ := batchFixture(t)
			f.op++
			before := f.s.Digest()
			if r := f.s.applyOp(raw, f.op); r.Code != ResultMalformed || len(r.Entries) != 0 || f.s.Digest() != before {
				t.Fatalf("applied bytes of an invalid batch: %s", r)
			}
		})
	}
}

// An entry count above the bound is refused before any entry is read, even when the entries follow.
func TestDecodeOp_RefusesBatchCountAboveBound(t *testing.T) {
	entries := make([]CommitRecovery, BatchEntriesMax+1)
	for i := range entries {
		entries[i] = CommitRecovery{Stream: uint64(i + 1), Incarnation: 1, Recovery: 1, ExpectedEpoch: 1, Owner: 1,
			Sealed: []uint16{1}}
	}
	b := CommitRecoveries{Entries: entries}.appendBody([]byte{opVersion, byte(OpCommitRecoveries)})
	if _, err := DecodeOp(b); !errors.Is(err, ErrOpShort) {
		t.Fatalf("err %v, want ErrOpShort", err)
	}
}

// BatchEntriesMax of the largest entries fits one superblock copy inline (the bound's reason), with
// room for the log record's header.
func TestBatchEntriesMax_LargestBatchFitsInline(t *testing.T) {
	entries := make([]CommitRecovery, BatchEntriesMax)
	for i := range entries {
		entries[i] = CommitRecovery{Stream: 1<<63 + uint64(i), Incarnation: 1, Recovery: 1, ExpectedEpoch: 1,
			Owner: 1, Sealed: []uint16{1, 2, 3, 4, 5, 6, 7}}
	}
	b := AppendOp(nil, CommitRecoveries{Entries: entries})
	if len(b)+vsr.LogRecordHeaderSize+256 > vsr.InlineMax {
		t.Fatalf("largest batch takes %d bytes, inline room %d", len(b), vsr.InlineMax)
	}
	results := make([]EntryResult, BatchEntriesMax)
	if n := len(AppendResult(nil, Result{Entries: results})); n > 1024 {
		t.Fatalf("largest batch result takes %d bytes", n)
	}
}

func TestResultCodec_EntriesRoundTripAndSingleResultsUnchanged(t *testing.T) {
	single := Result{Code: ResultEpochMismatch, Message: "stream 1 is at epoch 2"}
	if got := AppendResult(nil, single); !bytes.Equal(got, append([]byte{17, 22, 0}, single.Message...)) {
		t.Fatalf("single result encodes as %x", got)
	}
	batch := Result{Code: ResultOK, Message: "1 of 2 entries took effect",
		Entries: []EntryResult{{Stream: 7, Code: ResultOK}, {Stream: 1 << 40, Code: ResultStartsVersionMismatch}}}
	for _, r := range []Result{single, batch} {
		got, err := DecodeResult(AppendResult(nil, r))
		if err != nil || !reflect.DeepEqual(got, r) {
			t.Fatalf("round trip of %+v: %+v, %v", r, got, err)
		}
	}
	enc := AppendResult(nil, batch)
	for n := len(enc) - 1; n > 3+len(batch.Message); n-- {
		if _, err := DecodeResult(enc[:n]); !errors.Is(err, ErrResult) {
			t.Fatalf("cut to %d bytes: err %v", n, err)
		}
	}
	if _, err := DecodeResult(append(enc, 0)); !errors.Is(err, ErrResult) {
		t.Fatalf("a trailing byte after the entries: err %v", err)
	}
	zero := append(AppendResult(nil, single), 0, 0)
	if _, err := DecodeResult(zero); !errors.Is(err, ErrResult) {
		t.Fatalf("zero entries: err %v", err)
	}
	if e, ok := batch.Entry(1 << 40); !ok || e.OK() {
		t.Fatalf("Entry: %+v %v", e, ok)
	}
}
