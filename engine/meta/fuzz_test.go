package meta

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
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
		"FuzzDecodeOp": opSeeds(),
		"FuzzApply":    applySeeds(),
		"FuzzRestore":  restoreSeeds(t),
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
