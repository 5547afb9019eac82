package powerloss_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ringstream/ringstream/ring"
	"github.com/ringstream/ringstream/ring/powerloss"
	"github.com/ringstream/ringstream/ring/ringtest"
	"golang.org/x/sys/unix"
)

// rig is one test machine: a directory modelled by a Disk, a wrapped ring, and the directory's fd.
type rig struct {
	t    *testing.T
	dir  string
	disk *powerloss.Disk
	r    ring.Ring
	dfd  int
	got  map[uint64]ring.Completion
	want int
}

func newRig(t *testing.T, b ring.Backend, seed uint64) *rig {
	t.Helper()
	dir := t.TempDir()
	disk := powerloss.NewDisk(dir, seed)
	g := &rig{t: t, dir: dir, disk: disk, r: disk.Wrap(ringtest.New(t, b, 16)), got: map[uint64]ring.Completion{}}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	g.dfd = fd
	t.Cleanup(func() { unix.Close(fd) })
	return g
}

func (g *rig) Complete(c ring.Completion) { g.got[c.Tag] = c }

// q checks that an operation was queued and counts it.
func (g *rig) q(err error) {
	g.t.Helper()
	if err != nil {
		g.t.Fatal(err)
	}
	g.want++
}

// run drives the ring until every queued operation completed, and fails on any error result unless
// the tag is listed in mayFail.
func (g *rig) run(mayFail ...uint64) {
	g.t.Helper()
	for len(g.got) < g.want {
		if err := g.r.Wait(1); err != nil {
			g.t.Fatal(err)
		}
		g.r.Dispatch()
	}
	for tag, c := range g.got {
		if err := c.Err(); err != nil && !contains(mayFail, tag) {
			g.t.Fatalf("tag %d: %v", tag, err)
		}
	}
}

func contains(s []uint64, v uint64) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// create makes name through the ring (tag), returning the fd once the open completed.
func (g *rig) create(tag uint64, name string) int {
	g.t.Helper()
	g.q(g.r.Openat(g, tag, g.dfd, name, unix.O_RDWR|unix.O_CREAT, 0o600, 0))
	g.run()
	fd := int(g.got[tag].Res)
	g.t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// durableFile creates name holding data, synced and with its directory entry synced.
func (g *rig) durableFile(name string, data []byte) int {
	g.t.Helper()
	fd := g.create(100, name)
	g.q(g.r.Write(g, 101, fd, data, 0, ring.Link))
	g.q(g.r.Fsync(g, 102, fd, true, 0))
	g.q(g.r.Fsync(g, 103, g.dfd, false, 0))
	g.run()
	return fd
}

// crash closes the ring and pulls the plug.
func (g *rig) crash() powerloss.Report {
	g.t.Helper()
	g.r.Close()
	rep, err := g.disk.PowerLoss()
	if err != nil {
		g.t.Fatal(err)
	}
	if !strings.HasPrefix(rep.String(), "powerloss seed=") {
		g.t.Fatalf("report %q does not start with the seed", rep)
	}
	return rep
}

func (g *rig) read(name string) ([]byte, bool) {
	b, err := os.ReadFile(filepath.Join(g.dir, name))
	if errors.Is(err, os.ErrNotExist) {
		return nil, false
	}
	if err != nil {
		g.t.Fatal(err)
	}
	return b, true
}

// seeds is how many power losses each test runs through a real workload (each seed repeats the
// workload, fsyncs included); copySeeds how many states PowerLossCopy draws from one recorded run.
const (
	seeds     = 60
	copySeeds = 2000
)

func pattern(c byte, n int) []byte { return bytes.Repeat([]byte{c}, n) }

// TestSyncedWriteSurvivesEverySeed: a created file whose data and directory entry were synced is
// intact after every power loss.
func TestSyncedWriteSurvivesEverySeed(t *testing.T) {
	ringtest.ForEachBackend(t, func(t *testing.T, b ring.Backend) {
		for seed := uint64(1); seed <= seeds; seed++ {
			g := newRig(t, b, seed)
			data := pattern('a', 3000)
			g.durableFile("f", data)
			rep := g.crash()
			if got, ok := g.read("f"); !ok || !bytes.Equal(got, data) {
				t.Fatalf("%v: synced file lost or changed (exists %v, %d bytes)", rep, ok, len(got))
			}
			if rep.Lost() {
				t.Fatalf("%v: nothing was unsynced, yet something was lost", rep)
			}
		}
	})
}

// TestUnsyncedWriteLostKeptOrTorn: a write after the last sync is lost in some seeds, kept in others,
// and torn (a prefix of it kept, at sector or byte granularity) in others; the synced bytes under it
// are never lost.
func TestUnsyncedWriteLostKeptOrTorn(t *testing.T) {
	ringtest.ForEachBackend(t, func(t *testing.T, b ring.Backend) {
		old, fresh := pattern('o', 4096), pattern('n', 2048)
		var lost, kept, tornSector, tornByte int
		for seed := uint64(1); seed <= seeds; seed++ {
			g := newRig(t, b, seed)
			fd := g.durableFile("f", old)
			g.q(g.r.Write(g, 1, fd, fresh, 1000, 0))
			g.run()
			rep := g.crash()
			got, ok := g.read("f")
			if !ok || len(got) != len(old) {
				t.Fatalf("%v: file lost or resized: %v %d", rep, ok, len(got))
			}
			n := 0
			for n < len(fresh) && got[1000+n] == 'n' {
				n++
			}
			if !bytes.Equal(got[:1000], old[:1000]) || !bytes.Equal(got[1000+n:], old[1000+n:]) {
				t.Fatalf("%v: bytes outside the kept prefix of the write changed", rep)
			}
			switch {
			case n == 0:
				lost++
			case n == len(fresh):
				kept++
			case (1000+n)%512 == 0:
				tornSector++
			default:
				tornByte++
			}
			if (n < len(fresh)) != rep.Lost() {
				t.Fatalf("%v: kept %d of %d bytes, but the report says lost=%v", rep, n, len(fresh), rep.Lost())
			}
		}
		t.Logf("%d seeds: lost %d, kept %d, torn at a sector %d, torn at a byte %d", seeds, lost, kept, tornSector, tornByte)
		if lost == 0 || kept == 0 || tornSector == 0 || tornByte == 0 {
			t.Fatalf("want every outcome: lost %d kept %d torn-sector %d torn-byte %d", lost, kept, tornSector, tornByte)
		}
	})
}

// TestLinkedWriteFdatasyncSurvives: a write linked before an fdatasync is durable once the sync
// completes, in every seed; a write queued (unlinked) after the sync is not covered by it.
func TestLinkedWriteFdatasyncSurvives(t *testing.T) {
	ringtest.ForEachBackend(t, func(t *testing.T, b ring.Backend) {
		var laterLost int
		for seed := uint64(1); seed <= seeds; seed++ {
			g := newRig(t, b, seed)
			fd := g.durableFile("f", nil)
			g.q(g.r.Write(g, 1, fd, pattern('l', 700), 0, ring.Link))
			g.q(g.r.Fsync(g, 2, fd, true, 0))
			g.q(g.r.Write(g, 3, fd, pattern('z', 100), 700, 0)) // queued after the sync
			g.run()
			rep := g.crash()
			got, _ := g.read("f")
			if len(got) < 700 || !bytes.Equal(got[:700], pattern('l', 700)) {
				t.Fatalf("%v: linked write lost: %d bytes", rep, len(got))
			}
			if len(got) == 700 {
				laterLost++
			}
		}
		if laterLost == 0 {
			t.Fatal("the write queued after the sync survived every seed: the sync covered it")
		}
	})
}

// TestRenameNeedsDirSync: a rename over an existing file without a directory fsync is undone in some
// seed (the old contents come back); with the directory fsync it never is.
func TestRenameNeedsDirSync(t *testing.T) {
	ringtest.ForEachBackend(t, func(t *testing.T, b ring.Backend) {
		for _, syncDir := range []bool{false, true} {
			var undone int
			for seed := uint64(1); seed <= seeds; seed++ {
				g := newRig(t, b, seed)
				g.durableFile("snap", []byte("old"))
				tmp := g.create(1, "snap.tmp")
				g.q(g.r.Write(g, 2, tmp, []byte("new"), 0, ring.Link))
				g.q(g.r.Fsync(g, 3, tmp, true, ring.Link))
				g.q(g.r.RenameAt(g, 4, g.dfd, "snap.tmp", g.dfd, "snap", 0, 0))
				g.run()
				if syncDir {
					g.q(g.r.Fsync(g, 5, g.dfd, false, 0))
					g.run()
				}
				rep := g.crash()
				got, ok := g.read("snap")
				switch {
				case !ok:
					t.Fatalf("%v: snap vanished", rep)
				case string(got) == "old":
					undone++
					if syncDir {
						t.Fatalf("%v: rename undone after the directory fsync", rep)
					}
				case string(got) != "new":
					t.Fatalf("%v: snap holds %q", rep, got)
				}
				if _, tmpLeft := g.read("snap.tmp"); tmpLeft && string(got) == "new" {
					t.Fatalf("%v: rename kept, yet its source is still there", rep)
				}
			}
			if !syncDir && undone == 0 {
				t.Fatal("an unsynced rename was never undone")
			}
		}
	})
}

// TestUnsyncedCreateMayVanish: a new file whose directory was never synced is gone in some seeds,
// even though its data was synced; a new directory likewise.
func TestUnsyncedCreateMayVanish(t *testing.T) {
	ringtest.ForEachBackend(t, func(t *testing.T, b ring.Backend) {
		var fileGone, dirGone, fileKept int
		for seed := uint64(1); seed <= seeds; seed++ {
			g := newRig(t, b, seed)
			fd := g.create(1, "new")
			g.q(g.r.Write(g, 2, fd, []byte("data"), 0, ring.Link))
			g.q(g.r.Fsync(g, 3, fd, true, 0))
			g.q(g.r.MkdirAt(g, 4, g.dfd, "sub", 0o700, 0))
			g.run()
			rep := g.crash()
			if got, ok := g.read("new"); !ok {
				fileGone++
			} else if string(got) != "data" {
				t.Fatalf("%v: new file holds %q; its data was synced", rep, got)
			} else {
				fileKept++
			}
			if _, err := os.Stat(filepath.Join(g.dir, "sub")); errors.Is(err, os.ErrNotExist) {
				dirGone++
			}
		}
		if fileGone == 0 || fileKept == 0 || dirGone == 0 {
			t.Fatalf("file gone %d kept %d, dir gone %d: want each outcome", fileGone, fileKept, dirGone)
		}
	})
}

// TestInjectedFaults: an injected EIO on an fdatasync and ENOSPC on a write complete those operations
// with that errno, cancel what is linked after them, and leave the file unchanged.
func TestInjectedFaults(t *testing.T) {
	ringtest.ForEachBackend(t, func(t *testing.T, b ring.Backend) {
		g := newRig(t, b, 1)
		fd := g.durableFile("f", []byte("base"))
		g.disk.Inject(powerloss.Fault{Op: ring.OpWrite, Path: "f", Errno: unix.ENOSPC})
		g.disk.Inject(powerloss.Fault{Op: ring.OpFsync, Path: "f", Nth: 3, Errno: unix.EIO})
		g.q(g.r.Write(g, 1, fd, []byte("XXXX"), 0, ring.Link)) // fails: ENOSPC
		g.q(g.r.Fsync(g, 2, fd, true, 0))                      // cancelled; the 1st fsync queued
		g.q(g.r.Write(g, 3, fd, []byte("ok"), 4, ring.Link))
		g.q(g.r.Fsync(g, 4, fd, true, 0)) // the 2nd: runs
		g.run(1, 2)
		if err := g.got[1].Err(); !errors.Is(err, unix.ENOSPC) {
			t.Fatalf("write: %v, want ENOSPC", err)
		}
		if err := g.got[2].Err(); !errors.Is(err, unix.ECANCELED) {
			t.Fatalf("fsync linked after the failed write: %v, want ECANCELED", err)
		}
		if got, _ := g.read("f"); string(got) != "baseok" {
			t.Fatalf("file holds %q after a failed write, want %q", got, "baseok")
		}
		g.q(g.r.Write(g, 5, fd, []byte("!!"), 6, ring.Link))
		g.q(g.r.Fsync(g, 6, fd, true, ring.Link)) // the 3rd: EIO
		g.q(g.r.Nop(g, 7, 0))
		g.run(1, 2, 6, 7)
		if err := g.got[6].Err(); !errors.Is(err, unix.EIO) {
			t.Fatalf("fsync: %v, want EIO", err)
		}
		if err := g.got[7].Err(); !errors.Is(err, unix.ECANCELED) {
			t.Fatalf("op linked after the failed fsync: %v, want ECANCELED", err)
		}
		// The write before the failed sync reached the page cache but was never made durable.
		rep := g.crash()
		if got, _ := g.read("f"); !bytes.HasPrefix(got, []byte("baseok")) {
			t.Fatalf("%v: synced bytes lost: %q", rep, got)
		}
	})
}

// TestPowerLossCopyManySeeds records one run (a synced file, an unsynced overwrite, a rename over it
// without a directory fsync, an unsynced new file) and draws copySeeds power-loss states from it: each
// is a state the model allows, every kind of outcome occurs, the same seed always draws the same state,
// and the real files are left alone.
func TestPowerLossCopyManySeeds(t *testing.T) {
	ringtest.ForEachBackend(t, func(t *testing.T, b ring.Backend) {
		g := newRig(t, b, 1)
		fd := g.durableFile("a", pattern('a', 2048))
		g.q(g.r.Write(g, 1, fd, pattern('b', 1024), 512, 0))
		tmp := g.create(2, "t")
		g.q(g.r.Write(g, 3, tmp, []byte("tmp"), 0, ring.Link))
		g.q(g.r.Fsync(g, 4, tmp, true, ring.Link))
		g.q(g.r.RenameAt(g, 5, g.dfd, "t", g.dfd, "a", 0, 0))
		g.run()
		g.r.Close()
		seen := map[string]int{}
		out := scratchDir(t)
		for seed := uint64(1); seed <= copySeeds; seed++ {
			dst := filepath.Join(out, "s")
			rep, err := g.disk.PowerLossCopy(dst, seed)
			if err != nil {
				t.Fatal(err)
			}
			a, err := os.ReadFile(filepath.Join(dst, "a"))
			if err != nil {
				t.Fatalf("%v: a is gone: %v", rep, err)
			}
			_, tErr := os.Stat(filepath.Join(dst, "t"))
			switch {
			case string(a) == "tmp":
				seen["renamed"]++
				if tErr == nil {
					t.Fatalf("%v: renamed, yet t is still there", rep)
				}
			case len(a) == 2048 && bytes.Equal(a[:512], pattern('a', 512)) && bytes.Equal(a[1536:], pattern('a', 512)):
				n := bytes.Count(a[512:1536], []byte{'b'})
				if !bytes.Equal(a[512:512+n], pattern('b', n)) {
					t.Fatalf("%v: the overwrite is not a prefix: %q", rep, a[512:1536])
				}
				switch n {
				case 0:
					seen["old"]++
				case 1024:
					seen["overwritten"]++
				default:
					seen["torn"]++
				}
				if tErr == nil {
					seen["t kept"]++
				} else {
					seen["t vanished"]++
				}
			default:
				t.Fatalf("%v: a holds a state no power loss leaves (%d bytes)", rep, len(a))
			}
			if seed%500 == 0 { // the same seed draws the same state
				again := filepath.Join(out, "again")
				rep2, err := g.disk.PowerLossCopy(again, seed)
				if err != nil || rep2.String() != rep.String() {
					t.Fatalf("seed %d drew %q, then %q (%v)", seed, rep, rep2, err)
				}
				a2, _ := os.ReadFile(filepath.Join(again, "a"))
				if !bytes.Equal(a, a2) {
					t.Fatalf("%v: same seed, different bytes", rep)
				}
				os.RemoveAll(again)
			}
			os.RemoveAll(dst)
		}
		t.Logf("%d seeds: %v", copySeeds, seen)
		for _, k := range []string{"renamed", "old", "overwritten", "torn", "t kept", "t vanished"} {
			if seen[k] == 0 {
				t.Fatalf("outcome %q never drawn in %d seeds: %v", k, copySeeds, seen)
			}
		}
		if a, _ := g.read("a"); string(a) != "tmp" {
			t.Fatalf("the real file changed: %q", a)
		}
	})
}
