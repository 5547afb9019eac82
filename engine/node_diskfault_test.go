package engine

import (
	"context"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ringstream/ringstream/engine/metahost"
	"github.com/ringstream/ringstream/ring"
	"github.com/ringstream/ringstream/ring/powerloss"
	"github.com/ringstream/ringstream/wire"
)

// newFaultyCluster is newTestCluster with each node's data directory on a powerloss.Disk (the
// storage fault model under every shard's ring).
func newFaultyCluster(t *testing.T) (*testCluster, map[uint16]*powerloss.Disk) {
	t.Helper()
	c := &testCluster{t: t, root: t.TempDir(), nodes: map[uint16]*Node{}}
	disks := map[uint16]*powerloss.Disk{}
	for id := uint16(1); id <= 3; id++ {
		dir := c.dir(id)
		if err := metahost.Format(metahost.FormatConfig{Dir: filepath.Join(dir, "meta"), Cluster: nodeTestCluster, Node: id,
			Replica: uint8(id - 1)}); err != nil {
			t.Fatal(err)
		}
		disk := powerloss.NewDisk(dir, uint64(id))
		disks[id] = disk
		n, err := NewNodeWithOptions(nodeTestConfig(t, id, dir, "", 50), quietLogger(),
			NodeOptions{DrainTimeout: 50 * time.Millisecond, WrapRing: func(_ int, r ring.Ring) ring.Ring { return disk.Wrap(r) }})
		if err != nil {
			t.Fatal(err)
		}
		c.nodes[id] = n
	}
	t.Cleanup(c.stop)
	for _, n := range c.nodes {
		for _, o := range c.nodes {
			if err := n.SetPeer(o.ID(), o.PeerAddr(), o.ClientAddr()); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, n := range c.nodes {
		if err := n.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	return c, disks
}

// Issue 22, finding 1, on real nodes: a follower whose file system is full shows in its node's
// /v1/status failures (cause enospc, role follower, retrying) and in the metrics by cause, while the
// stream confirms on the other two; once the file system has room it heals without a restart (the
// failure gone, a heal counted) and its copy catches up with the owner.
func TestNode_FollowerDiskFullInStatusAndMetricsThenHeals(t *testing.T) {
	c, disks := newFaultyCluster(t)
	c.waitRegistered()
	tc := dialNode(t, c.nodes[1].ClientAddr(), "")
	created, look := tc.createLooked("events")
	oc := dialNode(t, netip.MustParseAddrPort(string(look.OwnerAddr)), "")
	seq := uint64(0)
	produce := func() {
		t.Helper()
		seq++
		waitForTB(t, "a confirmed produce", func() bool {
			_, e := oc.produce(created.Stream, 7, seq, 1, []byte("record"))
			// Fenced too: the controller takes the failed follower out of the assignment, which seals
			// the copies at a newer epoch; the owner stays, and serves again once it applied it.
			if e != nil && e.Code != wire.CodeUnavailable && e.Code != wire.CodeNotYet && e.Code != wire.CodeNotOwner &&
				e.Code != wire.CodeFenced {
				t.Fatalf("produce %d: %v %s", seq, e.Code, e.Message)
			}
			return e == nil
		})
	}
	for range 3 {
		produce()
	}
	f := c.nodes[look.Owner%3+1]
	disks[f.ID()].Inject(powerloss.Fault{Op: ring.OpWrite, Path: "streams", Errno: unix.ENOSPC, Until: true})
	for range 5 {
		produce()
	}
	waitForTB(t, "the follower's failure in its status", func() bool { return len(f.Status().Failures) == 1 })
	fl := f.Status().Failures[0]
	if fl.Stream != created.Stream || fl.Cause != "enospc" || fl.Role != "follower" || !fl.Retrying {
		t.Fatalf("failure %+v: want the follower's enospc, retrying", fl)
	}
	if got := metricCount(t, f, `ringstream_stream_copy_log_failures_total{cause="enospc"`); got < 1 {
		t.Fatalf("enospc failures counted %v, want at least 1", got)
	}
	if got := metricCount(t, f, "ringstream_stream_copy_failures"); got != 1 {
		t.Fatalf("copy failures gauge %v, want 1", got)
	}
	t.Logf("reported: %+v", fl)
	disks[f.ID()].Clear()
	produce()
	waitForTB(t, "the follower healed and caught up", func() bool {
		st := f.Status()
		return len(st.Failures) == 0 && len(st.Copies) == 1 && st.Copies[0].Open && st.Copies[0].Durable == seq
	})
	if got := metricCount(t, f, "ringstream_stream_copy_heals_total"); got < 1 {
		t.Fatalf("heals counted %v, want at least 1", got)
	}
}
