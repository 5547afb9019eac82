package meta

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// richState builds a state with every kind of entry: nodes of both statuses, streams with and without
// starts, a pending and a withdrawn recovery, and a retired name.
func richState(t testing.TB) *fixture {
	t.Helper()
	f := newFixture(t).withCluster()
	f.mustApply(RegisterNode{Node: 9, Address: "h:9"})
	f.mustApply(DecommissionNode{Node: 9})
	a := f.createStream("alpha", 1, 2, 3)
	ra := f.recordRecovery(a, 2, 2, 3, 4)
	f.mustApply(CommitRecovery{Stream: a.ID, Incarnation: 1, Recovery: ra.ID, ExpectedEpoch: 1,
		Owner: 2, RecordTail: 300, CursorTail: 12, Sealed: []uint16{2, 3}})
	f.recordRecovery(a, 3, 3, 4)
	b := f.createStream("beta", 4, 5)
	rb := f.recordRecovery(b, 5, 5)
	f.mustApply(WithdrawRecovery{Stream: b.ID, Incarnation: 1, Recovery: rb.ID})
	g := f.createStream("gone", 6)
	f.mustApply(DeleteStream{Stream: g.ID, Incarnation: g.Incarnation})
	f.createStream("delta", 1)
	return f
}

func TestSnapshot_RestoreRoundTrip(t *testing.T) {
	f := richState(t)
	snap := f.s.AppendSnapshot([]byte("head"))[4:]
	restored := NewState()
	if err := restored.Restore(snap); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if got := restored.AppendSnapshot(nil); !bytes.Equal(got, snap) {
		t.Fatal("snapshot of the restored state differs")
	}
	if restored.Digest() != f.s.Digest() || restored.AppliedOp() != f.s.AppliedOp() {
		t.Fatal("restored digest or applied op differs")
	}
	if !reflect.DeepEqual(restored.Recoveries(), f.s.Recoveries()) ||
		!reflect.DeepEqual(restored.Streams(), f.s.Streams()) ||
		!reflect.DeepEqual(restored.Nodes(), f.s.Nodes()) {
		t.Fatal("restored read side differs")
	}
	// Both go on identically, including the retired name's id and incarnation.
	op := AppendOp(nil, CreateStream{Name: "gone", Copies: 1, Policy: Policy{Kind: PolicyMajorityDurable}, Owner: 2})
	r1 := f.s.applyOp(op, f.op+1)
	r2 := restored.applyOp(op, f.op+1)
	if !reflect.DeepEqual(r1, r2) || f.s.Digest() != restored.Digest() {
		t.Fatalf("diverged after restore: %s vs %s", r1, r2)
	}
	if st, _ := restored.StreamByName("gone"); st.Incarnation != 2 {
		t.Fatalf("recreated after restore: %+v", st)
	}
}

func TestSnapshot_EmptyStateRoundTrip(t *testing.T) {
	s := NewState()
	r := NewState()
	if err := r.Restore(s.AppendSnapshot(nil)); err != nil {
		t.Fatal(err)
	}
	if r.Digest() != s.Digest() {
		t.Fatal("digest differs")
	}
}

// The same ops at the same op numbers give byte-equal snapshots on two replicas.
func TestApply_TwoReplicasSameOpsSameState(t *testing.T) {
	a, b := richState(t), richState(t)
	if !bytes.Equal(a.s.AppendSnapshot(nil), b.s.AppendSnapshot(nil)) {
		t.Fatal("replicas that applied the same ops differ")
	}
}

func TestDigest_ChangesWithState(t *testing.T) {
	f := richState(t)
	before := f.s.Digest()
	f.mustApply(RegisterNode{Node: 30, Address: "h:30"})
	if f.s.Digest() == before {
		t.Fatal("digest did not change with a new node")
	}
}

// withChecksum returns body with a correct trailing checksum, so a test reaches the decoder.
func withChecksum(body []byte) []byte {
	out := append([]byte(nil), body...)
	return binary.LittleEndian.AppendUint64(out, xxhash.Sum64(body))
}

func TestRestore_RefusesBadSnapshotsAndKeepsState(t *testing.T) {
	f := richState(t)
	good := f.s.AppendSnapshot(nil)
	body := good[:len(good)-checksumBytes]

	flipped := append([]byte(nil), good...)
	flipped[20] ^= 1
	badVersion := append([]byte(nil), body...)
	badVersion[len(snapshotMagic)] = snapshotVersion + 1
	badMagic := append([]byte(nil), body...)
	badMagic[0] = 'X'

	cases := []struct {
		name string
		snap []byte
		want error
	}{
		{"empty", nil, ErrSnapshot},
		{"flipped bit", flipped, ErrSnapshotChecksum},
		{"wrong version", withChecksum(badVersion), ErrSnapshotVersion},
		{"wrong magic", withChecksum(badMagic), ErrSnapshot},
		{"trailing byte", withChecksum(append(append([]byte(nil), body...), 0)), ErrSnapshot},
		{"truncated body", withChecksum(body[:len(body)-3]), ErrSnapshot},
	}
	target := NewState()
	target.Apply(AppendOp(nil, RegisterNode{Node: 1, Address: "keep:1"}), 1, nil)
	before := target.AppendSnapshot(nil)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := target.Restore(c.snap)
			if !errors.Is(err, c.want) {
				t.Fatalf("Restore = %v, want %v", err, c.want)
			}
			if !bytes.Equal(target.AppendSnapshot(nil), before) {
				t.Fatal("a refused Restore changed the state")
			}
		})
	}
	for n := range len(body) {
		if err := target.Restore(withChecksum(body[:n])); err == nil {
			t.Fatalf("a snapshot cut to %d of %d bytes restored", n, len(body))
		}
	}
}

// A snapshot that decodes but breaks an invariant the ops keep is refused, not restored.
func TestRestore_RefusesInconsistentState(t *testing.T) {
	cases := []struct {
		name  string
		build func(s *State)
	}{
		{"assignment on an unregistered node", func(s *State) {
			s.streams[1].assignment.Owner = 40
		}},
		{"recovery threshold not from the assignment", func(s *State) {
			e := s.streams[1]
			e.hasRecovery = true
			e.recovery = Recovery{ID: 1, Stream: 1, FromEpoch: 1, ProposedOwner: 2, Members: []uint16{2},
				SealThreshold: 3, Reason: ReasonOperator, Status: RecoveryPending}
		}},
		{"history starts out of order", func(s *State) {
			e := s.streams[1]
			e.assignment.Epoch = 5
			e.starts = Starts{Version: 2, List: []HistoryStart{{Epoch: 3, Node: 1}, {Epoch: 2, Node: 1}}}
		}},
		{"history start past the epoch", func(s *State) {
			s.streams[1].starts = Starts{Version: 1, List: []HistoryStart{{Epoch: 2, Node: 1}}}
		}},
		{"stream id at next id", func(s *State) { s.nextStreamID = 1 }},
		{"retired name shares a live id", func(s *State) { s.retired["old"] = retiredName{id: 1, incarnation: 1} }},
		{"retired name is live", func(s *State) { s.retired["s"] = retiredName{id: 1, incarnation: 1} }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t).withCluster()
			f.createStream("s", 1, 2)
			c.build(f.s)
			snap := f.s.AppendSnapshot(nil)
			if err := NewState().Restore(snap); !errors.Is(err, ErrSnapshot) {
				t.Fatalf("Restore = %v, want ErrSnapshot", err)
			}
		})
	}
}
