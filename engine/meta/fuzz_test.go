package meta

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ringstream/ringstream/wire"
)

var writeCorpus = flag.Bool("meta.write-corpus", false, "write the fuzz seed corpus to testdata/fuzz")

// FuzzDecodeOp: decoding never panics, and an op that decodes encodes back to the same bytes (the
// encoding is canonical, so replicas cannot read one op two ways).
func FuzzDecodeOp(f *testing.F) {
	for _, seed := range opSeeds() {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		op, err := DecodeOp(b)
		if err != nil {
			return
		}
		if again := AppendOp(nil, op); !bytes.Equal(again, b) {
			t.Fatalf("decoded %#v re-encodes as %x, input %x", op, again, b)
		}
	})
}

// FuzzApply applies a sequence of ops (each prefixed with its u8 length) to a populated state: Apply
// never panics, every invariant holds after each op, a refused op leaves the digest unchanged, and the
// final state survives a snapshot round trip.
func FuzzApply(f *testing.F) {
	for _, seed := range applySeeds() {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		fx := richState(t)
		for len(in) > 0 {
			n := int(in[0])
			in = in[1:]
			n = min(n, len(in))
			before := fx.s.Digest()
			fx.op++
			r := fx.s.applyOp(in[:n], fx.op)
			in = in[n:]
			if err := fx.s.validate(); err != nil {
				t.Fatalf("after %s: %v", r, err)
			}
			if !r.OK() && fx.s.Digest() != before {
				t.Fatalf("refused op (%s) changed the state", r)
			}
		}
		snap := fx.s.AppendSnapshot(nil)
		restored := NewState()
		if err := restored.Restore(snap); err != nil {
			t.Fatalf("Restore of a reachable state: %v", err)
		}
		if !bytes.Equal(restored.AppendSnapshot(nil), snap) {
			t.Fatal("snapshot round trip differs")
		}
	})
}

// FuzzApplyOnReplicas is issue 21's target for metadata ops applied on a replica: arbitrary op bytes
// (each prefixed with its u8 length, as FuzzApply) are applied to two replicas of one state, one that
// applied the history itself and one restored from its snapshot, the way a lagging replica catches up.
// Apply never panics on the bytes, and it is deterministic: both replicas return byte-identical results
// and hold the same digest after every op, so a committed op a replica cannot carry out is refused the
// same way on every replica.
func FuzzApplyOnReplicas(f *testing.F) {
	for _, seed := range replicaSeeds() {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		a := richState(t)
		b := NewState()
		if err := b.Restore(a.s.AppendSnapshot(nil)); err != nil {
			t.Fatalf("restore: %v", err)
		}
		op := a.op
		for len(in) > 0 {
			n := min(int(in[0]), len(in)-1)
			bytesOp := in[1 : 1+n]
			in = in[1+n:]
			op++
			ra := a.s.Apply(bytesOp, op, nil)
			rb := b.Apply(bytesOp, op, nil)
			if !bytes.Equal(ra, rb) {
				t.Fatalf("op %d (%x): replicas answered %x and %x", op, bytesOp, ra, rb)
			}
			if a.s.Digest() != b.Digest() {
				t.Fatalf("op %d (%x): replicas diverged", op, bytesOp)
			}
			if err := a.s.validate(); err != nil {
				t.Fatalf("op %d (%x): %v", op, bytesOp, err)
			}
		}
	})
}

// replicaSeeds are FuzzApply's sequences and committed ops that break a rule on their own: names that
// crashed the metadata primary before the rules were one (issue 21: 'orders/eu', 'a b/c', 'naïve'),
// ".", a copy count of 0 and of 8, a count policy without a count. They are encoded by hand, since
// EncodeOp refuses them: they stand for bytes another build or a broken peer put in the log.
func replicaSeeds() [][]byte {
	raw := func(name string, copies uint8, policy Policy) []byte {
		b := []byte{opVersion, uint8(OpCreateStream)}
		b = appendStr(b, name)
		b = append(b, copies)
		b = appendPolicy(b, policy)
		b = append(b, 1, 0) // owner 1
		b = appendNodes(b, []uint16{2, 3})
		b = appendPolicy(b, Policy{Kind: PolicyMajorityDurable})
		return append([]byte{byte(len(b))}, b...)
	}
	majority := Policy{Kind: PolicyMajorityDurable}
	seeds := applySeeds()
	for _, name := range []string{"orders/eu", "a b/c", "naïve", ".", "..", "ok-name"} {
		seeds = append(seeds, raw(name, 3, majority))
	}
	seeds = append(seeds, raw("zero", 0, majority), raw("eight", 8, majority),
		raw("nocount", 3, Policy{Kind: PolicyCountDurable}))
	return seeds
}

// TestBadNamesRefusedOnEveryReplica: a committed create whose name breaks wire.StreamNameRule is
// refused as malformed, with the rule in the result, and changes nothing on any replica.
func TestBadNamesRefusedOnEveryReplica(t *testing.T) {
	for _, seed := range replicaSeeds()[len(applySeeds()):] {
		fx := richState(t)
		before := fx.s.Digest()
		fx.op++
		r := fx.s.applyOp(seed[1:], fx.op)
		good := bytes.Contains(seed, []byte("ok-name"))
		switch {
		case good && !r.OK():
			t.Errorf("%q: refused: %s", seed, r)
		case !good && (r.Code != ResultMalformed || fx.s.Digest() != before):
			t.Errorf("%q: got %s, want malformed and no change", seed, r)
		}
	}
	if err := ValidateStreamName("orders/eu"); !errors.Is(err, ErrOpInvalid) || wire.CodeOf(err) != wire.CodeBadStreamName {
		t.Errorf("ValidateStreamName: %v", err)
	}
	if _, err := EncodeOp(nil, CreateStream{Name: "a b/c", Copies: 1, Policy: Policy{Kind: PolicyMajorityDurable},
		Owner: 1}); !errors.Is(err, ErrOpInvalid) || !strings.Contains(err.Error(), wire.StreamNameRule) {
		t.Errorf("EncodeOp of a bad name: %v", err)
	}
}

// FuzzRestore: Restore never panics on raw bytes, nor on arbitrary bodies given a correct checksum
// (which reaches the decoder); a snapshot it accepts re-encodes to the same bytes.
func FuzzRestore(f *testing.F) {
	for _, seed := range restoreSeeds(f) {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, snap := range [][]byte{b, withChecksum(b)} {
			s := NewState()
			if err := s.Restore(snap); err != nil {
				continue
			}
			if again := s.AppendSnapshot(nil); !bytes.Equal(again, snap) {
				t.Fatalf("restored snapshot re-encodes differently")
			}
		}
	})
}

// FuzzDecodeResult: decoding a reply never panics, and what decodes encodes back to the same bytes.
func FuzzDecodeResult(f *testing.F) {
	f.Add(AppendResult(nil, Result{Code: ResultOK, Message: "stream 1 created"}))
	f.Add(AppendResult(nil, Result{Code: ResultTooFewSealed}))
	f.Add(AppendResult(nil, Result{Code: ResultOK, Message: "1 of 2", Entries: []EntryResult{
		{Stream: 1, Code: ResultOK}, {Stream: 9, Code: ResultEpochMismatch}}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeResult(b)
		if err != nil {
			return
		}
		if again := AppendResult(nil, r); !bytes.Equal(again, b) {
			t.Fatalf("result %s re-encodes as %x, input %x", r, again, b)
		}
	})
}

func opSeeds() [][]byte {
	var seeds [][]byte
	for _, op := range sampleOps() {
		seeds = append(seeds, AppendOp(nil, op))
	}
	return seeds
}

// applySeeds are op sequences against richState: ops that succeed and ops that hit each guard.
func applySeeds() [][]byte {
	majority := Policy{Kind: PolicyMajorityDurable}
	seq := func(ops ...Op) []byte {
		var out []byte
		for _, op := range ops {
			b := AppendOp(nil, op)
			out = append(out, byte(len(b)))
			out = append(out, b...)
		}
		return out
	}
	// richState: stream 1 "alpha" at epoch 2 (owner 2, followers 3 4) with pending recovery at op 12;
	// stream 2 "beta" with withdrawn recovery at op 14; stream 3 "gone" deleted; stream 4 "delta".
	return [][]byte{
		seq(RegisterNode{Node: 20, Address: "h:20"}, DecommissionNode{Node: 20}),
		seq(CommitRecovery{Stream: 1, Incarnation: 1, Recovery: 12, ExpectedEpoch: 2, ExpectedStartsVersion: 1,
			Owner: 3, RecordTail: 300, Sealed: []uint16{3, 4}}),
		seq(AcceptOwnerLoss{Stream: 1, Incarnation: 1, Recovery: 12, Owner: 4}),
		seq(RecordRecovery{Stream: 2, Incarnation: 1, ExpectedEpoch: 1, Replaces: 14, ProposedOwner: 5,
			Members: []uint16{5, 6}, Policy: majority, Reason: ReasonOperator}),
		seq(SetAssignment{Stream: 4, Incarnation: 1, ExpectedEpoch: 1, Owner: 1, Followers: []uint16{2},
			Policy: Policy{Kind: PolicyCountDurable, Count: 1}}),
		seq(CreateStream{Name: "gone", Copies: 2, Policy: majority, Owner: 1, Followers: []uint16{3},
			Stamped: majority}, DeleteStream{Stream: 3, Incarnation: 2}),
		seq(WithdrawRecovery{Stream: 1, Incarnation: 1, Recovery: 12}),
		// Batches: one entry takes effect and one is refused by its guard, in each order.
		seq(RecordRecoveries{Entries: []RecordRecovery{
			{Stream: 2, Incarnation: 1, ExpectedEpoch: 1, Replaces: 14, ProposedOwner: 5, Members: []uint16{5, 6},
				Policy: majority, Reason: ReasonOperator},
			{Stream: 4, Incarnation: 1, ExpectedEpoch: 9, ProposedOwner: 2, Members: []uint16{2},
				Policy: majority, Reason: ReasonLivenessExpiry}}}),
		seq(CommitRecoveries{Entries: []CommitRecovery{
			{Stream: 1, Incarnation: 1, Recovery: 12, ExpectedEpoch: 2, ExpectedStartsVersion: 1,
				Owner: 3, RecordTail: 300, Sealed: []uint16{3, 4}},
			{Stream: 2, Incarnation: 1, Recovery: 14, ExpectedEpoch: 1, Owner: 1, Sealed: []uint16{1}}}}),
		seq(SetAssignments{Entries: []SetAssignment{
			{Stream: 1, Incarnation: 1, ExpectedEpoch: 2, Owner: 2, Followers: []uint16{3, 4}, Policy: majority},
			{Stream: 4, Incarnation: 1, ExpectedEpoch: 1, Owner: 1, Followers: []uint16{2},
				Policy: Policy{Kind: PolicyCountDurable, Count: 1}}}}),
		{3, 1, 200, 0},
	}
}

func restoreSeeds(tb testing.TB) [][]byte {
	fx := richState(tb)
	full := fx.s.AppendSnapshot(nil)
	return [][]byte{full, full[:len(full)-checksumBytes], NewState().AppendSnapshot(nil)}
}

// TestWriteFuzzCorpus writes the seeds above as the committed corpus under testdata/fuzz when run
// with -meta.write-corpus; otherwise it checks that every seed is in the corpus.
func TestWriteFuzzCorpus(t *testing.T) {
	sets := map[string][][]byte{
		"FuzzDecodeOp":        opSeeds(),
		"FuzzApply":           applySeeds(),
		"FuzzRestore":         restoreSeeds(t),
		"FuzzApplyOnReplicas": replicaSeeds(),
	}
	for _, name := range sortedKeys(sets) {
		dir := filepath.Join("testdata", "fuzz", name)
		for _, seed := range sets[name] {
			sum := sha256.Sum256(seed)
			path := filepath.Join(dir, "seed-"+hex.EncodeToString(sum[:8]))
			content := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", seed)
			if *writeCorpus {
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
				continue
			}
			got, err := os.ReadFile(path)
			if err != nil || string(got) != content {
				t.Fatalf("seed corpus out of date at %s (run go test -run TestWriteFuzzCorpus -meta.write-corpus): %v",
					path, err)
			}
		}
	}
}
