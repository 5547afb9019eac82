package engine

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ringstream/ringstream/ring"
)

var metaPowerSeeds = flag.Int("meta.powerloss.seeds", 8, "seeds of the metadata group's power-loss test")

// metaPowerDisk is the storage fault model of the metadata group's power-loss tests (test-only, until
// ring/powerloss is on main): a ring decorator over a replica's real files. It keeps, per file, the
// bytes its last fsync through the ring made durable and a journal of the writes completed since.
// Cut is the moment the power goes: from then on no completion reaches the disk (writes are not
// journaled, fsyncs record nothing and report EIO, so the replica learns that nothing became durable
// and acknowledges nothing more). PowerLoss then rewrites each file to its durable bytes overlaid with
// a random subset of the 512-byte sectors of the journaled writes, at a random length between the
// durable one and the end of those writes: lost, reordered and torn unsynced writes. The replica's
// files are fixed after FormatMeta (no compaction in these tests), so directory entries are not
// modelled.
type metaPowerDisk struct {
	dir     string
	rng     *rand.Rand
	cut     atomic.Bool
	mu      sync.Mutex // completions run on the shard goroutine
	durable map[uint64][]byte
	journal map[uint64][]metaWrite
}

type metaWrite struct {
	off  int64
	data []byte
}

func newMetaPowerDisk(t testing.TB, dir string, seed uint64) *metaPowerDisk {
	d := &metaPowerDisk{dir: dir, rng: rand.New(rand.NewPCG(seed, 0x3e7a)), durable: map[uint64][]byte{},
		journal: map[uint64][]metaWrite{}}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries { // FormatMeta synced every file
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		d.durable[inodeOfPath(filepath.Join(dir, e.Name()))] = b
	}
	return d
}

func inodeOfPath(path string) uint64 {
	var st unix.Stat_t
	if unix.Stat(path, &st) != nil {
		return 0
	}
	return st.Ino
}

func inodeOfFD(fd int) uint64 {
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil {
		panic("metaPowerDisk: fstat")
	}
	return st.Ino
}

// Wrap returns rg with every write and fsync watched.
func (d *metaPowerDisk) Wrap(rg ring.Ring) ring.Ring { return &metaPowerRing{Ring: rg, d: d} }

type metaPowerRing struct {
	ring.Ring
	d *metaPowerDisk
}

type metaWatch struct {
	h    ring.Handler
	d    *metaPowerDisk
	fd   int
	sync bool
	off  int64
	buf  []byte
}

func (w *metaWatch) Complete(c ring.Completion) {
	d := w.d
	switch {
	case d.cut.Load():
		if w.sync {
			c.Res = -int32(unix.EIO)
		}
	case c.Res < 0:
	case w.sync:
		b, err := os.ReadFile(fmt.Sprintf("/proc/self/fd/%d", w.fd))
		if err != nil {
			panic(fmt.Sprintf("metaPowerDisk: read a synced file: %v", err))
		}
		ino := inodeOfFD(w.fd)
		d.mu.Lock()
		d.durable[ino], d.journal[ino] = b, nil
		d.mu.Unlock()
	default:
		ino := inodeOfFD(w.fd)
		d.mu.Lock()
		d.journal[ino] = append(d.journal[ino], metaWrite{off: w.off, data: append([]byte(nil), w.buf[:c.Res]...)})
		d.mu.Unlock()
	}
	w.h.Complete(c)
}

func (r *metaPowerRing) Write(h ring.Handler, tag uint64, fd int, buf []byte, off int64, fl ring.Flags) error {
	return r.Ring.Write(&metaWatch{h: h, d: r.d, fd: fd, off: off, buf: buf}, tag, fd, buf, off, fl)
}

func (r *metaPowerRing) Fsync(h ring.Handler, tag uint64, fd int, datasync bool, fl ring.Flags) error {
	return r.Ring.Fsync(&metaWatch{h: h, d: r.d, fd: fd, sync: true}, tag, fd, datasync, fl)
}

// Cut is the moment the power goes: nothing reaches the disk after it.
func (d *metaPowerDisk) Cut() { d.cut.Store(true) }

// PowerLoss rewrites every file of the directory to what survives the cut. Call it once the node
// stopped.
func (d *metaPowerDisk) PowerLoss(t testing.TB) {
	d.mu.Lock()
	defer d.mu.Unlock()
	entries, err := os.ReadDir(d.dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		path := filepath.Join(d.dir, e.Name())
		ino := inodeOfPath(path)
		out := append([]byte(nil), d.durable[ino]...)
		end := len(out)
		for _, w := range d.journal[ino] {
			end = max(end, int(w.off)+len(w.data))
		}
		out = append(out, make([]byte, end-len(out))...)
		for _, w := range d.journal[ino] {
			for at := 0; at < len(w.data); {
				// Whole 512-byte sectors of the file: each reaches the disk or not.
				n := min(len(w.data)-at, 512-int(w.off+int64(at))%512)
				if d.rng.IntN(2) == 0 {
					copy(out[int(w.off)+at:], w.data[at:at+n])
				}
				at += n
			}
		}
		size := len(d.durable[ino])
		if end > size {
			size += d.rng.IntN(end - size + 1)
		}
		if err := os.WriteFile(path, out[:size], 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// metaPowerLossRun is one seed: nodes 1 and 2 commit ops while node 3 is down, so every one of them is
// on node 2; the power of node 2 is cut while its clients still have ops in flight, and
// its files keep what the fault model lets survive. Then node 1 goes, nodes 2 and 3 must elect a
// primary from what they hold, and every op the clients saw committed must be there. It returns the
// ops lost, and whether the group made progress at all (always, or the test fails, unless broken).
func metaPowerLossRun(t *testing.T, seed uint64, broken bool) (lost []uint16, progressed bool) {
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	var disk2 *metaPowerDisk
	disk2 = newMetaPowerDisk(t, dirs[1], seed)
	nodes := startMetaClusterTB(t, dirs, 2*time.Millisecond, func(id uint16) metaNodeOpts {
		if id == 2 {
			return metaNodeOpts{wrap: disk2.Wrap}
		}
		return metaNodeOpts{}
	}, func(n *metaNode) { n.group.store.brokenNoSuperblockSync = broken })
	alive := map[uint16]bool{1: true, 2: true, 3: true}
	waitFor(t, "a primary", func() bool { return primaryOf(nodes, alive) != nil })
	if err := nodes[2].node.Stop(); err != nil {
		t.Fatal(err)
	}
	nodes[2].group.Close()
	alive = map[uint16]bool{1: true, 2: true} // written before the clients start, read by them
	var mu sync.Mutex
	committed := map[uint16]bool{}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for c := uint64(1); c <= 3; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for req := uint64(1); ; {
				id := uint16(100*c + req)
				p := primaryOf(nodes, alive)
				if p == nil {
					p = nodes[0]
				}
				select {
				case <-stop:
					return
				case res := <-p.group.Propose(c, req, registerOp(id)):
					if res.Err != nil {
						time.Sleep(time.Millisecond) // not (or no longer) the primary: again
						continue
					}
					mu.Lock()
					committed[id] = true
					mu.Unlock()
					req++
				}
			}
		}()
	}
	waitFor(t, "ops committing", func() bool { mu.Lock(); defer mu.Unlock(); return len(committed) >= 10+int(seed%7) })
	disk2.Cut()
	waitFor(t, "node 2 out", func() bool { return nodes[1].group.Status().PersistErr != nil })
	close(stop)
	wg.Wait()
	for _, n := range nodes[:2] {
		_ = n.node.Stop()
		n.group.Close()
	}
	disk2.PowerLoss(t)
	// Node 1 stays down; nodes 2 and 3 come back from their files.
	alive = map[uint16]bool{2: true, 3: true}
	var back []*metaNode
	for _, i := range []int{1, 2} {
		n := newMetaNode(t, nodes[i].id, dirs[i], 2*time.Millisecond, nodes[i].node.Addr(), metaNodeOpts{})
		n.group.store.brokenNoSuperblockSync = broken
		nodes[i] = n
		back = append(back, n)
	}
	for _, n := range back {
		startMetaNode(t, n, nodes)
	}
	t.Cleanup(func() {
		for _, n := range back {
			_ = n.node.Stop()
			n.group.Close()
		}
	})
	var last uint64
	if !broken {
		last = commitOp(t, nodes, alive, 9, 1, registerOp(9999)).Op
	} else if res, ok := tryCommit(nodes, alive, 9, 1, registerOp(9999), 3*time.Second); ok {
		last = res.Op
	} else {
		// The power-lost replica could not prove its state (it recovers) while the only other
		// replica that has the ops is down: the storage test would fail here too.
		t.Logf("seed %d: the group made no progress after the power loss", seed)
		return nil, false
	}
	waitFor(t, "both at the new op", func() bool {
		return back[0].group.Status().Commit >= last && back[1].group.Status().Commit >= last
	})
	for _, n := range back {
		_ = n.node.Stop()
	}
	for id := range committed {
		if _, ok := back[0].group.State().Node(id); !ok {
			lost = append(lost, id)
		}
	}
	return lost, true
}

// A node killed during a persist and power-lost keeps every op it acknowledged: the group elects a
// primary from the power-lost replica and one that missed every op, and nothing committed is lost.
func TestMetaGroup_PowerLossKeepsAcknowledgedOps(t *testing.T) {
	for seed := uint64(1); seed <= uint64(*metaPowerSeeds); seed++ {
		if lost, _ := metaPowerLossRun(t, seed, false); len(lost) > 0 {
			t.Fatalf("seed %d: committed ops lost: register node %v (replay: -meta.powerloss.seeds=%d)", seed, lost,
				seed)
		}
	}
}

// The broken variant: with the superblock written and never synced, a power loss rolls the replica
// back (a committed op is lost) or leaves copies it cannot prove (it recovers, and with the only other
// holder of the ops down the group stops): some seed fails as the storage test would.
func TestMetaGroup_PowerLossCatchesSuperblockWithoutSync(t *testing.T) {
	for seed := uint64(1); seed <= uint64(*metaPowerSeeds); seed++ {
		lost, progressed := metaPowerLossRun(t, seed, true)
		if len(lost) > 0 || !progressed {
			t.Logf("caught at seed %d: %d committed ops lost, progress %v", seed, len(lost), progressed)
			return
		}
	}
	t.Fatalf("the superblock without fdatasync survived %d seeds", *metaPowerSeeds)
}

// tryCommit is commitOp that gives up after bound instead of failing the test.
func tryCommit(nodes []*metaNode, alive map[uint16]bool, client, request uint64, op []byte,
	bound time.Duration) (ProposeResult, bool) {
	deadline := time.Now().Add(bound)
	for time.Now().Before(deadline) {
		p := primaryOf(nodes, alive)
		if p == nil {
			time.Sleep(5 * time.Millisecond)
			continue
		}
		select {
		case res := <-p.group.Propose(client, request, op):
			if res.Err == nil {
				return res, true
			}
		case <-time.After(time.Until(deadline)):
		}
	}
	return ProposeResult{}, false
}
