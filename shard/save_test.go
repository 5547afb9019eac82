package shard_test

import (
	"os"
	"testing"
	"time"

	"github.com/ringstream/ringstream/ring"
	"github.com/ringstream/ringstream/shard"
	"github.com/ringstream/ringstream/shard/shardtest"
)

// slowSyncRing delays every fdatasync of one file by delay (a Timeout first, then the real fdatasync
// queued from its completion): a slow disk under one group's superblock, through Config.WrapRing.
type slowSyncRing struct {
	ring.Ring
	fd    int
	delay time.Duration
}

type delayedSync struct {
	r   *slowSyncRing
	h   ring.Handler
	tag uint64
}

func (d *delayedSync) Complete(c ring.Completion) {
	if err := d.r.Ring.Fsync(d.h, d.tag, d.r.fd, true, 0); err != nil {
		d.h.Complete(ring.Completion{Tag: d.tag, Res: -5, Op: ring.OpFsync}) // EIO: no room
	}
}

func (r *slowSyncRing) Fsync(h ring.Handler, tag uint64, fd int, datasync bool, fl ring.Flags) error {
	if fd != r.fd {
		return r.Ring.Fsync(h, tag, fd, datasync, fl)
	}
	return r.Ring.Timeout(&delayedSync{r: r, h: h, tag: tag}, 0, r.delay, fl)
}

// R12, R28: one slow superblock save holds back neither the other groups' Commits nor the shard's
// replies. Node 1 leads group 1, whose superblock's fdatasync takes 40 ms, and group 2, whose
// fdatasync is plain; it follows group 3, led by node 2. Both led groups commit on every tick. Over
// the run, group 2's Commits and node 1's replies to group 3 keep flowing at about one per tick or
// two, while group 1's go once per slow save. Before the fix, every batch of the shard waited for the
// slowest save, so all three flows ran at group 1's pace.
func TestR12_R28_SlowSaveHoldsBackNoOtherGroup(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b ring.Backend) {
		dir := t.TempDir()
		sb := func(name string) *os.File {
			f, err := os.Create(dir + "/" + name)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { f.Close() })
			return f
		}
		slow, fast := sb("slow"), sb("fast")
		g1 := newGroup(1, []uint16{1, 2}, 1, 1)
		g2 := newGroup(2, []uint16{1, 2}, 1, 1)
		g3 := newGroup(3, []uint16{1, 2}, 1, 2)
		g1.Superblock, g2.Superblock = slow, fast
		b1, b2 := newGroup(1, []uint16{1, 2}, 2, 1), newGroup(2, []uint16{1, 2}, 2, 1)
		p3 := newGroup(3, []uint16{1, 2}, 2, 2)
		for _, g := range []*shardtest.Group{g1, g2, p3} {
			g.CommitEvery = 1
		}
		const delay = 40 * time.Millisecond
		wrap := func(_ int, r ring.Ring) ring.Ring { return &slowSyncRing{Ring: r, fd: int(slow.Fd()), delay: delay} }
		var w watcher
		a := newNetNodeCfg(t, shard.Config{Node: 1, Ring: ring.Config{Backend: b}, WrapRing: wrap}, &w, g1, g2, g3)
		c := newNetNodeCfg(t, shard.Config{Node: 2, Ring: ring.Config{Backend: b}}, nil, b1, b2, p3)
		if err := a.Start([]shard.Peer{{Node: 2, Addr: c.Addr()}}); err != nil {
			t.Fatal(err)
		}
		defer a.Stop()
		if err := c.Start([]shard.Peer{{Node: 1, Addr: a.Addr()}}); err != nil {
			t.Fatal(err)
		}
		defer c.Stop()
		w.wait(t, "links up", func() bool { return linksUp(a, true)() && linksUp(c, true)() })
		st := a.Shards()[0].Stats()
		w.wait(t, "three slow saves", func() bool { return st.SuperblockSaves.Load() >= 3 && g1.SavesCompleted >= 3 })
		from := st.Ticks.Load()
		w.wait(t, "a window of 200 ms", func() bool { return st.Ticks.Load() >= from+200 && g1.SavesCompleted >= 8 })
		stopWithin(t, a, liveness, "stop")
		stopWithin(t, c, liveness, "peer stop")
		ticks := st.Ticks.Load()
		slowSaves := g1.SavesCompleted
		got1, got2 := len(b1.Received), len(b2.Received)
		replies := c.Shards()[0].Stats().ReplyEntriesCounted.Load()
		t.Logf("%d ticks, %d slow saves: group 1 sent %d Commits, group 2 %d, %d replies counted",
			ticks, slowSaves, got1, got2, replies)
		if got1 > slowSaves+2 {
			t.Fatalf("group 1 sent %d Commits for %d saves: entries went before their save", got1, slowSaves)
		}
		// The fast group and the replies are held back only by their own saves and the tick.
		if got2 < 4*got1 || replies < uint64(4*got1) {
			t.Fatalf("group 2 sent %d Commits and %d replies counted, group 1 %d: the slow save held them back",
				got2, replies, got1)
		}
	})
}
