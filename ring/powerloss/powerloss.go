package powerloss

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Report says what one PowerLoss dropped or tore. String is a one-line description starting with the
// seed, so a failing test that prints it is a one-line repro.
type Report struct {
	Seed      uint64
	Loss      int  // which PowerLoss of this Disk it was: 1 for the first
	DirSubset bool // directories kept a random subset of their unsynced changes, not a prefix
	// FileSubset: files kept any subset of their unsynced writes, not a prefix (WritesInAnyOrder).
	FileSubset bool
	Unsynced   int      // unsynced file operations and namespace changes the model held
	Dropped    []string // what was lost, e.g. "write data/0.log@4096+512", "rename a -> b"
	Torn       []string // writes kept only in part, e.g. "write data/0.log@0+4096 kept 1536"
}

func (r Report) String() string {
	var b strings.Builder
	order := "prefix"
	if r.DirSubset {
		order = "subset"
	}
	fmt.Fprintf(&b, "powerloss seed=%d loss=%d: dirs keep a %s, %d unsynced, dropped %d, torn %d",
		r.Seed, r.Loss, order, r.Unsynced, len(r.Dropped), len(r.Torn))
	if r.FileSubset {
		b.WriteString("; files keep a subset of their writes")
	}
	if len(r.Dropped) > 0 {
		b.WriteString("; dropped: " + strings.Join(r.Dropped, ", "))
	}
	if len(r.Torn) > 0 {
		b.WriteString("; torn: " + strings.Join(r.Torn, ", "))
	}
	return b.String()
}

// Lost says whether anything was dropped or torn.
func (r Report) Lost() bool { return len(r.Dropped)+len(r.Torn) > 0 }

// ErrRewrite: PowerLoss could not rewrite the files under root to the state it drew.
var ErrRewrite = errors.New("powerloss: rewriting the disk failed")

// PowerLoss rewrites the files and directories under root that the model knows to one state a power
// loss could leave (see the package comment), then forgets what it recorded: what exists now is
// durable. Call it after the wrapped rings are closed or abandoned, and reopen every file afterwards.
func (d *Disk) PowerLoss() (Report, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.losses++
	rep := Report{Seed: d.seed, Loss: d.losses}
	final := d.keepNamespace(d.rng, &rep)
	rep.FileSubset = d.anyOrder && d.rng.IntN(2) == 0
	contents := d.keepContents(d.rng, final, &rep)
	err := d.rewrite(final, contents, d.root)
	d.reset()
	if err != nil {
		return rep, fmt.Errorf("%w: %s: %w", ErrRewrite, rep, err)
	}
	return rep, nil
}

// PowerLossCopy is PowerLoss into a copy: it copies the tree under root to dst (which must not exist
// yet), then rewrites the copy to one state a power loss could leave, drawn from seed alone. The real
// files and the model stay as they are, so one recorded run yields as many power-loss states as there
// are seeds, each without running the workload again. Report.Seed is seed; Report.Loss is 0. A copy
// costs file creations and removals, so a dst on tmpfs (/dev/shm) draws many times faster than one
// on a journaling file system.
func (d *Disk) PowerLossCopy(dst string, seed uint64) (Report, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	rep := Report{Seed: seed}
	final := d.keepNamespace(rng, &rep)
	rep.FileSubset = d.anyOrder && rng.IntN(2) == 0
	contents := d.keepContents(rng, final, &rep)
	if err := copyTree(d.root, dst); err != nil {
		return rep, fmt.Errorf("%w: copy to %s: %w", ErrRewrite, dst, err)
	}
	if err := d.rewrite(final, contents, dst); err != nil {
		return rep, fmt.Errorf("%w: %s: %w", ErrRewrite, rep, err)
	}
	return rep, nil
}

// copyTree copies the directories and regular files under src to dst.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, de os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		to := filepath.Join(dst, p[len(src):])
		switch {
		case de.IsDir():
			return os.Mkdir(to, 0o755)
		case de.Type().IsRegular():
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return os.WriteFile(to, data, 0o644)
		}
		return nil
	})
}

// keepNamespace draws which unsynced namespace changes survive and applies them to the durable
// namespace in the order they completed. Each power loss first draws one of two orders: per
// directory a random prefix of its changes, or a random subset of them (each directory draws how
// likely each of its changes is to be kept). In both, a kept change whose dependency was dropped is
// dropped too (nsChange.dependsOn), across directories as well, and one inside a directory whose
// rename was dropped applies to that directory under its old name (nsChange.movedBack).
func (d *Disk) keepNamespace(rng *rand.Rand, rep *Report) names {
	final := d.durable.clone()
	rep.DirSubset = rng.IntN(2) == 0
	dirs := make([]string, 0, len(d.dirs))
	for dir := range d.dirs {
		dirs = append(dirs, dir)
	}
	sort.Strings(dirs)
	type drawn struct {
		c    *nsChange
		kept bool
	}
	var all []drawn
	for _, dir := range dirs {
		list := d.dirs[dir]
		keep, odds := rng.IntN(len(list)+1), rng.Float64()
		for i, c := range list {
			kept := i < keep
			if rep.DirSubset {
				kept = rng.Float64() < odds
			}
			all = append(all, drawn{c, kept})
		}
		rep.Unsynced += len(list)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].c.done < all[j].c.done })
	var dropped []*nsChange
	for _, x := range all {
		for _, p := range dropped {
			if x.kept && x.c.dependsOn(p) {
				x.kept = false
			}
		}
		c := *x.c
		for i := len(dropped) - 1; i >= 0 && x.kept; i-- {
			c = c.movedBack(dropped[i])
		}
		if !x.kept || !final.apply(&c) {
			dropped = append(dropped, x.c)
			rep.Dropped = append(rep.Dropped, d.rel(x.c.String()))
		}
	}
	return final
}

// keepContents draws, per file that survives, how many of its unsynced operations it keeps and
// whether the last kept write is torn, and returns each file's bytes.
func (d *Disk) keepContents(rng *rand.Rand, final names, rep *Report) map[*inode][]byte {
	out := map[*inode][]byte{}
	for _, p := range final.sortedKeys() {
		n := final[p].ino
		if n == nil {
			continue
		}
		if _, done := out[n]; done {
			continue
		}
		out[n] = d.keepFile(rng, n, rep)
	}
	return out
}

func (d *Disk) keepFile(rng *rand.Rand, n *inode, rep *Report) []byte {
	if rep.FileSubset {
		return d.keepFileSubset(rng, n, rep)
	}
	b := append([]byte(nil), n.durable...)
	rep.Unsynced += len(n.pending)
	keep := rng.IntN(len(n.pending) + 1)
	for i := range n.pending {
		op := &n.pending[i]
		if i >= keep {
			rep.Dropped = append(rep.Dropped, d.rel(op.describe(n.name)))
			continue
		}
		if i == keep-1 && op.kind == opWrite && len(op.data) > 0 && rng.IntN(2) == 0 {
			cut := tearAt(rng, op)
			rep.Torn = append(rep.Torn, d.rel(fmt.Sprintf("%s kept %d", op.describe(n.name), cut)))
			torn := *op
			torn.data = op.data[:cut]
			b = torn.apply(b)
			continue
		}
		b = op.apply(b)
	}
	return b
}

// keepFileSubset keeps a prefix of the file's unsynced truncates and fallocates and, of its unsynced
// writes, any subset: each write lost, whole or torn, drawn alone. What is kept applies in the order it
// completed.
func (d *Disk) keepFileSubset(rng *rand.Rand, n *inode, rep *Report) []byte {
	b := append([]byte(nil), n.durable...)
	rep.Unsynced += len(n.pending)
	meta := 0
	for i := range n.pending {
		if n.pending[i].kind != opWrite {
			meta++
		}
	}
	keepMeta := rng.IntN(meta + 1)
	for i := range n.pending {
		op := &n.pending[i]
		keep := true
		if op.kind != opWrite {
			keep = keepMeta > 0
			keepMeta--
		} else if len(op.data) > 0 {
			switch rng.IntN(3) {
			case 0:
				keep = false
			case 1:
				cut := tearAt(rng, op)
				rep.Torn = append(rep.Torn, d.rel(fmt.Sprintf("%s kept %d", op.describe(n.name), cut)))
				torn := *op
				torn.data = op.data[:cut]
				b = torn.apply(b)
				continue
			}
		}
		if !keep {
			rep.Dropped = append(rep.Dropped, d.rel(op.describe(n.name)))
			continue
		}
		b = op.apply(b)
	}
	return b
}

// tearAt draws how many bytes of a write reach the disk: a whole number of 512-byte sectors of the
// file, or any number of bytes; always fewer than all of them.
func tearAt(rng *rand.Rand, op *fileOp) int {
	n := len(op.data)
	if rng.IntN(2) == 0 {
		return rng.IntN(n) // byte granularity
	}
	// Sector granularity: the cut falls on a sector boundary of the file inside the write.
	var cuts []int
	for c := 0; c < n; c++ {
		if (op.off+int64(c))%512 == 0 {
			cuts = append(cuts, c)
			c += 511
		}
	}
	if len(cuts) == 0 {
		return 0
	}
	return cuts[rng.IntN(len(cuts))]
}

func (op *fileOp) describe(name string) string {
	switch op.kind {
	case opWrite:
		return fmt.Sprintf("write %s@%d+%d", name, op.off, len(op.data))
	case opTruncate:
		return fmt.Sprintf("truncate %s to %d", name, op.size)
	case opZero:
		return fmt.Sprintf("punch %s@%d+%d", name, op.off, op.size)
	}
	return fmt.Sprintf("fallocate %s to %d", name, op.size)
}

// rel shortens the paths in s to be relative to root.
func (d *Disk) rel(s string) string { return strings.ReplaceAll(s, d.root+"/", "") }

// rewrite makes the tree at base (root itself, or a copy of it) match final for every path the model
// knows: paths missing from final are removed, directories made, and each file written as a new file
// renamed over its name.
func (d *Disk) rewrite(final names, contents map[*inode][]byte, base string) error {
	affected := map[string]bool{}
	for p := range d.touched {
		affected[p] = true
	}
	for p := range d.cur {
		affected[p] = true
	}
	for p := range final {
		affected[p] = true
	}
	for _, list := range d.dirs {
		for _, c := range list {
			affected[c.path] = true
			if c.path2 != "" {
				affected[c.path2] = true
			}
		}
	}
	paths := make([]string, 0, len(affected))
	for p := range affected {
		paths = append(paths, p)
	}
	at := func(p string) string { return base + p[len(d.root):] }
	sort.Sort(sort.Reverse(sort.StringSlice(paths))) // children before parents
	for _, p := range paths {
		e, keep := final[p]
		st, err := os.Lstat(at(p))
		if err != nil {
			continue
		}
		if !keep || e.dir != st.IsDir() {
			if err := os.RemoveAll(at(p)); err != nil {
				return err
			}
		}
	}
	sort.Strings(paths) // parents before children
	for _, p := range paths {
		e, keep := final[p]
		if !keep {
			continue
		}
		if e.dir {
			if err := os.Mkdir(at(p), 0o755); err != nil && !errors.Is(err, os.ErrExist) && !errors.Is(err, os.ErrNotExist) {
				return err
			}
			continue
		}
		if err := replaceFile(at(p), contents[e.ino]); err != nil {
			return err
		}
	}
	return nil
}

// replaceFile writes data to a new file beside p and renames it over p, so descriptors still open on
// the old file (and a kernel worker still writing through one) never touch the new state.
func replaceFile(p string, data []byte) error {
	if _, err := os.Stat(filepath.Dir(p)); err != nil {
		return nil // its directory did not survive: neither does the file
	}
	perm := os.FileMode(0o644)
	if st, err := os.Stat(p); err == nil {
		perm = st.Mode().Perm()
	}
	tmp := p + ".powerloss-new"
	if err := os.WriteFile(tmp, data, perm); err != nil {
		return err
	}
	return os.Rename(tmp, p)
}
