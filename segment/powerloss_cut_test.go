package segment

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/ringstream/ringstream/ring"
	"github.com/ringstream/ringstream/ring/powerloss"
)

// plCutSeeds is how many seeds TestPowerLoss_CutAcrossSegments runs.
const plCutSeeds = 500

// powerLossCutRun is one seed of the cut workload: a copy filled to eight segments (all but the
// active one closed, digested and with a sidecar), cut at a batch of its second segment, so the
// cut removes six segments one by one, and the power cut after a random number of the cut's loop
// turns. The random workload of powerLossRun seldom cuts that deep at the moment the power goes.
func powerLossCutRun(t testing.TB, root string, seed uint64) error {
	rng := rand.New(rand.NewPCG(seed, 0xc07))
	run := &plRun{seed: seed, rng: rng, dir: filepath.Join(root, "copy"), cfg: plConfig(rng), cuts: true}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return err
	}
	defer closeFilesUnder(root)
	disk := powerloss.NewDisk(root, seed)
	r, err := ring.New(ring.Config{Backend: ring.BackendFallback, Entries: 64, Logger: quietLogger()})
	if err != nil {
		return err
	}
	defer r.Close()
	run.lp = newLoop(t, disk.Wrap(r))
	c, err := Open(run.lp.js, run.lp.g, run.dir, run.cfg, plEvents{run}, 0)
	if err != nil {
		return err
	}
	run.c = c
	run.lp.until("open", func() bool { return c.ready || run.failed != nil })
	for len(c.records.segs) < 8 && run.failed == nil {
		base := c.records.next
		h := BatchHeader{RecordCount: 2, Epoch: 1, MaxTimestamp: int64(base)}
		if _, err := c.Append(0, &h, recordPayload(nil, base, 2, plRecSize)); err == nil {
			run.bases = append(run.bases, base)
		}
		run.lp.turn()
	}
	run.lp.until("settled", func() bool {
		for _, s := range c.records.segs[:len(c.records.segs)-1] {
			if !s.sidecarSaved {
				return run.failed != nil
			}
		}
		return c.records.durable == c.records.next || run.failed != nil
	})
	if run.failed != nil {
		return run.failed
	}
	second := c.records.segs[1]
	var cands []uint64
	for _, b := range run.bases {
		if b >= second.base && b < second.end {
			cands = append(cands, b)
		}
	}
	run.cutAt(cands[rng.IntN(len(cands))])
	if !run.cutting {
		return fmt.Errorf("cut at a batch of the second segment refused")
	}
	for n := rng.IntN(30) + 1; n > 0 && run.cutting; n-- {
		run.lp.turn()
	}
	if err := run.powerCut(disk, r); err != nil {
		return err
	}
	return run.failed
}

// TestPowerLoss_CutAcrossSegments: a cut that removes several closed segments, the power cut at
// each point of it: the copy reopens at or above the cut, reads back intact and verifies. Without
// a directory fsync after each removal, a power loss that keeps a later removal and loses an
// earlier one leaves a gap before a settled segment (caught at seed 50 when that fsync was removed
// by hand).
func TestPowerLoss_CutAcrossSegments(t *testing.T) {
	lockThread(t)
	root := plRoot(t)
	for seed := uint64(1); seed <= plCutSeeds; seed++ {
		dir := filepath.Join(root, fmt.Sprint(seed))
		if err := powerLossCutRun(t, dir, seed); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		_ = os.RemoveAll(dir)
	}
}
