package segment

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/ringstream/ringstream/ring"
)

// BenchmarkCopiesOpenSealCut: 100 copies on one shard (one ring, one Jobs) each opened (with
// recovery), given 10 records, sealed, cut back 5 records and closed. "at-once" runs each phase
// for all 100 copies interleaved on the ring; "one-by-one" (the baseline) takes each copy through
// every phase before starting the next. One op is one cycle of all 100 copies.
func BenchmarkCopiesOpenSealCut(b *testing.B) {
	const n = 100
	for _, mode := range []string{"at-once", "one-by-one"} {
		b.Run(mode, func(b *testing.B) {
			benchBackends(b, func(b *testing.B, backend ring.Backend) {
				e := benchEnv(b, backend)
				lp := newLoop(b, e.r)
				root := e.dir + "s"
				if err := os.MkdirAll(root, 0o755); err != nil {
					b.Fatal(err)
				}
				cc := &copyCycle{b: b, lp: lp, e: e, copies: make([]*Copy, n)}
				for i := range cc.copies {
					cc.dirs = append(cc.dirs, filepath.Join(root, fmt.Sprint(i)))
				}
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					epoch := uint64(i + 1)
					if mode == "at-once" {
						cc.phases(0, n, epoch)
					} else {
						for k := 0; k < n; k++ {
							cc.phases(k, k+1, epoch)
						}
					}
				}
			})
		})
	}
}

// copyCycle takes copies [from, to) through open, append, seal, cut and close, each phase
// started for all of them before waiting for any.
type copyCycle struct {
	b      *testing.B
	lp     *loop
	e      *env
	dirs   []string
	copies []*Copy
}

func (cc *copyCycle) phases(from, to int, epoch uint64) {
	ev := cc.e.ev
	for k := from; k < to; k++ {
		c, err := Open(cc.lp.js, cc.lp.g, cc.dirs[k], cc.e.cfg, ev, uint64(k))
		if err != nil {
			cc.b.Fatal(err)
		}
		cc.copies[k] = c
	}
	cc.wait(OpOpen, to-from)
	for k := from; k < to; k++ {
		for j := 0; j < 10; j++ {
			if _, err := cc.copies[k].Append(0, &BatchHeader{RecordCount: 1, Epoch: epoch}, []byte("record")); err != nil {
				cc.b.Fatal(err)
			}
		}
	}
	cc.lp.until("appends", func() bool {
		for _, c := range cc.copies[from:to] {
			if c.Records().DurableTail() != c.Records().NextOffset() {
				return false
			}
		}
		return true
	})
	ev.seals = ev.seals[:0]
	for k := from; k < to; k++ {
		for err := cc.copies[k].Seal(uint64(k), epoch); err != nil; err = cc.copies[k].Seal(uint64(k), epoch) {
			if !errors.Is(err, ErrBackpressure) {
				cc.b.Fatal(err)
			}
			cc.lp.turn()
		}
	}
	cc.lp.until("seals", func() bool { return len(ev.seals) == to-from })
	for k := from; k < to; k++ {
		tail, _ := cc.copies[k].Tails()
		if err := cc.copies[k].Cut(uint64(k), tail-5, 0); err != nil {
			cc.b.Fatal(err)
		}
	}
	cc.wait(OpCut, to-from)
	for k := from; k < to; k++ {
		if err := cc.copies[k].Close(uint64(k)); err != nil {
			cc.b.Fatal(err)
		}
	}
	cc.wait(OpClose, to-from)
}

func (cc *copyCycle) wait(op Op, n int) {
	ev := cc.e.ev
	cc.lp.until(op.String(), func() bool { return len(ev.done) == n })
	for _, d := range ev.done {
		if d.Op != op || d.Err != nil {
			cc.b.Fatalf("%s %d: %v", d.Op, d.Tag, d.Err)
		}
	}
	ev.done = ev.done[:0]
}
