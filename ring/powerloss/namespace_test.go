package powerloss_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/ringstream/ringstream/ring"
	"github.com/ringstream/ringstream/ring/powerloss"
	"github.com/ringstream/ringstream/ring/ringtest"
	"golang.org/x/sys/unix"
)

// drawCopies draws n power-loss states of g's recorded run and calls check on each copy's root.
func drawCopies(t *testing.T, g *rig, n uint64, check func(rep powerloss.Report, root string)) {
	t.Helper()
	out := scratchDir(t)
	for seed := uint64(1); seed <= n; seed++ {
		dst := filepath.Join(out, "s")
		rep, err := g.disk.PowerLossCopy(dst, seed)
		if err != nil {
			t.Fatal(err)
		}
		check(rep, dst)
		if err := os.RemoveAll(dst); err != nil {
			t.Fatal(err)
		}
	}
}

// scratchDir is a directory for drawn copies: on tmpfs (/dev/shm) where there is one, since a copy's
// cost is file creation and removal, and t.TempDir elsewhere.
func scratchDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("/dev/shm", "powerloss-test-")
	if err != nil {
		return t.TempDir()
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return !errors.Is(err, os.ErrNotExist)
}

// TestUnlinkAndMkdirNeedDirSync: an unsynced unlink of a durable file is undone in some states (the
// file comes back with its synced bytes); a file in an unsynced new directory vanishes with it; after
// the directory fsyncs neither is ever undone.
func TestUnlinkAndMkdirNeedDirSync(t *testing.T) {
	ringtest.ForEachBackend(t, func(t *testing.T, b ring.Backend) {
		for _, syncDir := range []bool{false, true} {
			g := newRig(t, b, 1)
			g.durableFile("gone", []byte("synced"))
			g.q(g.r.UnlinkAt(g, 1, g.dfd, "gone", 0, 0))
			g.q(g.r.MkdirAt(g, 2, g.dfd, "sub", 0o700, 0))
			g.run()
			fd := g.create(3, "sub/f")
			g.q(g.r.Write(g, 4, fd, []byte("in sub"), 0, ring.Link))
			g.q(g.r.Fsync(g, 5, fd, true, 0))
			if syncDir {
				sub, err := unix.Open(filepath.Join(g.dir, "sub"), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
				if err != nil {
					t.Fatal(err)
				}
				defer unix.Close(sub)
				g.q(g.r.Fsync(g, 6, sub, false, 0))
				g.q(g.r.Fsync(g, 7, g.dfd, false, 0))
			}
			g.run()
			g.r.Close()
			var back, subGone int
			drawCopies(t, g, 300, func(rep powerloss.Report, root string) {
				if got, err := os.ReadFile(filepath.Join(root, "gone")); err == nil {
					back++
					if string(got) != "synced" || syncDir {
						t.Fatalf("%v: unlinked file back with %q (dir synced %v)", rep, got, syncDir)
					}
				}
				f := filepath.Join(root, "sub", "f")
				if !exists(filepath.Join(root, "sub")) {
					subGone++
					if syncDir {
						t.Fatalf("%v: synced mkdir undone", rep)
					}
				} else if got, err := os.ReadFile(f); err == nil && string(got) != "in sub" {
					t.Fatalf("%v: sub/f holds %q", rep, got)
				}
			})
			if !syncDir && (back == 0 || subGone == 0) {
				t.Fatalf("unsynced unlink undone %d times, unsynced mkdir undone %d times: want both", back, subGone)
			}
		}
	})
}

// TestTruncateAndFallocate: a synced ftruncate and fallocate shape the durable file; an unsynced
// truncate after them is kept in some states and lost in others.
func TestTruncateAndFallocate(t *testing.T) {
	ringtest.ForEachBackend(t, func(t *testing.T, b ring.Backend) {
		g := newRig(t, b, 1)
		fd := g.durableFile("f", pattern('a', 4096))
		g.q(g.r.Ftruncate(g, 1, fd, 100, ring.Link))
		g.q(g.r.Fallocate(g, 2, fd, 0, 0, 8192, ring.Link))
		g.q(g.r.Fallocate(g, 3, fd, unix.FALLOC_FL_KEEP_SIZE, 0, 1<<20, ring.Link))
		g.q(g.r.Fsync(g, 4, fd, true, 0))
		g.run()
		g.q(g.r.Ftruncate(g, 5, fd, 10, 0))
		g.run()
		g.r.Close()
		want := append(pattern('a', 100), make([]byte, 8092)...)
		sizes := map[int]int{}
		drawCopies(t, g, 200, func(rep powerloss.Report, root string) {
			got, err := os.ReadFile(filepath.Join(root, "f"))
			if err != nil {
				t.Fatal(err)
			}
			sizes[len(got)]++
			if !bytes.Equal(got, want[:len(got)]) || (len(got) != 10 && len(got) != len(want)) {
				t.Fatalf("%v: %d bytes, want the synced 8192 or the truncated 10", rep, len(got))
			}
		})
		if sizes[10] == 0 || sizes[8192] == 0 {
			t.Fatalf("sizes drawn %v: want the unsynced truncate both kept and lost", sizes)
		}
	})
}

// TestRingsShareDisk: two rings on two threads record into one Disk at once (run under -race).
func TestRingsShareDisk(t *testing.T) {
	ringtest.ForEachBackend(t, func(t *testing.T, b ring.Backend) {
		dir := t.TempDir()
		disk := powerloss.NewDisk(dir, 9)
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = writeSynced(b, disk, filepath.Join(dir, []string{"x", "y"}[i]), 50)
			}()
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		rep, err := disk.PowerLoss()
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"x", "y"} {
			got, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil || len(got) != 50*64 {
				t.Fatalf("%v: %s: %d bytes (%v), want %d synced bytes", rep, name, len(got), err, 50*64)
			}
		}
	})
}

// writeSynced opens path (made durable by a plain create and sync first, outside the model), and
// appends n linked write+fdatasync pairs through its own wrapped ring on its own thread.
func writeSynced(b ring.Backend, disk *powerloss.Disk, path string, n int) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	inner, err := ring.New(ring.Config{Backend: b, Entries: 8, Logger: ringtest.QuietLogger()})
	if err != nil {
		return err
	}
	r := disk.Wrap(inner)
	defer r.Close()
	h := &counter{}
	block := pattern('w', 64)
	for i := range n {
		if err := r.Write(h, 1, int(f.Fd()), block, int64(i*64), ring.Link); err != nil {
			return err
		}
		if err := r.Fsync(h, 2, int(f.Fd()), true, 0); err != nil {
			return err
		}
		for h.n < 2*(i+1) {
			if err := r.Wait(1); err != nil {
				return err
			}
			r.Dispatch()
		}
		if h.err != nil {
			return h.err
		}
	}
	return nil
}

type counter struct {
	n   int
	err error
}

func (c *counter) Complete(comp ring.Completion) {
	c.n++
	if err := comp.Err(); err != nil && c.err == nil {
		c.err = err
	}
}

// TestAppendAtFilePosition: writes at offset -1 to an O_APPEND file are modelled where they landed.
func TestAppendAtFilePosition(t *testing.T) {
	ringtest.ForEachBackend(t, func(t *testing.T, b ring.Backend) {
		g := newRig(t, b, 1)
		g.durableFile("log", []byte("head:"))
		f, err := os.OpenFile(filepath.Join(g.dir, "log"), os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		g.q(g.r.Write(g, 1, int(f.Fd()), []byte("one,"), -1, ring.Link))
		g.q(g.r.Write(g, 2, int(f.Fd()), []byte("two,"), -1, ring.Link))
		g.q(g.r.Fsync(g, 3, int(f.Fd()), true, 0))
		g.run()
		g.q(g.r.Write(g, 4, int(f.Fd()), []byte("three"), -1, 0))
		g.run()
		g.r.Close()
		seen := map[string]bool{}
		drawCopies(t, g, 100, func(rep powerloss.Report, root string) {
			got, err := os.ReadFile(filepath.Join(root, "log"))
			if err != nil || !bytes.HasPrefix(got, []byte("head:one,two,")) || !bytes.HasPrefix([]byte("head:one,two,three"), got) {
				t.Fatalf("%v: log holds %q (%v)", rep, got, err)
			}
			seen[string(got)] = true
		})
		if !seen["head:one,two,"] || !seen["head:one,two,three"] {
			t.Fatalf("states drawn %v: want the unsynced append both lost and kept", seen)
		}
	})
}

// TestCutStopsDurability: after Cut, syncs complete with EIO, and nothing written, created or renamed
// afterwards survives PowerLoss, in any seed; what was durable before the cut is intact.
func TestCutStopsDurability(t *testing.T) {
	ringtest.ForEachBackend(t, func(t *testing.T, b ring.Backend) {
		for seed := uint64(1); seed <= 20; seed++ {
			g := newRig(t, b, seed)
			fd := g.durableFile("f", []byte("before"))
			g.disk.Cut()
			g.q(g.r.Write(g, 1, fd, []byte("AFTER!"), 0, ring.Link))
			g.q(g.r.Fsync(g, 2, fd, true, 0))
			g.run(2)
			if err := g.got[2].Err(); !errors.Is(err, unix.EIO) {
				t.Fatalf("fsync after the cut: %v, want EIO", err)
			}
			delete(g.got, 2)
			g.want--
			nfd := g.create(3, "new")
			g.q(g.r.Write(g, 4, nfd, []byte("new"), 0, ring.Link))
			g.q(g.r.Fsync(g, 5, nfd, true, ring.Link))
			g.q(g.r.RenameAt(g, 6, g.dfd, "new", g.dfd, "f", 0, ring.Link))
			g.q(g.r.Fsync(g, 7, g.dfd, false, 0))
			g.run(5, 7)
			rep := g.crash()
			if got, ok := g.read("f"); !ok || string(got) != "before" {
				t.Fatalf("%v: f holds %q (exists %v), want what was durable at the cut", rep, got, ok)
			}
			if _, ok := g.read("new"); ok {
				t.Fatalf("%v: a file created after the cut survived", rep)
			}
		}
	})
}
