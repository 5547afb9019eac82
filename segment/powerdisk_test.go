package segment

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ringstream/ringstream/ring"
)

// powerDisk is the storage fault model the power-loss tests run on: a ring decorator over real
// files that remembers what each fsync made durable, and a PowerLoss that rewrites the files to
// it. A file's durable bytes are what its last fsync or fdatasync saw; a directory's durable
// entries (name to inode) are what its last fsync saw. On power loss every directory holds its
// durable entries only (a create, rename or unlink since its last fsync is undone; a directory
// whose entry was never made durable is gone with all it held), and every file holds its durable
// bytes overlaid with a random subset of the 512-byte sectors written since, at a random length
// between the durable and the current one: lost, reordered and torn unsynced writes.
type powerDisk struct {
	root   string
	rng    *rand.Rand
	images map[uint64][]byte            // file inode: durable bytes
	dirs   map[uint64]map[string]uint64 // directory inode: durable entries
	isDir  map[uint64]bool
	rootIn uint64
}

func newPowerDisk(t testing.TB, root string, seed uint64) *powerDisk {
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	d := &powerDisk{root: root, rng: rand.New(rand.NewPCG(seed, 0xd15c)), images: map[uint64][]byte{},
		dirs: map[uint64]map[string]uint64{}, isDir: map[uint64]bool{}}
	d.rootIn = inodeOf(root)
	d.isDir[d.rootIn] = true
	d.dirs[d.rootIn] = map[string]uint64{}
	return d
}

func inodeOf(path string) uint64 {
	st, err := os.Lstat(path)
	if err != nil {
		return 0
	}
	return st.Sys().(*syscall.Stat_t).Ino
}

// Wrap returns r with every successful fsync recorded.
func (d *powerDisk) Wrap(r ring.Ring) ring.Ring { return &powerRing{Ring: r, d: d} }

type powerRing struct {
	ring.Ring
	d *powerDisk
}

// syncWatch forwards an fsync's completion after recording what it made durable.
type syncWatch struct {
	h  ring.Handler
	d  *powerDisk
	fd int
}

func (w *syncWatch) Complete(c ring.Completion) {
	if c.Res >= 0 {
		w.d.synced(w.fd)
	}
	w.h.Complete(c)
}

func (p *powerRing) Fsync(h ring.Handler, tag uint64, fd int, datasync bool, fl ring.Flags) error {
	return p.Ring.Fsync(&syncWatch{h: h, d: p.d, fd: fd}, tag, fd, datasync, fl)
}

// synced records what an fsync of fd made durable.
func (d *powerDisk) synced(fd int) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		path, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
		if err != nil {
			return
		}
		entries := map[string]uint64{}
		list, _ := os.ReadDir(path)
		for _, e := range list {
			ino := inodeOf(filepath.Join(path, e.Name()))
			entries[e.Name()] = ino
			if e.IsDir() {
				d.isDir[ino] = true
			}
		}
		d.isDir[st.Ino] = true
		d.dirs[st.Ino] = entries
		return
	}
	// Through /proc: the descriptor may be write-only.
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/fd/%d", fd))
	if err != nil {
		panic(fmt.Sprintf("powerDisk: read synced file: %v", err))
	}
	d.images[st.Ino] = b
}

// PowerLoss rewrites the tree under root to what survives a power cut. Half the cuts keep each
// directory exactly as last fsynced; the other half also keep a random subset of the changes
// made since (each name as it is now or as it was durable), as a file system that commits
// directory operations in any order may.
func (d *powerDisk) PowerLoss() {
	cut := powerCut{files: map[uint64][]byte{}, dirs: map[uint64]map[string]uint64{}, isDir: map[uint64]bool{}}
	cut.partial = d.rng.IntN(2) == 0
	_ = filepath.WalkDir(d.root, func(path string, e os.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		ino := inodeOf(path)
		if e.IsDir() {
			cut.isDir[ino] = true
			cut.dirs[ino] = d.listing(path)
		} else if b, err := os.ReadFile(path); err == nil {
			cut.files[ino] = b
		}
		return nil
	})
	list, _ := os.ReadDir(d.root)
	for _, e := range list {
		_ = os.RemoveAll(filepath.Join(d.root, e.Name()))
	}
	d.rebuild(d.root, d.rootIn, &cut)
	// The rebuilt tree is the new durable state; inodes changed, so start the record afresh.
	d.images, d.dirs, d.isDir = map[uint64][]byte{}, map[uint64]map[string]uint64{}, map[uint64]bool{}
	d.isDir[d.rootIn] = true
	d.dirs[d.rootIn] = d.listing(d.root)
	for _, path := range d.walk(d.root) {
		ino := inodeOf(path)
		if st, err := os.Stat(path); err == nil && st.IsDir() {
			d.isDir[ino] = true
			d.dirs[ino] = d.listing(path)
		} else if b, err := os.ReadFile(path); err == nil {
			d.images[ino] = b
		}
	}
}

// powerCut is the tree as it was when the power went.
type powerCut struct {
	files   map[uint64][]byte
	dirs    map[uint64]map[string]uint64
	isDir   map[uint64]bool
	partial bool // keep a random subset of the unsynced directory changes
}

func (d *powerDisk) listing(dir string) map[string]uint64 {
	m := map[string]uint64{}
	list, _ := os.ReadDir(dir)
	for _, e := range list {
		m[e.Name()] = inodeOf(filepath.Join(dir, e.Name()))
	}
	return m
}

func (d *powerDisk) walk(root string) []string {
	var out []string
	_ = filepath.WalkDir(root, func(path string, _ os.DirEntry, err error) error {
		if err == nil && path != root {
			out = append(out, path)
		}
		return nil
	})
	return out
}

// rebuild writes directory dir (inode ino) from its durable entries and, in a partial cut, a
// random subset of its current ones, in name order.
func (d *powerDisk) rebuild(dir string, ino uint64, cut *powerCut) {
	durable, now := d.dirs[ino], cut.dirs[ino]
	entries := map[string]uint64{}
	for name, child := range durable {
		entries[name] = child
	}
	if cut.partial {
		names := make([]string, 0, len(durable)+len(now))
		for name := range durable {
			names = append(names, name)
		}
		for name := range now {
			names = append(names, name)
		}
		slices.Sort(names)
		names = slices.Compact(names)
		for _, name := range names {
			if durable[name] == now[name] || d.rng.IntN(2) == 0 {
				continue
			}
			if child, ok := now[name]; ok {
				entries[name] = child
			} else {
				delete(entries, name)
			}
		}
	}
	names := make([]string, 0, len(entries))
	for name := range entries {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		child := entries[name]
		path := filepath.Join(dir, name)
		if d.isDir[child] || cut.isDir[child] {
			_ = os.Mkdir(path, 0o755)
			d.rebuild(path, child, cut)
			continue
		}
		cur, ok := cut.files[child]
		if !ok {
			cur = d.images[child] // unlinked since: the unlink is undone, the bytes stay
		}
		_ = os.WriteFile(path, d.survivor(d.images[child], cur), 0o644)
	}
}

// survivor is what a file holds after the power cut: durable bytes dur, current bytes cur.
func (d *powerDisk) survivor(dur, cur []byte) []byte {
	const sector = 512
	n := len(dur)
	switch {
	case len(cur) > len(dur):
		n = len(dur) + d.rng.IntN(len(cur)-len(dur)+1)
	case len(cur) < len(dur) && d.rng.IntN(2) == 0:
		n = len(cur) // an unsynced truncation that reached the disk
	}
	out := make([]byte, n)
	copy(out, dur)
	for at := 0; at < n; at += sector {
		end := min(at+sector, n)
		if end <= len(cur) && string(cur[at:end]) != string(out[at:end]) && d.rng.IntN(2) == 0 {
			copy(out[at:end], cur[at:end])
		}
	}
	return out
}
