package clientreq

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ringstream/ringstream/engine/meta"
)

// chunkOps cuts a batched create into ops of at most meta.BatchEntriesMax entries and
// batchOpBytesMax encoded bytes, in order and each entry once, so every op persists inline with one
// fsync whatever the names' lengths: 250 short names make ops of 100, 100, 50; 60 names of 255 bytes
// make ops under 7 KiB.
func TestChunkOps_EntriesAndBytesBounded(t *testing.T) {
	policy := meta.Policy{Kind: meta.PolicyMajorityDurable}
	entries := func(n int, name func(i int) string) []meta.CreateStream {
		var out []meta.CreateStream
		for i := range n {
			out = append(out, meta.CreateStream{Name: name(i), Copies: 3, Policy: policy, Owner: 1,
				Followers: []uint16{2, 3}, Stamped: policy})
		}
		return out
	}
	batch := func(es []meta.CreateStream) meta.Op { return meta.CreateStreams{Entries: es} }
	check := func(es []meta.CreateStream, wantOps []int) {
		t.Helper()
		ops := chunkOps(es, batch)
		var sizes []int
		next := 0
		for _, op := range ops {
			b, err := meta.EncodeOp(nil, op)
			if err != nil {
				t.Fatal(err)
			}
			cs := op.(meta.CreateStreams).Entries
			if len(b) > batchOpBytesMax+64 || len(cs) > meta.BatchEntriesMax {
				t.Fatalf("an op of %d entries and %d bytes", len(cs), len(b))
			}
			for _, e := range cs {
				if e.Name != es[next].Name {
					t.Fatalf("entry %q where %q was next", e.Name, es[next].Name)
				}
				next++
			}
			sizes = append(sizes, len(cs))
		}
		if next != len(es) || (wantOps != nil && fmt.Sprint(sizes) != fmt.Sprint(wantOps)) {
			t.Fatalf("ops of %v entries (%d of %d entries), want %v", sizes, next, len(es), wantOps)
		}
	}
	check(entries(250, func(i int) string { return fmt.Sprintf("s.%03d", i) }), []int{100, 100, 50})
	check(entries(60, func(i int) string { return fmt.Sprintf("%03d", i) + strings.Repeat("n", 252) }), nil)
	if ops := chunkOps(entries(60, func(i int) string { return fmt.Sprintf("%03d", i) + strings.Repeat("n", 252) }), batch); len(ops) < 3 {
		t.Fatalf("60 names of 255 bytes in %d ops: the byte bound cut nothing", len(ops))
	}
}
