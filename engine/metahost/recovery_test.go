package metahost

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/engine/vsr"
	"github.com/ringstream/ringstream/shard"
)

func registerOp(id uint16) []byte {
	return meta.AppendOp(nil, meta.RegisterNode{Node: id, Address: fmt.Sprintf("10.0.3.%d:7000", id%250)})
}

// reopen opens node n's replica again from dir (after the test stopped it), as its process would.
func reopen(t *testing.T, n *metaNode, dir string) *metaNode {
	t.Helper()
	return newMetaNode(t, n.id, dir, 2*time.Millisecond, n.node.Addr(), metaNodeOpts{})
}

// A directory that was never formatted, or whose disk was lost, never starts; a formatted one is not
// formatted over; a directory formatted for another node is refused.
func TestMetaStorage_OnlyAFormattedDirectoryStarts(t *testing.T) {
	members := []shard.Member{{Index: 0, Node: 1}, {Index: 1, Node: 2}, {Index: 2, Node: 3}}
	dir := filepath.Join(t.TempDir(), "meta")
	cfg := Config{Dir: dir, Cluster: 42, Node: 2, Members: members, VSR: vsr.DefaultConfig(3, 1)}
	if _, err := New(cfg); !errors.Is(err, ErrUnformatted) {
		t.Fatalf("missing directory: %v, want ErrUnformatted", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := New(cfg); !errors.Is(err, ErrUnformatted) {
		t.Fatalf("empty directory: %v, want ErrUnformatted", err)
	}
	if err := Format(FormatConfig{Dir: dir, Cluster: 42, Node: 3, Replica: 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := New(cfg); !errors.Is(err, ErrStorage) {
		t.Fatalf("formatted for node 3, opened as node 2: %v, want ErrStorage", err)
	}
	if err := Format(FormatConfig{Dir: dir, Cluster: 42, Node: 2, Replica: 1}); !errors.Is(err, ErrFormatted) {
		t.Fatalf("format over a formatted directory: %v, want ErrFormatted", err)
	}
	dir2 := filepath.Join(t.TempDir(), "meta")
	if err := Format(FormatConfig{Dir: dir2, Cluster: 42, Node: 2, Replica: 1}); err != nil {
		t.Fatal(err)
	}
	cfg.Dir = dir2
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if st := g.Status(); !st.Normal || st.Recovering || st.Op != 0 {
		t.Fatalf("new member: %+v, want normal at op 0", st)
	}
}

// On three real nodes: a backup's directory is wiped; the node refuses to start on it; formatted with
// Recover it rejoins through recovery, and then its acknowledgements count: with the third node
// stopped, ops still commit, and every op committed before the wipe is on the recovered replica.
func TestMetaGroup_WipedReplicaRejoinsThroughRecovery(t *testing.T) {
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	nodes := startMetaCluster(t, dirs)
	alive := map[uint16]bool{1: true, 2: true, 3: true}
	waitFor(t, "a primary", func() bool { return primaryOf(nodes, alive) != nil })
	var last uint64
	for req := uint64(1); req <= 5; req++ {
		last = commitOp(t, nodes, alive, 7, req, registerOp(uint16(300+req))).Op
	}
	p := primaryOf(nodes, alive)
	victim := nodes[p.id%3] // a backup
	if err := victim.node.Stop(); err != nil {
		t.Fatal(err)
	}
	victim.group.Close()
	alive[victim.id] = false
	dir := dirs[victim.id-1]
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	cfg := victim.group.cfg
	if _, err := New(cfg); !errors.Is(err, ErrUnformatted) {
		t.Fatalf("wiped directory: %v, want ErrUnformatted", err)
	}
	if err := Format(FormatConfig{Dir: dir, Cluster: 42, Node: victim.id, Replica: uint8(victim.id - 1),
		Recover: true}); err != nil {
		t.Fatal(err)
	}
	back := reopen(t, victim, dir)
	if st := back.group.Status(); !st.Recovering || st.Normal {
		t.Fatalf("replacement replica %+v, want recovering", st)
	}
	nodes[victim.id-1] = back
	startMetaNode(t, back, nodes)
	alive[victim.id] = true
	waitFor(t, "the replacement recovered", func() bool {
		st := back.group.Status()
		return st.Normal && st.Commit >= last
	})
	// The third node goes: only the recovered replica can make a quorum with the primary.
	var third *metaNode
	for _, n := range nodes {
		if n != back && n.id != p.id {
			third = n
		}
	}
	if err := third.node.Stop(); err != nil {
		t.Fatal(err)
	}
	alive[third.id] = false
	last = commitOp(t, nodes, alive, 7, 6, registerOp(306)).Op
	waitFor(t, "the recovered replica at the last commit", func() bool { return back.group.Status().Commit >= last })
	for _, n := range nodes {
		if alive[n.id] {
			_ = n.node.Stop()
		}
	}
	for id := uint16(301); id <= 306; id++ {
		if _, ok := back.group.State().Node(id); !ok {
			t.Errorf("recovered replica lacks registered node %d", id)
		}
	}
}

// Bad copies of the newest superblock on a real disk roll nothing back, one or three of four: the
// replica reopens at its op. A bad log record that no copy carries leaves a state the replica cannot
// prove: it recovers through the group.
func TestMetaStorage_BadSuperblockCopiesRollNothingBack(t *testing.T) {
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	nodes := startMetaCluster(t, dirs)
	alive := map[uint16]bool{1: true, 2: true, 3: true}
	waitFor(t, "a primary", func() bool { return primaryOf(nodes, alive) != nil })
	var last uint64
	for req := uint64(1); req <= 3; req++ {
		last = commitOp(t, nodes, alive, 8, req, registerOp(uint16(400+req))).Op
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
	copies := headerCopies(t, dirs[1])
	newest, slot := vsr.Superblock{}, -1
	var inline []byte
	for i, c := range copies {
		if sb, in, err := vsr.DecodeSuperblockCopy(c); err == nil && (slot < 0 || sb.Sequence > newest.Sequence) {
			newest, slot, inline = sb, i, in
		}
	}
	// Op 1's record is on the chain; the newest copies carry it inline only when the last persist
	// wrote it (a view change's or a catch-up's persist of the whole log, under load).
	carriesFirst := false
	for in := inline; len(in) > 0; {
		e, n, err := vsr.DecodeLogRecord(in)
		if err != nil {
			t.Fatalf("inline records of the newest copy: %v", err)
		}
		carriesFirst = carriesFirst || e.Op == 1
		in = in[n:]
	}
	if newest.Op < last {
		t.Fatalf("newest superblock at op %d, want at least %d", newest.Op, last)
	}
	area := vsr.AreaOf(newest.Sequence) * vsr.SuperblockCopies
	reopen := func() Status {
		t.Helper()
		g, err := New(nodes[1].group.cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		return g.Status()
	}
	for _, bad := range [][]int{{0}, {0, 1, 3}} {
		for _, c := range bad {
			patchLogFile(t, dirs[1], int64((area+c)*vsr.CopySlotSize+20), []byte{0xee}) // the copy's op
		}
		if st := reopen(); st.Recovering || st.Op < last {
			t.Fatalf("%d bad copies of four: reopened %+v, want op %d", len(bad), st, last)
		}
	}
	patchLogFile(t, dirs[1], metaHeaderSize+20, []byte{0xee}) // the first record: op 1, on the chain
	st := reopen()
	switch {
	case carriesFirst && (st.Recovering || st.Op < last):
		t.Fatalf("a bad record the newest copies carry: %+v, want it repaired at op %d", st, last)
	case !carriesFirst && (!st.Recovering || st.Normal):
		t.Fatalf("a bad record no copy carries: %+v, want recovering", st)
	}
}
