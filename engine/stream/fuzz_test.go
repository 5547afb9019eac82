package stream_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ringstream/ringstream/wire"
)

// FuzzFollowerPrepare feeds a follower prepares built from arbitrary bytes. The follower must never
// panic; what it appends must be whole batches that decode and continue its log exactly; and a
// prepare it does not append from leaves its tails unchanged. The seed corpus is in
// testdata/fuzz/FuzzFollowerPrepare, written by TestWriteFuzzSeeds (STREAM_WRITE_FUZZ_SEEDS=1).
func FuzzFollowerPrepare(f *testing.F) {
	f.Fuzz(func(t *testing.T, batches []byte, base uint64, prev uint32, count uint32, log uint8) {
		n := followerAt(t)
		m := prepareMsg(base, prev, count)
		m.Prepare.Batches = batches
		m.Prepare.Log = wire.LogKind(1 + log%2)
		before, _ := n.c.Tails()
		n.c.Step(&m)
		n.c.CheckInvariants()
		fx := n.c.Ready()
		after, _ := n.c.Tails()
		next := before
		for _, a := range fx.Appends {
			if a.Log != wire.LogRecords {
				continue
			}
			h, size, err := decode(a.Encoded)
			if err != nil || size != len(a.Encoded) || h.BaseOffset != next {
				t.Fatalf("appended a batch that does not continue the log at %d: %v", next, err)
			}
			next = h.End()
		}
		if next != after {
			t.Fatalf("tail %d, appends end at %d", after, next)
		}
	})
}

// fuzzSeeds are the committed seeds: good prepares and each refusal of TestLogMatching_Refusals.
func fuzzSeeds() [][]any {
	good := slices.Concat(batch(10, 2, 2, 30), batch(12, 3, 2, 30))
	corrupt := batch(10, 2, 2, 30)
	corrupt[len(corrupt)-1] ^= 1
	return [][]any{
		{good, uint64(10), uint32(2), uint32(5), uint8(0)},
		{batch(8, 2, 2, 30), uint64(8), uint32(1), uint32(2), uint8(0)},
		{[]byte{}, uint64(10), uint32(2), uint32(0), uint8(0)},
		{batch(10, 2, 2, 30), uint64(10), uint32(1), uint32(2), uint8(0)},
		{batch(12, 2, 2, 30), uint64(12), uint32(2), uint32(2), uint8(0)},
		{corrupt, uint64(10), uint32(2), uint32(2), uint8(0)},
		{good[:100], uint64(10), uint32(2), uint32(5), uint8(0)},
		{batch(10, 1, 2, 64<<10+1), uint64(10), uint32(2), uint32(1), uint8(0)},
		{slices.Concat(batch(8, 2, 1, 30), batch(10, 2, 1, 30)), uint64(8), uint32(1), uint32(4), uint8(0)},
		{batch(0, 1, 2, 10), uint64(0), uint32(0), uint32(1), uint8(1)},
	}
}

func TestWriteFuzzSeeds(t *testing.T) {
	if os.Getenv("STREAM_WRITE_FUZZ_SEEDS") != "1" {
		t.Skip("set STREAM_WRITE_FUZZ_SEEDS=1 to rewrite testdata/fuzz")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzFollowerPrepare")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for i, seed := range fuzzSeeds() {
		var b strings.Builder
		b.WriteString("go test fuzz v1\n")
		for _, v := range seed {
			switch v := v.(type) {
			case []byte:
				fmt.Fprintf(&b, "[]byte(%q)\n", v)
			default:
				fmt.Fprintf(&b, "%T(%v)\n", v, v)
			}
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed-%02d", i)), []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
