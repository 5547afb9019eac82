package ring

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// planOp is one operation of a random submission: what it is and whether it links to the next.
type planOp struct {
	kind int
	link bool
}

// The kinds of operation a plan draws from. Each has a fixed, deterministic result on a file that
// starts with planFileSize bytes, so the io_uring kernel and the fallback must agree on every one.
const (
	planNop = iota
	planWrite
	planWriteBadFd
	planReadFull
	planReadShort // past the end of the file: fewer bytes than asked, which fails a link
	planFsync
	planFsyncBadFd
	planTimeout // fires with -ETIME, which fails a link as an error does
	planKinds
)

const planFileSize = 8192

// TestLinkChainsMatchKernel draws 200 random submissions of linked and unlinked operations, runs each
// on the io_uring backend and on the fallback, and requires the same result for every operation.
// The kernel is the reference for the link rules the fallback imitates: a failure, a short read or
// write, or a fired timeout cancels the rest of its chain, and a chain ends at the first operation
// without Link.
func TestLinkChainsMatchKernel(t *testing.T) {
	lockThread(t)
	kernel := iouringOrSkip(t, 32)
	fallback := testRing(t, newFallbackRing, 32)
	rng := rand.New(rand.NewPCG(7, 11))
	for round := 0; round < 200; round++ {
		plan := make([]planOp, 1+rng.IntN(12))
		for i := range plan {
			plan[i] = planOp{kind: rng.IntN(planKinds), link: rng.IntN(2) == 0}
		}
		want := runPlan(t, kernel, plan)
		got := runPlan(t, fallback, plan)
		for i := range plan {
			if got[i] != want[i] {
				t.Fatalf("round %d, plan %v: op %d: fallback res %d, kernel res %d\nkernel   %v\nfallback %v",
					round, plan, i, got[i], want[i], want, got)
			}
		}
	}
}

// runPlan runs plan as one submission on r against a fresh file and returns each op's result.
func runPlan(t *testing.T, r Ring, plan []planOp) []int32 {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(t.TempDir(), "plan"), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(make([]byte, planFileSize)); err != nil {
		t.Fatal(err)
	}
	fd, bad := int(f.Fd()), closedFd(t)
	buf := make([]byte, 512)
	rec := &recorder{}
	for i, op := range plan {
		var fl Flags
		if op.link {
			fl = Link
		}
		tag := uint64(i)
		switch op.kind {
		case planNop:
			err = r.Nop(rec, tag, fl)
		case planWrite:
			err = r.Write(rec, tag, fd, buf, int64(i)*512, fl)
		case planWriteBadFd:
			err = r.Write(rec, tag, bad, buf, 0, fl)
		case planReadFull:
			err = r.Read(rec, tag, fd, make([]byte, 512), 0, fl)
		case planReadShort:
			err = r.Read(rec, tag, fd, make([]byte, 512), planFileSize-100, fl)
		case planFsync:
			err = r.Fsync(rec, tag, fd, true, fl)
		case planFsyncBadFd:
			err = r.Fsync(rec, tag, bad, true, fl)
		case planTimeout:
			err = r.Timeout(rec, tag, 100*time.Microsecond, fl)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	drive(t, r, rec, len(plan))
	res := make([]int32, len(plan))
	for _, c := range rec.got {
		res[c.Tag] = c.Res
	}
	return res
}

func (p planOp) String() string {
	names := [...]string{"nop", "write", "write(badfd)", "read", "read(short)", "fsync", "fsync(badfd)", "timeout"}
	if p.link {
		return fmt.Sprintf("%s+link", names[p.kind])
	}
	return names[p.kind]
}
