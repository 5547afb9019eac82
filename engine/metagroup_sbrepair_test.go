package engine

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/ringstream/ringstream/engine/vsr"
)

// writeCopies sets superblock copy i of the file at path to copies[i] where copies[i] is not nil, and
// returns the file's copies as they are afterwards.
func writeCopies(t *testing.T, path string, copies [vsr.SuperblockCopies][]byte) [vsr.SuperblockCopies][]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range copies {
		if c != nil {
			copy(b[i*metaSuperblockStride:], c)
		}
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return readCopies(t, path)
}

func readCopies(t *testing.T, path string) [vsr.SuperblockCopies][]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out [vsr.SuperblockCopies][]byte
	for i := range out {
		out[i] = b[i*metaSuperblockStride : i*metaSuperblockStride+vsr.SuperblockSize]
	}
	return out
}

// torn is a copy cut by a crash in the middle of its write: the first half of the new bytes over the
// old ones (its checksum fails).
func torn(newer, older []byte) []byte {
	c := append([]byte(nil), older...)
	copy(c[:len(c)/2], newer[:len(newer)/2])
	return c
}

// The real storage repairs its superblock copies at open (the simulator's seed 928 on real files). A
// crash while a persist writes its copies leaves copies 0 and 1 new, copy 2 torn and copy 3 old; the
// replica reopens at the new superblock, held by two copies. The next persist's copies are cut after
// copy 0, with copy 1 torn. Without the repair at the first open no two copies would be alike and the
// replica would go into recovery for a state it never lost; with it, it reopens at its op.
func TestMetaStorage_SuperblockCopiesRepairedAtOpen(t *testing.T) {
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	nodes := startMetaCluster(t, dirs)
	alive := map[uint16]bool{1: true, 2: true, 3: true}
	waitFor(t, "a primary", func() bool { return primaryOf(nodes, alive) != nil })
	var last uint64
	for req := uint64(1); req <= 3; req++ {
		last = commitOp(t, nodes, alive, 8, req, registerOp(uint16(500+req))).Op
	}
	waitFor(t, "all at the last commit", func() bool {
		for _, n := range nodes {
			if n.group.Status().Op < last {
				return false
			}
		}
		return true
	})
	for _, n := range nodes {
		_ = n.node.Stop()
		n.group.Close()
	}
	path := filepath.Join(dirs[1], metaSuperblockFile)
	cur := readCopies(t, path)
	inForce, err := vsr.DecodeSuperblock(cur[0])
	if err != nil {
		t.Fatal(err)
	}
	if inForce.Op < last {
		t.Fatalf("superblock at op %d, want at least %d", inForce.Op, last)
	}
	older := inForce
	older.Sequence--
	oldBytes := vsr.AppendSuperblock(nil, older)
	newBytes := append([]byte(nil), cur[0]...)

	// The first crash: copies 0 and 1 new, 2 torn, 3 old.
	writeCopies(t, path, [vsr.SuperblockCopies][]byte{2: torn(newBytes, oldBytes), 3: oldBytes})
	g, err := NewMetaGroup(nodes[1].group.cfg)
	if err != nil {
		t.Fatal(err)
	}
	st := g.Status()
	g.Close()
	if st.Recovering || st.Op < inForce.Op {
		t.Fatalf("after the first crash: %+v, want op %d from copies 0 and 1", st, inForce.Op)
	}
	for i, c := range readCopies(t, path) {
		if string(c) != string(newBytes) {
			t.Fatalf("after the open: copy %d is not the superblock in force", i)
		}
	}

	// The second crash: the next persist wrote its copy 0 and tore copy 1.
	next := inForce
	next.Sequence++
	next.Op++
	nextBytes := vsr.AppendSuperblock(nil, next)
	cur = readCopies(t, path)
	writeCopies(t, path, [vsr.SuperblockCopies][]byte{0: nextBytes, 1: torn(nextBytes, cur[1])})
	g2, err := NewMetaGroup(nodes[1].group.cfg)
	if err != nil {
		t.Fatal(err)
	}
	st = g2.Status()
	g2.Close()
	if st.Recovering || st.Op != inForce.Op {
		t.Fatalf("after the second crash: %+v, want op %d from copies 2 and 3, not recovering", st, inForce.Op)
	}

	// Storage with no quorum is not repaired: a lone copy never becomes the superblock in force, and
	// every open recovers until a persist rewrites the copies.
	cur = readCopies(t, path)
	bad := writeCopies(t, path, [vsr.SuperblockCopies][]byte{0: nextBytes, 1: torn(nextBytes, cur[1]),
		2: torn(nextBytes, cur[2])})
	for open := 1; open <= 2; open++ {
		g, err := NewMetaGroup(nodes[1].group.cfg)
		if err != nil {
			t.Fatal(err)
		}
		st := g.Status()
		g.Close()
		if !st.Recovering {
			t.Fatalf("no quorum, open %d: %+v, want recovering", open, st)
		}
	}
	for i, c := range readCopies(t, path) {
		if string(c) != string(bad[i]) {
			t.Fatalf("no quorum: the open rewrote copy %d", i)
		}
	}
}
