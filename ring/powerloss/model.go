package powerloss

import (
	"path/filepath"
	"sort"
	"strings"
)

// inode is the model of one file: its durable bytes and the unsynced operations on it, in the order
// they completed.
type inode struct {
	id      uint64 // creation order, for a deterministic draw
	name    string // a path it had, for reports
	durable []byte
	pending []fileOp
}

type fileOpKind uint8

const (
	opWrite fileOpKind = iota + 1
	opTruncate
	opZero // a punched hole
	opGrow // fallocate mode 0: the size grows to at least size
)

// fileOp is one completed, unsynced change to a file.
type fileOp struct {
	kind   fileOpKind
	off    int64
	data   []byte // opWrite: the bytes written (a copy)
	size   int64  // opTruncate: the new size; opZero: the length; opGrow: the least size
	queued uint64 // queue sequence number, for the sync rule
}

// apply returns b changed by op.
func (op *fileOp) apply(b []byte) []byte {
	switch op.kind {
	case opWrite:
		return writeAt(b, op.data, op.off)
	case opTruncate:
		return resize(b, op.size)
	case opGrow:
		if int64(len(b)) < op.size {
			return resize(b, op.size)
		}
	case opZero:
		end := min(op.off+op.size, int64(len(b)))
		for i := op.off; i < end; i++ {
			b[i] = 0
		}
	}
	return b
}

func writeAt(b, data []byte, off int64) []byte {
	if end := off + int64(len(data)); end > int64(len(b)) {
		b = resize(b, end)
	}
	copy(b[off:], data)
	return b
}

func resize(b []byte, size int64) []byte {
	if size <= int64(len(b)) {
		return b[:size]
	}
	return append(b, make([]byte, size-int64(len(b)))...)
}

// size is the file's size with every operation applied, synced or not: the size the file has now.
func (n *inode) size() int64 {
	size := int64(len(n.durable))
	for i := range n.pending {
		op := &n.pending[i]
		switch op.kind {
		case opWrite:
			size = max(size, op.off+int64(len(op.data)))
		case opTruncate:
			size = op.size
		case opGrow:
			size = max(size, op.size)
		}
	}
	return size
}

// sync makes durable the pending operations queued before a sync queued at seq, and keeps the rest.
func (n *inode) sync(seq uint64) {
	kept := n.pending[:0]
	for i := range n.pending {
		op := &n.pending[i]
		if op.queued < seq {
			n.durable = op.apply(n.durable)
		} else {
			kept = append(kept, *op)
		}
	}
	n.pending = kept
}

// entry is what a name points at: a directory, or a file's inode.
type entry struct {
	dir bool
	ino *inode
}

type nsKind uint8

const (
	nsCreate nsKind = iota + 1
	nsMkdir
	nsUnlink
	nsRename
	nsExchange
)

// nsChange is one completed, unsynced namespace change, kept in the list of the directory whose fsync
// makes it durable.
type nsChange struct {
	kind   nsKind
	path   string // created, made, removed, or the rename's source
	path2  string // the rename's destination
	ent    entry  // what nsCreate creates
	queued uint64
	done   uint64
}

func (c *nsChange) String() string {
	switch c.kind {
	case nsCreate:
		return "create " + c.path
	case nsMkdir:
		return "mkdir " + c.path
	case nsUnlink:
		return "unlink " + c.path
	case nsRename:
		return "rename " + c.path + " -> " + c.path2
	}
	return "exchange " + c.path + " <-> " + c.path2
}

// dirOf is the directory whose fsync makes c durable.
func (c *nsChange) dirOf() string {
	if c.kind == nsRename || c.kind == nsExchange {
		return filepath.Dir(c.path2)
	}
	return filepath.Dir(c.path)
}

// names is a namespace: path to entry, for the paths the model knows.
type names map[string]entry

func (ns names) clone() names {
	out := make(names, len(ns))
	for k, v := range ns {
		out[k] = v
	}
	return out
}

// apply changes ns by c. It reports false for a rename whose source ns lacks (an earlier change it
// depends on was dropped), which then changes nothing.
func (ns names) apply(c *nsChange) bool {
	switch c.kind {
	case nsCreate:
		ns[c.path] = c.ent
	case nsMkdir:
		ns[c.path] = entry{dir: true}
	case nsUnlink:
		ns.removeTree(c.path)
	case nsRename:
		if _, ok := ns[c.path]; !ok {
			return false
		}
		moved := ns.takeTree(c.path, c.path2)
		ns.removeTree(c.path2)
		for k, v := range moved {
			ns[k] = v
		}
	case nsExchange:
		_, okA := ns[c.path]
		_, okB := ns[c.path2]
		if !okA || !okB {
			return false
		}
		ma := ns.takeTree(c.path, c.path2)
		mb := ns.takeTree(c.path2, c.path)
		for k, v := range ma {
			ns[k] = v
		}
		for k, v := range mb {
			ns[k] = v
		}
	}
	return true
}

// takeTree removes p and everything under it from ns and returns them renamed under to.
func (ns names) takeTree(p, to string) names {
	out := names{}
	for _, k := range ns.tree(p) {
		out[to+k[len(p):]] = ns[k]
		delete(ns, k)
	}
	return out
}

func (ns names) removeTree(p string) {
	for _, k := range ns.tree(p) {
		delete(ns, k)
	}
}

// tree lists p and the paths under it that ns holds, sorted.
func (ns names) tree(p string) []string {
	var out []string
	for k := range ns {
		if k == p || strings.HasPrefix(k, p+"/") {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// sortedKeys lists ns's paths in order, so every walk over a namespace is deterministic.
func (ns names) sortedKeys() []string {
	out := make([]string, 0, len(ns))
	for k := range ns {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// made lists the paths c leaves an entry at: what a later change that uses them depends on.
func (c *nsChange) made() []string {
	switch c.kind {
	case nsCreate, nsMkdir:
		return []string{c.path}
	case nsRename:
		return []string{c.path2}
	case nsExchange:
		return []string{c.path, c.path2}
	}
	return nil
}

// freed lists the paths c takes an entry away from.
func (c *nsChange) freed() []string {
	if c.kind == nsUnlink || c.kind == nsRename {
		return []string{c.path}
	}
	return nil
}

// dependsOn says whether c, completed after p, cannot reach the disk without p: c uses a path p made
// (a rename of a file created unsynced), or a directory p created above it (a file in a new
// directory), c puts an entry where p freed one (a create of the name an unlink or rename emptied),
// or c removes a directory p emptied (an rmdir after the unlink of its last file). A change inside
// a directory p only moved does not depend on p: it changed that directory under whatever name it
// has (see movedBack).
func (c *nsChange) dependsOn(p *nsChange) bool {
	for _, m := range p.made() {
		if c.path == m || c.path2 == m {
			return true
		}
		if (p.kind == nsCreate || p.kind == nsMkdir) && c.touches(m) {
			return true
		}
	}
	for _, f := range p.freed() {
		for _, t := range c.made() {
			if atOrUnder(t, f) {
				return true
			}
		}
		if c.kind == nsUnlink && f != c.path && atOrUnder(f, c.path) {
			return true
		}
	}
	return false
}

// movedBack is c with its paths named as they are when p, a rename or exchange that completed
// before c, does not survive: a change inside a directory p moved lands in that directory under its
// old name.
func (c nsChange) movedBack(p *nsChange) nsChange {
	back := func(q string) string {
		switch {
		case q == "":
		case p.kind == nsRename && under(q, p.path2):
			return p.path + q[len(p.path2):]
		case p.kind == nsExchange && under(q, p.path2):
			return p.path + q[len(p.path2):]
		case p.kind == nsExchange && under(q, p.path):
			return p.path2 + q[len(p.path):]
		}
		return q
	}
	c.path, c.path2 = back(c.path), back(c.path2)
	return c
}

// under says whether path q lies strictly under p.
func under(q, p string) bool { return strings.HasPrefix(q, p+"/") }

// touches says whether any path of c lies at or under p.
func (c *nsChange) touches(p string) bool {
	if atOrUnder(c.path, p) {
		return true
	}
	return c.path2 != "" && atOrUnder(c.path2, p)
}

// atOrUnder says whether path q is p or lies under it.
func atOrUnder(q, p string) bool { return q == p || strings.HasPrefix(q, p+"/") }
