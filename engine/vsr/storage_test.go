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

// allCopies is sb in every superblock copy of both areas.
func allCopies(sb []byte) [SuperblockSlots][]byte {
	var c [SuperblockSlots][]byte
	for i := range c {
		c[i] = sb
	}
	return c
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
	d, valid, err := Recover(allCopies(AppendSuperblock(nil, sb)), [2][]byte{}, log)
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
	sbNew = sbNew[:40] // torn write: only a prefix reached the first copy of area 1, none the others
	d, valid, err := Recover([SuperblockSlots][]byte{sbOld, sbOld, sbOld, sbOld, sbNew}, [2][]byte{}, log)
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

// A superblock that names log entries or a snapshot the storage does not hold proves nothing: the
// replica recovers from the group, and Cause says why.
func TestStorage_MissingEntryOrSnapshotRecovers(t *testing.T) {
	entries := chain(0, 0, 2, 1)
	log := AppendLogRecord(nil, &entries[0])
	sb := AppendSuperblock(nil, Superblock{Sequence: 2, View: 1, LogView: 1, Op: 2, Head: entries[1].Checksum})
	d, _, err := Recover(allCopies(sb), [2][]byte{}, log)
	if err != nil || !d.Recovering || !errors.Is(d.Cause, ErrStorageCorrupt) || d.Superblock.View != 1 {
		t.Fatalf("missing head entry: %+v %v, want recovering because of ErrStorageCorrupt", d, err)
	}
	sb = AppendSuperblock(nil, Superblock{Sequence: 2, View: 1, LogView: 1, Op: 2, Commit: 2, SnapshotOp: 2,
		SnapshotChecksum: 99})
	d, _, err = Recover(allCopies(sb), [2][]byte{}, nil)
	if err != nil || !d.Recovering || !errors.Is(d.Cause, ErrStorageCorrupt) {
		t.Fatalf("missing snapshot: %+v %v, want recovering because of ErrStorageCorrupt", d, err)
	}
}

// Storage with no superblock (a wiped or never formatted disk) never starts: only the format step
// makes a replica.
func TestStorage_EmptyIsUnformatted(t *testing.T) {
	if _, _, err := Recover([SuperblockSlots][]byte{}, [2][]byte{}, nil); !errors.Is(err, ErrUnformatted) {
		t.Fatalf("empty storage: %v, want ErrUnformatted", err)
	}
	junk := [SuperblockSlots][]byte{make([]byte, SuperblockSize), {1, 2, 3}}
	if _, _, err := Recover(junk, [2][]byte{}, nil); !errors.Is(err, ErrUnformatted) {
		t.Fatalf("undecodable copies: %v, want ErrUnformatted", err)
	}
}

// The format step's superblock starts a member of a new cluster fresh, or a replacement in recovery;
// both keep the identity.
func TestStorage_FormatFreshOrRecovering(t *testing.T) {
	id := Identity{Cluster: 42, Node: 7, Replica: 2}
	d, _, err := Recover(allCopies(AppendSuperblock(nil, FormatSuperblock(id, false))), [2][]byte{}, nil)
	if err != nil || !d.Fresh || d.Recovering || d.Superblock.Identity != id {
		t.Fatalf("new member: %+v %v", d, err)
	}
	d, _, err = Recover(allCopies(AppendSuperblock(nil, FormatSuperblock(id, true))), [2][]byte{}, nil)
	if err != nil || d.Fresh || !d.Recovering || d.Cause != nil || d.Superblock.Identity != id {
		t.Fatalf("replacement: %+v %v", d, err)
	}
	if _, err := New(testConfig(3, 1), newCounterMachine(), d); !errors.Is(err, ErrIdentity) {
		t.Fatalf("opened as replica 1: %v, want ErrIdentity", err)
	}
	if _, err := New(testConfig(3, 2), newCounterMachine(), d); !errors.Is(err, ErrConfig) {
		t.Fatalf("recovering without a nonce: %v, want ErrConfig", err)
	}
}

// The newest copy that decodes whole is in force. A persist writes its records to the log and its
// superblock, with the same records inline, to every copy of its area, under one fsync: a power loss
// may keep any part of that. Here the previous persist (sequence 5, op 1) holds area 1 whole, and
// persist 6 (op 2) wrote area 0 and appended op 2 to the log. Whatever survived, the replica resumes
// at op 1 or op 2, never in recovery; three bad copies of a durable superblock never roll it back.
func TestStorage_NewestWholeCopyIsInForce(t *testing.T) {
	entries := chain(0, 0, 2, 1)
	rec1, rec2 := AppendLogRecord(nil, &entries[0]), AppendLogRecord(nil, &entries[1])
	old := AppendSuperblockCopy(nil, Superblock{Sequence: 5, View: 1, LogView: 1, Op: 1, Head: entries[0].Checksum},
		rec1)
	sb6 := Superblock{Sequence: 6, View: 1, LogView: 1, Op: 2, Head: entries[1].Checksum}
	cur := AppendSuperblockCopy(nil, sb6, rec2)
	bad := append([]byte(nil), cur...)
	bad[30] ^= 1
	badInline := append([]byte(nil), cur...)
	badInline[len(badInline)-3] ^= 1
	torn := cur[:len(cur)-10]
	older := AppendSuperblockCopy(nil, Superblock{Sequence: 4, View: 1, LogView: 1}, nil)
	area := func(a0, a1, a2, a3 []byte) [SuperblockSlots][]byte {
		return [SuperblockSlots][]byte{a0, a1, a2, a3, old, old, old, old}
	}
	both := append(append([]byte(nil), rec1...), rec2...)
	cases := []struct {
		name   string
		copies [SuperblockSlots][]byte
		log    []byte
		want   uint64 // sequence in force; 0: recovering
	}{
		{"all four current, log whole", area(cur, cur, cur, cur), both, 6},
		{"all four current, log append lost", area(cur, cur, cur, cur), rec1, 6},
		{"one current copy survived, log append lost", area(torn, cur, older, torn), rec1, 6},
		{"three bad copies of a durable superblock", area(bad, cur, badInline, torn), both, 6},
		{"no copy whole, log append kept", area(torn, badInline, older, torn), both, 5},
		{"no copy whole, log append lost", area(torn, torn, older, nil), rec1, 5},
		{"nothing of the persist survived", area(older, older, older, older), rec1, 5},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d, _, err := Recover(c.copies, [2][]byte{}, c.log)
			if err != nil {
				t.Fatal(err)
			}
			if d.Recovering || d.Superblock.Sequence != c.want {
				t.Fatalf("sequence %d recovering %v (%v), want %d in force", d.Superblock.Sequence, d.Recovering,
					d.Cause, c.want)
			}
			if d.Superblock.Sequence == 6 && len(c.log) == len(rec1) && string(d.Unlogged) != string(rec2) {
				t.Fatalf("unlogged %d bytes, want op 2's record (%d bytes) for the driver to append",
					len(d.Unlogged), len(rec2))
			}
			if len(c.log) == len(both) && d.Unlogged != nil {
				t.Fatalf("unlogged %d bytes with the log whole", len(d.Unlogged))
			}
			if got, _, err := DecodeSuperblockCopy(d.InForce); err != nil || got != d.Superblock {
				t.Fatalf("InForce holds %+v %v, not the copy in force", got, err)
			}
		})
	}
	// The broken variant the one-fsync layout makes possible: copies without the records inline. Their
	// superblock may survive a power loss that lost the log's append, and then it names an op that is
	// nowhere: the replica could only recover from the group.
	bare := AppendSuperblock(nil, sb6)
	d, _, err := Recover(area(bare, bare, bare, bare), [2][]byte{}, rec1)
	if err != nil || !d.Recovering || !errors.Is(d.Cause, ErrStorageCorrupt) {
		t.Fatalf("copies without inline records, log append lost: %+v %v, want recovering", d, err)
	}
}

func TestStorage_SuperblockRoundTripAndBadFieldsRefused(t *testing.T) {
	sb := Superblock{Sequence: 9, View: 4, LogView: 3, Op: 20, Head: 77, Commit: 18, SnapshotOp: 16, SnapshotChecksum: 5,
		Identity: Identity{Cluster: 1 << 60, Node: 300, Replica: 4}, Recovering: true}
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
	sb := AppendSuperblock(nil, Superblock{Sequence: 2, View: 1, LogView: 1, Op: 3, Head: entries[2].Checksum, Commit: 1})
	f.Add(sb, []byte{}, log)
	f.Add(AppendSuperblockCopy(nil, Superblock{Sequence: 3, View: 1, LogView: 1, Op: 3, Head: entries[2].Checksum,
		Commit: 1}, AppendLogRecord(nil, &entries[2])), []byte{}, log[:len(log)-4])
	f.Add([]byte{}, AppendSnapshotRecord(nil, []byte("x")), []byte{1, 2, 3})
	f.Add(AppendSuperblock(nil, FormatSuperblock(Identity{Cluster: 3, Node: 1}, true)), []byte{}, log)
	f.Fuzz(func(t *testing.T, sb, snap, log []byte) {
		// Two copies of sb; the third is sb's first half, the others missing.
		d, valid, err := Recover([SuperblockSlots][]byte{sb, sb, sb[:len(sb)/2]}, [2][]byte{snap, nil}, log)
		if err != nil {
			return
		}
		if valid > len(log) {
			t.Fatalf("valid %d past %d", valid, len(log))
		}
		if d.Fresh && d.Recovering {
			t.Fatal("fresh and recovering at once")
		}
		if !d.Fresh && !d.Recovering && !validChain(d.Superblock.SnapshotOp, 0, false, d.Entries) {
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
