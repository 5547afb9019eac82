package segment

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ringstream/ringstream/ring"
	"github.com/ringstream/ringstream/ring/powerloss"
)

// epochCopy opens a copy that followed epoch 1 from 0/0, epoch 3 from 10/4 and epoch 4 from 20/8,
// with 30 records and 12 cursor events, all durable.
func epochCopy(e *env) *Copy {
	e.t.Helper()
	c := e.open()
	for _, ep := range []EpochEntry{{1, 0, 0}, {3, 10, 4}, {4, 20, 8}} {
		if err := c.AppendEpochSync(ep); err != nil {
			e.t.Fatal(err)
		}
		e.appendBatches(c, 10, 1, 50, ep.Epoch)
		for i := range 4 {
			e.commitCursor(c, fmt.Sprintf("c%d", i), c.Records().NextOffset()-1)
		}
	}
	e.syncRecords(c)
	e.syncCursors(c)
	if c.Cursors().DurableTail() != 12 {
		e.t.Fatalf("cursor tail %d, want 12", c.Cursors().DurableTail())
	}
	return c
}

// A cut on the cursor side only (the failover simulator's seed 11829): the record log keeps epoch 4,
// so its entry stays with its cursor start clamped to the cut. Were it dropped, the copy's own epoch
// would fall back to 3, and the next meta.CutPoint would take the lower starts recorded after epoch 3
// and cut confirmed records. The clamped entry survives a reopen, and the next role change, which
// starts at the cut cursor tail, follows it.
func TestEpochs_CursorOnlyCutKeepsTheEntry(t *testing.T) {
	backends(t, func(t *testing.T, e *env) {
		c := epochCopy(e)
		if err := c.CutSync(30, 6); err != nil {
			t.Fatal(err)
		}
		want := []EpochEntry{{1, 0, 0}, {3, 10, 4}, {4, 20, 6}}
		if got := c.Epochs(); !slices.Equal(got, want) {
			t.Fatalf("epochs after the cursor cut %+v, want %+v", got, want)
		}
		e.close(c)
		c = e.open()
		defer e.close(c)
		if got := c.Epochs(); !slices.Equal(got, want) {
			t.Fatalf("epochs after reopen %+v, want %+v", got, want)
		}
		if last, _ := c.LastEpoch(); last.Epoch != 4 {
			t.Fatalf("own epoch %d after a cursor-only cut, want 4", last.Epoch)
		}
		next := EpochEntry{Epoch: 5, RecordStart: 30, CursorStart: c.Cursors().DurableTail()}
		if err := c.AppendEpochSync(next); err != nil {
			t.Fatalf("next role change at the cut tails: %v", err)
		}
		e.close(c)
		c = e.open()
		if got := c.Epochs(); len(got) != 4 || got[3] != next {
			t.Fatalf("epochs after an append to the rewritten file %+v", got)
		}
	})
}

// A cut on both sides: entries whose record start lies past the record cut go, and the kept ones
// whose cursor start lies past the cursor cut are clamped to it.
func TestEpochs_CutDropsPastRecordsAndClampsCursors(t *testing.T) {
	backends(t, func(t *testing.T, e *env) {
		c := epochCopy(e)
		if err := c.CutSync(15, 2); err != nil {
			t.Fatal(err)
		}
		want := []EpochEntry{{1, 0, 0}, {3, 10, 2}}
		if got := c.Epochs(); !slices.Equal(got, want) {
			t.Fatalf("epochs after the cut %+v, want %+v", got, want)
		}
		e.close(c)
		c = e.open()
		defer e.close(c)
		if got := c.Epochs(); !slices.Equal(got, want) {
			t.Fatalf("epochs after reopen %+v, want %+v", got, want)
		}
	})
}

// A crash after the logs were cut and before the epochs file was rewritten leaves entries whose
// cursor start lies past the cursor tail; the broker repeats the cut, which finishes it.
func TestEpochs_RepeatedCutClampsAfterACrash(t *testing.T) {
	backends(t, func(t *testing.T, e *env) {
		c := epochCopy(e)
		if err := c.cursors.cut(6); err != nil {
			t.Fatal(err)
		}
		e.close(c)
		c = e.open()
		defer e.close(c)
		if got := c.Epochs(); got[2].CursorStart != 8 {
			t.Fatalf("epochs before the repeated cut %+v", got)
		}
		if err := c.CutSync(30, 6); err != nil {
			t.Fatal(err)
		}
		want := []EpochEntry{{1, 0, 0}, {3, 10, 4}, {4, 20, 6}}
		if got := c.Epochs(); !slices.Equal(got, want) {
			t.Fatalf("epochs after the repeated cut %+v, want %+v", got, want)
		}
	})
}

// A power loss during or after the rewrite a clamp makes leaves either the old entries or the clamped
// ones, never a corrupt or shortened file: the temporary file is fsynced before the rename, and the
// rename is made durable before the cut reports success. Each case stops the rewrite at one step (an
// injected EIO) or not at all, then opens many power-loss states drawn from the recorded run.
func TestEpochs_ClampSurvivesPowerLoss(t *testing.T) {
	before := []EpochEntry{{1, 0, 0}, {3, 10, 4}, {4, 20, 8}}
	after := []EpochEntry{{1, 0, 0}, {3, 10, 4}, {4, 20, 6}}
	for _, tc := range []struct {
		name  string
		fault *powerloss.Fault
		want  [][]EpochEntry // the states a power loss may leave
	}{
		{"temporary file write fails", &powerloss.Fault{Op: ring.OpWrite, Path: "copy/epochs.tmp", Errno: unix.EIO},
			[][]EpochEntry{before}},
		{"temporary file fsync fails", &powerloss.Fault{Op: ring.OpFsync, Path: "copy/epochs.tmp", Errno: unix.EIO},
			[][]EpochEntry{before}},
		{"directory fsync after the rename fails", &powerloss.Fault{Op: ring.OpFsync, Path: "copy", Nth: 2, Errno: unix.EIO},
			[][]EpochEntry{before, after}},
		{"done", nil, [][]EpochEntry{after}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lockThread(t)
			e := newEnv(t, ring.Config{Backend: ring.BackendFallback, Entries: 256})
			base := plRoot(t)
			root := filepath.Join(base, "disk")
			if err := os.Mkdir(root, 0o755); err != nil {
				t.Fatal(err)
			}
			disk := powerloss.NewDisk(root, 1)
			plain := e.r
			e.r, e.dir = disk.Wrap(plain), filepath.Join(root, "copy")
			c := epochCopy(e)
			if err := c.cursors.cut(6); err != nil {
				t.Fatal(err)
			}
			if tc.fault != nil {
				disk.Inject(*tc.fault)
			}
			err := c.epochs.cut(c.records.durable, c.cursors.durable)
			if (err != nil) != (tc.fault != nil) {
				t.Fatalf("epochs cut: %v with fault %v", err, tc.fault)
			}
			e.close(c)
			e.r = plain
			for seed := uint64(1); seed <= 30; seed++ {
				e.dir = filepath.Join(base, fmt.Sprint("loss-", seed))
				rep, err := disk.PowerLossCopy(e.dir, seed)
				if err != nil {
					t.Fatal(err)
				}
				e.dir = filepath.Join(e.dir, "copy")
				c, _, err := OpenSync(e.r, e.dir, e.cfg, e.ev)
				if err != nil {
					t.Fatalf("%s: open: %v", rep, err)
				}
				got := c.Epochs()
				e.close(c)
				if !slices.ContainsFunc(tc.want, func(w []EpochEntry) bool { return slices.Equal(got, w) }) {
					t.Fatalf("%s: epochs %+v, want one of %+v", rep, got, tc.want)
				}
			}
		})
	}
}
