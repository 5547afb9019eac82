package sim

import (
	"errors"
	"testing"
)

// TestSim_CatchesBrokenStorage: each deliberately wrong storage layout is caught within 1,000 seeds.
// Copies without the records inline let a power loss keep a superblock whose records are lost; copies
// written over the previous superblock's (one area) let a power loss tear every copy of the only
// superblock; an open that does not append the records only the copy in force carries loses them
// when a later persist overwrites that area.
func TestSim_CatchesBrokenStorage(t *testing.T) {
	if raceEnabled {
		t.Skip("single-goroutine simulation: runs in the plain pass of scripts/test, not under -race")
	}
	for _, c := range []struct {
		name   string
		broken BrokenStorage
	}{
		{"copies without the records inline", StorageNoInline},
		{"copies in one area", StorageOneArea},
		{"no log repair at open", StorageNoLogRepair},
	} {
		t.Run(c.name, func(t *testing.T) {
			for seed := uint64(0); seed < 1000; seed++ {
				o := Draw(seed)
				o.BrokenStorage = c.broken
				_, err := Run(o)
				if err == nil {
					continue
				}
				if !errors.Is(err, ErrViolation) {
					t.Fatalf("seed %d: %v", seed, err)
				}
				t.Logf("caught at seed=%d: %v", seed, err)
				return
			}
			t.Fatal("the broken layout survived 1,000 seeds")
		})
	}
}
