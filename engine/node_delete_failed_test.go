package engine

import (
	"errors"
	"io/fs"
	"net/netip"
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ringstream/ringstream/ring"
	"github.com/ringstream/ringstream/ring/powerloss"
	"github.com/ringstream/ringstream/wire"
)

// Issue 22 leftover: a delete drops a failed copy too. A follower's copy fails (its file system full),
// and its reopens keep failing (every read of its files fails with EIO), so it sits in the failures
// list retrying. Deleting the stream stops the retries and removes the copy's files through the
// normal delete path: the failure leaves the list, the directory goes, the delete is counted, and no
// reopen is tried after it.
func TestNode_DeleteDropsFailedCopy(t *testing.T) {
	c, disks := newFaultyCluster(t)
	c.waitRegistered()
	tc := dialNode(t, c.nodes[1].ClientAddr(), "")
	created, look := tc.createLooked("failing")
	oc := dialNode(t, netip.MustParseAddrPort(string(look.OwnerAddr)), "")
	seq := uint64(0)
	produce := func() {
		t.Helper()
		seq++
		waitForTB(t, "a confirmed produce", func() bool {
			_, e := oc.produce(created.Stream, 7, seq, 1, []byte("record"))
			if e != nil && e.Code != wire.CodeUnavailable && e.Code != wire.CodeNotYet && e.Code != wire.CodeNotOwner {
				t.Fatalf("produce %d: %v %s", seq, e.Code, e.Message)
			}
			return e == nil
		})
	}
	produce()
	f := c.nodes[look.Owner%3+1]
	disk := disks[f.ID()]
	disk.Inject(powerloss.Fault{Op: ring.OpWrite, Path: "streams", Errno: unix.ENOSPC, Until: true})
	disk.Inject(powerloss.Fault{Op: ring.OpRead, Path: "streams", Errno: unix.EIO, Until: true})
	dir := f.Streams().Dir(created.Stream, created.Incarnation)
	waitForTB(t, "the follower's copy failed and its reopens failing", func() bool {
		// Produces reach the follower as prepares; their outcome does not matter here (the stream may
		// be sealed and moved on meanwhile).
		seq++
		_, _ = oc.produce(created.Stream, 7, seq, 1, []byte("record"))
		fs := f.Status().Failures
		return len(fs) == 1 && fs[0].Stream == created.Stream && fs[0].Retrying && fs[0].Attempts >= 2
	})
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("the failed copy's directory before the delete: %v", err)
	}
	if _, e := tc.deleteStream("failing"); e != nil {
		t.Fatalf("delete: %+v", e)
	}
	waitForTB(t, "the failed copy deleted on its node", func() bool {
		return f.reaper.Deleted() == 1 && len(f.Status().Failures) == 0
	})
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the failed copy's directory after the delete: %v", err)
	}
	attempts := f.Streams().HealStats().Attempts
	for _, n := range c.nodes {
		waitForTB(t, "every node's copy deleted", func() bool { return n.reaper.Deleted() == 1 })
	}
	// The other nodes' deletes took some of the reaper's passes and the heal's ticks: no reopen since.
	if got := f.Streams().HealStats().Attempts; got != attempts {
		t.Fatalf("reopens tried after the delete: %d, want none", got-attempts)
	}
}
