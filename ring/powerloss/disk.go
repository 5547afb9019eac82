package powerloss

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/ringstream/ringstream/ring"
	"golang.org/x/sys/unix"
)

// ErrOutsideRoot: a path the Disk was asked about does not lie under its root.
var ErrOutsideRoot = errors.New("powerloss: path outside the disk's root")

// inoKey is a real file's identity: device and inode number.
type inoKey struct{ dev, ino uint64 }

// Disk is the model of one machine's disk under root. It is safe for several rings on several
// threads: every method takes its mutex.
type Disk struct {
	mu     sync.Mutex
	root   string
	seed   uint64
	rng    *rand.Rand
	losses int

	seq     uint64                 // queue and completion sequence numbers, one counter
	nextID  uint64                 // inode ids
	live    map[inoKey]*inode      // real inode -> model, for the files the model knows
	cur     names                  // the namespace as it is now, for the paths the model knows
	durable names                  // the namespace a power loss keeps for certain
	dirs    map[string][]*nsChange // directory -> its unsynced namespace changes, in completion order
	faults  []Fault
	// anyOrder: files may keep any subset of their unsynced writes (WritesInAnyOrder).
	anyOrder bool
	cut      atomic.Bool     // set by Cut: completions no longer reach the model
	touched  map[string]bool // paths namespace operations touched after Cut
}

// WritesInAnyOrder makes each later power loss draw, per loss, whether every file keeps a prefix of its
// unsynced operations (the default model) or any subset of its unsynced writes, each whole, torn or
// lost, since page-cache writeback promises no order among writes that no sync separates; truncates
// and fallocates still keep a prefix (the file system's journal orders them). Report.FileSubset says
// which. For tests of a layout that claims to need no order among the writes one sync covers.
func (d *Disk) WritesInAnyOrder() {
	d.mu.Lock()
	d.anyOrder = true
	d.mu.Unlock()
}

// NewDisk models the disk under root; what exists under root now counts as durable. seed draws every
// choice PowerLoss makes.
func NewDisk(root string, seed uint64) *Disk {
	d := &Disk{seed: seed, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	abs, err := filepath.Abs(root)
	if err == nil {
		if real, err := filepath.EvalSymlinks(abs); err == nil {
			abs = real
		}
	}
	d.root = filepath.Clean(abs)
	d.reset()
	return d
}

// reset forgets every recorded operation: what exists now is durable.
func (d *Disk) reset() {
	d.live = map[inoKey]*inode{}
	d.cur = names{}
	d.durable = names{}
	d.dirs = map[string][]*nsChange{}
	d.touched = map[string]bool{}
	d.cut.Store(false)
}

// Cut is the moment the power goes, for a workload that is still running: from then on no completion
// reaches the model, so nothing becomes durable any more, and every fsync or fdatasync through a
// wrapped ring completes with EIO, so the workload never acknowledges a sync the power loss undoes.
// Files created and paths renamed after Cut are removed or restored by PowerLoss. Call PowerLoss
// once the rings are stopped; it clears the cut.
func (d *Disk) Cut() { d.cut.Store(true) }

// Root is the directory the Disk models, absolute and with symlinks resolved.
func (d *Disk) Root() string { return d.root }

// Seed is the seed the Disk was made with.
func (d *Disk) Seed() uint64 { return d.seed }

// under says whether p (absolute, clean) lies under root.
func (d *Disk) under(p string) bool {
	return p == d.root || strings.HasPrefix(p, d.root+"/")
}

// resolve turns dirfd and path into an absolute, clean path, as the kernel would resolve it (without
// following symlinks in the last element).
func resolve(dirfd int, path string) (string, error) {
	if filepath.IsAbs(path) {
		return filepath.Clean(path), nil
	}
	var base string
	if dirfd == unix.AT_FDCWD {
		wd, err := os.Getwd()
		if err != nil {
			return "", fmt.Errorf("powerloss: getwd: %w", err)
		}
		base = wd
	} else {
		p, _, err := fdPath(dirfd)
		if err != nil {
			return "", err
		}
		base = p
	}
	return filepath.Join(base, path), nil
}

// fdPath is the path fd names now (readlink of /proc/self/fd), and whether its file was unlinked.
func fdPath(fd int) (string, bool, error) {
	p, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
	if err != nil {
		return "", false, fmt.Errorf("powerloss: fd %d: %w", fd, err)
	}
	if cut, ok := strings.CutSuffix(p, " (deleted)"); ok {
		return cut, true, nil
	}
	return p, false, nil
}

// fdTarget finds the model of the file fd refers to. dir reports a directory (then ino is nil); ok is
// false for an fd that is not a regular file or directory under root.
func (d *Disk) fdTarget(fd int) (path string, ino *inode, dir, ok bool) {
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil {
		return "", nil, false, false
	}
	p, deleted, err := fdPath(fd)
	if err != nil || !d.under(p) {
		return "", nil, false, false
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return p, nil, true, true
	case unix.S_IFREG:
	default:
		return "", nil, false, false
	}
	key := inoKey{st.Dev, st.Ino}
	if n := d.live[key]; n != nil {
		return p, n, false, true
	}
	// First sight of a file: its present bytes count as durable, and so does its name.
	data, err := os.ReadFile(fmt.Sprintf("/proc/self/fd/%d", fd))
	if err != nil {
		return "", nil, false, false
	}
	n := d.newInode(p, data)
	d.live[key] = n
	if !deleted {
		if _, known := d.cur[p]; !known {
			d.cur[p], d.durable[p] = entry{ino: n}, entry{ino: n}
		}
	}
	return p, n, false, true
}

func (d *Disk) newInode(name string, durable []byte) *inode {
	d.nextID++
	return &inode{id: d.nextID, name: name, durable: durable}
}

// knowPath makes sure the model holds path p (and, for a directory, everything under it) as it is on
// disk now, counted as durable, before a namespace change touches it. A missing path is left unknown.
func (d *Disk) knowPath(p string) {
	if _, known := d.cur[p]; known || !d.under(p) || p == d.root || d.cut.Load() {
		return // after Cut nothing new counts as durable
	}
	filepath.WalkDir(p, func(q string, de os.DirEntry, err error) error {
		if err != nil {
			return nil // vanished or unreadable: left outside the model
		}
		if _, known := d.cur[q]; known {
			if de.IsDir() && q != p {
				return filepath.SkipDir
			}
			return nil
		}
		switch {
		case de.IsDir():
			d.cur[q], d.durable[q] = entry{dir: true}, entry{dir: true}
		case de.Type().IsRegular():
			d.knowFile(q)
		}
		return nil
	})
}

// knowFile registers the regular file at p with its present bytes as durable.
func (d *Disk) knowFile(p string) {
	var st unix.Stat_t
	if unix.Lstat(p, &st) != nil {
		return
	}
	key := inoKey{st.Dev, st.Ino}
	n := d.live[key]
	if n == nil {
		data, err := os.ReadFile(p)
		if err != nil {
			return
		}
		n = d.newInode(p, data)
		d.live[key] = n
	}
	d.cur[p], d.durable[p] = entry{ino: n}, entry{ino: n}
}

// record adds a completed, successful namespace change: to the current namespace at once, and to its
// directory's unsynced list.
func (d *Disk) record(c *nsChange) {
	d.seq++
	c.done = d.seq
	d.cur.apply(c)
	dir := c.dirOf()
	d.dirs[dir] = append(d.dirs[dir], c)
}

// syncDir makes durable the changes of dir queued before a sync queued at seq. A change inside a
// directory whose rename is not durable yet is applied under the directory's durable name.
func (d *Disk) syncDir(dir string, seq uint64) {
	var synced, kept []*nsChange
	for _, c := range d.dirs[dir] {
		if c.queued < seq {
			synced = append(synced, c)
		} else {
			kept = append(kept, c)
		}
	}
	d.dirs[dir] = kept
	for _, c := range synced {
		moved := *c
		for _, p := range d.pendingMoves(c.done) {
			moved = moved.movedBack(p)
		}
		d.durable.apply(&moved)
	}
}

// pendingMoves lists the unsynced renames and exchanges that completed before done, latest first.
func (d *Disk) pendingMoves(done uint64) []*nsChange {
	var out []*nsChange
	for _, list := range d.dirs {
		for _, c := range list {
			if (c.kind == nsRename || c.kind == nsExchange) && c.done < done {
				out = append(out, c)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].done > out[j].done })
	return out
}

// nextSeq numbers one queued operation.
func (d *Disk) nextSeq() uint64 {
	d.seq++
	return d.seq
}

// statKey is the identity of the file at path, or ok false.
func statKey(fd int) (inoKey, bool) {
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil {
		return inoKey{}, false
	}
	return inoKey{st.Dev, st.Ino}, true
}

// Wrap returns a ring that runs every operation on r and records the file operations under root.
func (d *Disk) Wrap(r ring.Ring) ring.Ring { return &wrapped{Ring: r, d: d} }
