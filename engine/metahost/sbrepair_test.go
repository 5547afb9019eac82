package metahost

import (
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ringstream/ringstream/engine/vsr"
	"github.com/ringstream/ringstream/wire"
)

// headerCopies reads the copy slots of the log file in dir.
func headerCopies(t *testing.T, dir string) [vsr.SuperblockSlots][]byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, metaLogFile))
	if err != nil {
		t.Fatal(err)
	}
	copies, _ := splitLogFile(b)
	return copies
}

// patchLogFile writes b at off of the log file in dir, or cuts the file to off when b is nil.
func patchLogFile(t *testing.T, dir string, off int64, b []byte) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(dir, metaLogFile), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if b == nil {
		err = f.Truncate(off)
	} else {
		_, err = f.WriteAt(b, off)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// opPersist is persist seq (sequence seq) of op `op` of view 1 after parent: its effects and the
// entry's checksum.
func opPersist(seq, op, parent uint64) (vsr.Effects, uint64) {
	e := wire.VSREntry{Op: op, View: 1, Client: 1, Request: op, Parent: parent, Body: registerOp(uint16(op))}
	e.Checksum = vsr.EntryChecksum(&e)
	sb := vsr.Superblock{Sequence: seq, View: 1, LogView: 1, Op: op, Head: e.Checksum,
		Identity: vsr.Identity{Cluster: 1, Node: 1}}
	return vsr.Effects{PersistID: seq, Entries: []wire.VSREntry{e}, Superblock: sb}, e.Checksum
}

// persistOps opens the store in dir (without the log repair when noLogRepair), persists ops from..to
// (sequence = op+1) through a ring, and closes it. It returns the last op's checksum.
func persistOps(t *testing.T, dir string, from, to, parent uint64, noLogRepair bool) uint64 {
	t.Helper()
	s, _, err := openMetaStoreBroken(dir, noLogRepair)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	_, rg, _ := storeRing(t, 64)
	s.attach(rg)
	for op := from; op <= to; op++ {
		fx, sum := opPersist(op+1, op, parent)
		s.submit(buildPersist(nil, &fx, false))
		parent = sum
	}
	settle(t, rg)
	if done, err := s.durable(); done != to+1 || err != nil {
		t.Fatalf("persists durable up to %d (%v), want %d", done, err, to+1)
	}
	return parent
}

// openDurable opens the store in dir (with or without the log repair) and returns what it recovered.
func openDurable(t *testing.T, dir string, noLogRepair bool) vsr.Durable {
	t.Helper()
	s, d, err := openMetaStoreBroken(dir, noLogRepair)
	if err != nil {
		t.Fatal(err)
	}
	s.close()
	return d
}

func openMetaStoreBroken(dir string, noLogRepair bool) (*metaStore, vsr.Durable, error) {
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	if !noLogRepair {
		return openMetaStore(dir, vsr.Identity{Cluster: 1, Node: 1}, 64<<20, logger)
	}
	return openMetaStoreWith(dir, vsr.Identity{Cluster: 1, Node: 1}, 64<<20, logger, true)
}

// A power loss before persist 3's fdatasync kept one copy of its superblock (op 2, its record inline)
// and lost the log's append and the other copies. The replica reopens at op 2, and the open appends
// op 2's record to the log and rewrites every copy of the area. Two persists later (the second
// overwrites that area) it still reopens at op 4. Without the log repair (the broken variant) op 2's
// record was only in that area: the reopen cannot prove its state and recovers.
func TestMetaStorage_RepairAtOpen(t *testing.T) {
	for _, broken := range []bool{false, true} {
		dir := t.TempDir()
		if err := Format(FormatConfig{Dir: dir, Cluster: 1, Node: 1}); err != nil {
			t.Fatal(err)
		}
		h1 := persistOps(t, dir, 1, 1, 0, false)
		logEnd := func() int64 {
			st, err := os.Stat(filepath.Join(dir, metaLogFile))
			if err != nil {
				t.Fatal(err)
			}
			return st.Size()
		}
		before := logEnd()
		h2 := persistOps(t, dir, 2, 2, h1, false)
		area := vsr.AreaOf(3) * vsr.SuperblockCopies
		kept := headerCopies(t, dir)[area+2]
		_, inline, err := vsr.DecodeSuperblockCopy(kept)
		if err != nil || len(inline) == 0 {
			t.Fatalf("copy of persist 3: %d inline bytes, %v", len(inline), err)
		}
		patchLogFile(t, dir, before, nil) // the log's append lost
		for _, c := range []int{0, 1, 3} {
			patchLogFile(t, dir, int64((area+c)*vsr.CopySlotSize+40), []byte("torn"))
		}

		d := openDurable(t, dir, broken)
		if d.Recovering || d.Superblock.Op != 2 || string(d.Unlogged) != string(inline) {
			t.Fatalf("broken=%v: reopened %+v (unlogged %d bytes), want op 2 with its record to append", broken,
				d.Superblock, len(d.Unlogged))
		}
		after := headerCopies(t, dir)
		for c, b := range after[area : area+vsr.SuperblockCopies] {
			if _, _, err := vsr.DecodeSuperblockCopy(b); err != nil {
				t.Fatalf("broken=%v: after the open copy %d of the area in force: %v", broken, c, err)
			}
		}
		if got := logEnd() - before; !broken && got != int64(len(inline)) {
			t.Fatalf("after the open the log grew by %d bytes, want op 2's record (%d)", got, len(inline))
		}

		persistOps(t, dir, 3, 4, h2, broken)
		d = openDurable(t, dir, false)
		if broken != d.Recovering || !broken && d.Superblock.Op != 4 {
			t.Fatalf("broken=%v: two persists later %+v recovering %v (%v)", broken, d.Superblock, d.Recovering,
				d.Cause)
		}
	}
}

// A directory of the layout before one fdatasync per persist (a separate superblock file, the log
// file without a header) is refused with an error that says so, not as unformatted.
func TestMetaStorage_LegacyLayoutNamed(t *testing.T) {
	dir := t.TempDir()
	if err := Format(FormatConfig{Dir: dir, Cluster: 1, Node: 1}); err != nil {
		t.Fatal(err)
	}
	patchLogFile(t, dir, 0, nil)
	if err := os.WriteFile(filepath.Join(dir, metaLegacySuperblockFile), []byte("old copies"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err := openMetaStore(dir, vsr.Identity{Cluster: 1, Node: 1}, 64<<20, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if !errors.Is(err, ErrStorage) || errors.Is(err, ErrUnformatted) || !strings.Contains(err.Error(), "layout") {
		t.Fatalf("open: %v, want ErrStorage naming the old layout", err)
	}
}
