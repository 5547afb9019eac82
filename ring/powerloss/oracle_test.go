package powerloss_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/ringstream/ringstream/ring"
	"github.com/ringstream/ringstream/ring/powerloss"
	"github.com/ringstream/ringstream/ring/ringtest"
)

// oracleOp is one step of a random single-file history, run and awaited alone, so that it completes
// before the next is queued and the oracle's order is the ring's.
type oracleOp struct {
	kind int // 0 write, 1 truncate, 2 fdatasync
	off  int64
	data []byte
	size int64
}

func (o oracleOp) String() string {
	switch o.kind {
	case 0:
		return fmt.Sprintf("write@%d+%d", o.off, len(o.data))
	case 1:
		return fmt.Sprintf("truncate(%d)", o.size)
	}
	return "fdatasync"
}

// applyOracle is the file after ops, computed independently of the package.
func applyOracle(b []byte, ops []oracleOp) []byte {
	b = append([]byte(nil), b...)
	for _, o := range ops {
		switch o.kind {
		case 0:
			if end := o.off + int64(len(o.data)); end > int64(len(b)) {
				b = append(b, make([]byte, end-int64(len(b)))...)
			}
			copy(b[o.off:], o.data)
		case 1:
			if o.size < int64(len(b)) {
				b = b[:o.size]
			} else {
				b = append(b, make([]byte, o.size-int64(len(b)))...)
			}
		}
	}
	return b
}

// allowed says whether got is a state a power loss may leave after ops: everything up to the last
// sync, then a prefix of the rest, whose last write may be cut short.
func allowed(got []byte, ops []oracleOp) bool {
	synced := 0
	for i, o := range ops {
		if o.kind == 2 {
			synced = i + 1
		}
	}
	for k := synced; k <= len(ops); k++ {
		if bytes.Equal(got, applyOracle(nil, ops[:k])) {
			return true
		}
		if k == synced || ops[k-1].kind != 0 {
			continue
		}
		w := ops[k-1]
		for m := 0; m < len(w.data); m++ {
			torn := append(ops[:k-1:k-1], oracleOp{kind: 0, off: w.off, data: w.data[:m]})
			if bytes.Equal(got, applyOracle(nil, torn)) {
				return true
			}
		}
	}
	return false
}

// TestRandomHistoriesMatchOracle runs random histories of writes, truncates and syncs on one file,
// then draws many power-loss states of each and checks every one against an oracle written apart
// from the model.
func TestRandomHistoriesMatchOracle(t *testing.T) {
	ringtest.ForEachBackend(t, func(t *testing.T, b ring.Backend) {
		rng := rand.New(rand.NewPCG(3, 4))
		for history := 0; history < 8; history++ {
			g := newRig(t, b, uint64(history))
			fd := g.durableFile("f", nil)
			var ops []oracleOp
			for i := 0; i < 2+rng.IntN(10); i++ {
				o := oracleOp{kind: rng.IntN(3)}
				tag := uint64(1000 + i)
				switch o.kind {
				case 0:
					o.off = int64(rng.IntN(3000))
					o.data = bytes.Repeat([]byte{byte('a' + i)}, 1+rng.IntN(1500))
					g.q(g.r.Write(g, tag, fd, o.data, o.off, 0))
				case 1:
					o.size = int64(rng.IntN(4000))
					g.q(g.r.Ftruncate(g, tag, fd, o.size, 0))
				case 2:
					g.q(g.r.Fsync(g, tag, fd, true, 0))
				}
				g.run()
				ops = append(ops, o)
			}
			g.r.Close()
			drawCopies(t, g, 150, func(rep powerloss.Report, root string) {
				got, err := os.ReadFile(filepath.Join(root, "f"))
				if err != nil {
					t.Fatal(err)
				}
				if !allowed(got, ops) {
					t.Fatalf("%v: history %v left %d bytes no power loss may leave", rep, ops, len(got))
				}
			})
		}
	})
}
