package powerloss_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ringstream/ringstream/ring"
	"github.com/ringstream/ringstream/ring/powerloss"
	"github.com/ringstream/ringstream/ring/ringtest"
)

// TestDirKeepsPrefixOrSubset: four durable files unlinked one after the other, none of it synced.
// A power loss drawn in prefix order removes the first k of them; one drawn as a subset also leaves
// states where a later unlink survived and an earlier one did not. Both orders are drawn.
func TestDirKeepsPrefixOrSubset(t *testing.T) {
	ringtest.ForEachBackend(t, func(t *testing.T, b ring.Backend) {
		g := newRig(t, b, 1)
		names := []string{"a", "b", "c", "d"}
		for _, n := range names {
			g.durableFile(n, []byte(n))
			g.got, g.want = map[uint64]ring.Completion{}, 0
		}
		for i, n := range names {
			g.q(g.r.UnlinkAt(g, uint64(i+1), g.dfd, n, 0, 0))
			g.run()
		}
		g.r.Close()
		var prefix, subset, outOfOrder int
		drawCopies(t, g, copySeeds, func(rep powerloss.Report, root string) {
			gone := ""
			for _, n := range names {
				if got, err := os.ReadFile(filepath.Join(root, n)); err != nil {
					gone += n
				} else if string(got) != n {
					t.Fatalf("%v: %s holds %q", rep, n, got)
				}
			}
			inOrder := gone == "abcd"[:len(gone)]
			if rep.DirSubset {
				subset++
				if !inOrder {
					outOfOrder++
				}
			} else {
				prefix++
				if !inOrder {
					t.Fatalf("%v: removed %q, not a prefix of the unlinks", rep, gone)
				}
			}
		})
		if prefix == 0 || subset == 0 || outOfOrder == 0 {
			t.Fatalf("prefix draws %d, subset draws %d (%d out of order): want each", prefix, subset, outOfOrder)
		}
	})
}

// TestSubsetKeepsDependencies: a rename of a into b, then a new file at a, then a rename of the new
// file into c, none synced. In either order the new a never survives without the first rename (the
// old a's bytes would be lost) and the rename into c never without the create; each allowed
// combination is drawn.
func TestSubsetKeepsDependencies(t *testing.T) {
	ringtest.ForEachBackend(t, func(t *testing.T, b ring.Backend) {
		g := newRig(t, b, 1)
		g.durableFile("a", []byte("old"))
		g.got, g.want = map[uint64]ring.Completion{}, 0
		g.q(g.r.RenameAt(g, 1, g.dfd, "a", g.dfd, "b", 0, 0))
		g.run()
		fd := g.create(2, "a")
		g.q(g.r.Write(g, 3, fd, []byte("new"), 0, ring.Link))
		g.q(g.r.Fsync(g, 4, fd, true, 0))
		g.run()
		g.q(g.r.RenameAt(g, 5, g.dfd, "a", g.dfd, "c", 0, 0))
		g.run()
		g.r.Close()
		seen := map[string]int{}
		drawCopies(t, g, copySeeds, func(rep powerloss.Report, root string) {
			state := ""
			for _, n := range []string{"a", "b", "c"} {
				got, err := os.ReadFile(filepath.Join(root, n))
				if err != nil {
					got = []byte("-")
				}
				state += fmt.Sprintf("%s=%s ", n, got)
			}
			switch state {
			case "a=old b=- c=- ", "a=- b=old c=- ", "a=new b=old c=- ", "a=- b=old c=new ":
				seen[state]++
			default:
				t.Fatalf("%v: %s: not a state the changes in order or their dependencies allow", rep, state)
			}
		})
		if len(seen) != 4 {
			t.Fatalf("states drawn %v: want all four", seen)
		}
	})
}

// TestChangeInsideMovedDirectory: a durable directory d renamed to t, then t/x unlinked, the
// rename never synced (Delete without its parent's fsync). A change inside a directory belongs to
// that directory, not to its name: some states lose the rename and keep the unlink, so d comes back
// without x. Once t itself is fsynced after the unlink, no state holds x under either name; once the
// parent is fsynced after the rename, no state holds d.
func TestChangeInsideMovedDirectory(t *testing.T) {
	ringtest.ForEachBackend(t, func(t *testing.T, b ring.Backend) {
		for _, sync := range []string{"none", "inner", "parent"} {
			g := newRig(t, b, 1)
			if err := os.Mkdir(filepath.Join(g.dir, "d"), 0o755); err != nil {
				t.Fatal(err)
			}
			for _, n := range []string{"x", "y"} {
				if err := os.WriteFile(filepath.Join(g.dir, "d", n), []byte(n), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			g.q(g.r.RenameAt(g, 1, g.dfd, "d", g.dfd, "t", 0, 0))
			g.run()
			if sync == "parent" {
				g.q(g.r.Fsync(g, 2, g.dfd, false, 0))
				g.run()
			}
			g.q(g.r.UnlinkAt(g, 3, g.dfd, "t/x", 0, 0))
			g.run()
			if sync == "inner" {
				tfd, err := unix.Open(filepath.Join(g.dir, "t"), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
				if err != nil {
					t.Fatal(err)
				}
				g.q(g.r.Fsync(g, 4, tfd, false, 0))
				g.run()
				unix.Close(tfd)
			}
			g.r.Close()
			seen := map[string]int{}
			drawCopies(t, g, 400, func(rep powerloss.Report, root string) {
				state := ""
				for _, p := range []string{"d", "d/x", "d/y", "t", "t/x", "t/y"} {
					if exists(filepath.Join(root, p)) {
						state += p + " "
					}
				}
				seen[state]++
				x := exists(filepath.Join(root, "d/x")) || exists(filepath.Join(root, "t/x"))
				switch {
				case sync == "inner" && x:
					t.Fatalf("%v: %s: x back after its directory was fsynced", rep, state)
				case sync == "parent" && exists(filepath.Join(root, "d")):
					t.Fatalf("%v: %s: d back after the rename was fsynced", rep, state)
				case !exists(filepath.Join(root, "d/y")) && !exists(filepath.Join(root, "t/y")):
					t.Fatalf("%v: %s: y lost", rep, state)
				}
			})
			if sync == "none" && seen["d d/y "] == 0 {
				t.Fatalf("states drawn %v: want d without x (the rename lost, the unlink kept)", seen)
			}
			t.Logf("%s: %v", sync, seen)
		}
	})
}
