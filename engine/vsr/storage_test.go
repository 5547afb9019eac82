package vsr

import (
	"errors"
	"testing"

	"github.com/ringstream/ringstream/wire"
)

// chain builds a log of n entries on top of (base, baseHead).
func chain(base, baseHead uint64, n int, view uint32) []wire.VSREntry {
	var out []wire.VSREntry
	parent := baseHead
	for i := 0; i < n; i++ {
		e := wire.VSREntry{Op: base + 1 + uint64(i), View: view, Client: 5, Request: uint64(i + 1), Parent: parent,
			Body: counterOp(5, 1)}
		e.Checksum = entryChecksum(&e)
		parent = e.Checksum
		out = append(out, e)
	}
	return out
}

func TestStorage_RecoverFollowsTheSuperblockHeadPastAnOlderBranch(t *testing.T) {
	// The log holds ops 1..4 of view 1, then a new view's ops 3'..5' appended after them.
	old := chain(0, 0, 4, 1)
	newer := chain(2, old[1].Checksum, 3, 2)
	var log []byte
	for i := range old {
		log = AppendLogRecord(log, &old[i])
	}
	for i := range newer {
		log = AppendLogRecord(log, &newer[i])
	}
	sb := Superblock{Sequence: 7, View: 2, LogView: 2, Op: 5, Head: newer[2].Checksum, Commit: 2}
	d, valid, err := Recover([2][]byte{AppendSuperblock(nil, sb), nil}, [2][]byte{}, log)
	if err != nil {
		t.Fatal(err)
	}
	if valid != len(log) || d.Fresh || len(d.Entries) != 5 {
		t.Fatalf("valid %d of %d, fresh %v, %d entries", valid, len(log), d.Fresh, len(d.Entries))
	}
	if d.Entries[2].Checksum != newer[0].Checksum || d.Entries[1].Checksum != old[1].Checksum {
		t.Fatal("recovered chain is not the superblock's")
	}
}

func TestStorage_TornTailIsCutAndTornSuperblockFallsBack(t *testing.T) {
	entries := chain(0, 0, 3, 1)
	var log []byte
	for i := range entries {
		log = AppendLogRecord(log, &entries[i])
	}
	whole := len(log)
	extra := chain(3, entries[2].Checksum, 1, 1)
	log = AppendLogRecord(log, &extra[0])
	log = log[:len(log)-5] // the last record is torn

	sbOld := AppendSuperblock(nil, Superblock{Sequence: 4, View: 1, LogView: 1, Op: 3, Head: entries[2].Checksum})
	sbNew := AppendSuperblock(nil, Superblock{Sequence: 5, View: 1, LogView: 1, Op: 4, Head: extra[0].Checksum})
	sbNew = sbNew[:40] // torn write: only a prefix reached the slot
	d, valid, err := Recover([2][]byte{sbOld, sbNew}, [2][]byte{}, log)
	if err != nil {
		t.Fatal(err)
	}
	if valid != whole {
		t.Fatalf("valid prefix %d, want %d (the torn record cut)", valid, whole)
	}
	if d.Superblock.Sequence != 4 || len(d.Entries) != 3 {
		t.Fatalf("superblock %d with %d entries, want the older one with 3", d.Superblock.Sequence, len(d.Entries))
	}
}

func TestStorage_MissingEntryOrSnapshotIsCorrupt(t *testing.T) {
	entries := chain(0, 0, 2, 1)
	log := AppendLogRecord(nil, &entries[0])
	sb := AppendSuperblock(nil, Superblock{Sequence: 1, View: 1, LogView: 1, Op: 2, Head: entries[1].Checksum})
	if _, _, err := Recover([2][]byte{sb, nil}, [2][]byte{}, log); !errors.Is(err, ErrStorageCorrupt) {
		t.Fatalf("missing head entry: %v, want ErrStorageCorrupt", err)
	}
	sb = AppendSuperblock(nil, Superblock{Sequence: 1, View: 1, LogView: 1, Op: 2, Commit: 2, SnapshotOp: 2,
		SnapshotChecksum: 99})
	if _, _, err := Recover([2][]byte{sb, nil}, [2][]byte{}, nil); !errors.Is(err, ErrStorageCorrupt) {
		t.Fatalf("missing snapshot: %v, want ErrStorageCorrupt", err)
	}
}

func TestStorage_EmptyIsFresh(t *testing.T) {
	d, valid, err := Recover([2][]byte{}, [2][]byte{}, nil)
	if err != nil || !d.Fresh || valid != 0 {
		t.Fatalf("fresh %v valid %d err %v", d.Fresh, valid, err)
	}
}

func TestStorage_SuperblockRoundTripAndBadFieldsRefused(t *testing.T) {
	sb := Superblock{Sequence: 9, View: 4, LogView: 3, Op: 20, Head: 77, Commit: 18, SnapshotOp: 16, SnapshotChecksum: 5}
	got, err := DecodeSuperblock(AppendSuperblock(nil, sb))
	if err != nil || got != sb {
		t.Fatalf("round trip %+v %v", got, err)
	}
	bad := sb
	bad.Commit = 30 // past op
	if _, err := DecodeSuperblock(AppendSuperblock(nil, bad)); !errors.Is(err, ErrRecord) {
		t.Fatalf("commit past op: %v, want ErrRecord", err)
	}
}

func TestCheckpoint_RoundTripCarriesClientTable(t *testing.T) {
	m := newCounterMachine()
	m.counters[3] = 9
	tbl := clientTable{max: 8}
	tbl.commit(3, 4, 10, []byte("nine"))
	tbl.commit(1, 2, 11, nil)
	payload := appendCheckpoint(nil, 11, 123, &tbl, m)
	cp, err := decodeCheckpoint(payload)
	if err != nil {
		t.Fatal(err)
	}
	if cp.op != 11 || cp.head != 123 || len(cp.sessions) != 2 || cp.sessions[0].client != 1 ||
		string(cp.sessions[1].result) != "nine" {
		t.Fatalf("checkpoint %+v", cp)
	}
	m2 := newCounterMachine()
	if err := m2.Restore(cp.state); err != nil || m2.counters[3] != 9 {
		t.Fatalf("state %v %v", m2.counters, err)
	}
	for n := 0; n < len(payload); n++ {
		if _, err := decodeCheckpoint(payload[:n]); err == nil {
			t.Fatalf("checkpoint cut to %d bytes decoded", n)
		}
	}
}

func TestClientTable_EvictsOldestPastMax(t *testing.T) {
	tbl := clientTable{max: 2}
	tbl.commit(10, 1, 1, nil)
	tbl.commit(20, 1, 2, nil)
	tbl.commit(30, 1, 3, nil)
	if _, ok := tbl.lookup(10); ok {
		t.Fatal("oldest session kept past max")
	}
	if _, ok := tbl.lookup(30); !ok || len(tbl.sessions) != 2 {
		t.Fatalf("sessions %+v", tbl.sessions)
	}
}

func FuzzVSRStorageRecover(f *testing.F) {
	entries := chain(0, 0, 3, 1)
	var log []byte
	for i := range entries {
		log = AppendLogRecord(log, &entries[i])
	}
	sb := AppendSuperblock(nil, Superblock{Sequence: 1, View: 1, LogView: 1, Op: 3, Head: entries[2].Checksum, Commit: 1})
	f.Add(sb, []byte{}, log)
	f.Add([]byte{}, AppendSnapshotRecord(nil, []byte("x")), []byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, sb, snap, log []byte) {
		d, valid, err := Recover([2][]byte{sb, nil}, [2][]byte{snap, nil}, log)
		if err != nil {
			return
		}
		if valid > len(log) {
			t.Fatalf("valid %d past %d", valid, len(log))
		}
		if !d.Fresh && !validChain(d.Superblock.SnapshotOp, 0, false, d.Entries) {
			t.Fatal("recovered entries are not a chain")
		}
	})
}

func FuzzVSRCheckpoint(f *testing.F) {
	tbl := clientTable{max: 4}
	tbl.commit(1, 1, 1, []byte("r"))
	f.Add(appendCheckpoint(nil, 1, 2, &tbl, newCounterMachine()))
	f.Fuzz(func(t *testing.T, b []byte) {
		cp, err := decodeCheckpoint(b)
		if err != nil {
			return
		}
		for i := 1; i < len(cp.sessions); i++ {
			if cp.sessions[i].client <= cp.sessions[i-1].client {
				t.Fatal("sessions out of order")
			}
		}
	})
}
