package powerloss_test

import (
	"bytes"
	"testing"

	"github.com/ringstream/ringstream/ring"
	"github.com/ringstream/ringstream/ring/ringtest"
)

// TestWritesInAnyOrder: two unsynced writes to one file, the first queued and completed before the
// second. By default a power loss keeps a prefix of them, so the second never survives without the
// first; with WritesInAnyOrder it does in some seeds (and the report says the files kept a subset),
// while a synced write still always survives.
func TestWritesInAnyOrder(t *testing.T) {
	ringtest.ForEachBackend(t, func(t *testing.T, b ring.Backend) {
		for _, anyOrder := range []bool{false, true} {
			secondAlone := 0
			for seed := uint64(1); seed <= seeds; seed++ {
				g := newRig(t, b, seed)
				if anyOrder {
					g.disk.WritesInAnyOrder()
				}
				fd := g.durableFile("f", pattern('o', 8192))
				g.q(g.r.Write(g, 1, fd, pattern('1', 512), 0, 0))
				g.run()
				g.q(g.r.Write(g, 2, fd, pattern('2', 512), 4096, 0))
				g.run()
				rep := g.crash()
				got, ok := g.read("f")
				if !ok || len(got) != 8192 {
					t.Fatalf("%v: file lost or resized", rep)
				}
				first, second := bytes.Equal(got[:512], pattern('1', 512)), bytes.Equal(got[4096:4608], pattern('2', 512))
				if !bytes.Equal(got[512:4096], pattern('o', 3584)) || !bytes.Equal(got[4608:], pattern('o', 3584)) {
					t.Fatalf("%v: synced bytes outside the writes changed", rep)
				}
				if second && !first {
					secondAlone++
					if !anyOrder || !rep.FileSubset {
						t.Fatalf("%v: the second write survived without the first in the prefix model", rep)
					}
				}
			}
			if anyOrder && secondAlone == 0 {
				t.Fatalf("any order: the second write never survived alone in %d seeds", seeds)
			}
		}
	})
}
