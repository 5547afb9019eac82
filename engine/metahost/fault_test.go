package metahost

import (
	"errors"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ringstream/ringstream/ring"
	"github.com/ringstream/ringstream/ring/powerloss"
)

// A persist that fails with EIO or ENOSPC on the primary's node takes that replica out: it reports the
// error in its Status and stops being primary, so the others' heartbeat timeout moves the group to a
// new view. Every op committed before is on the survivors, and the group keeps committing.
func TestMetaGroup_FailedPersistTakesThePrimaryOut(t *testing.T) {
	for _, errno := range []unix.Errno{unix.EIO, unix.ENOSPC} {
		t.Run(errno.Error(), func(t *testing.T) {
			dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
			disks := map[uint16]*powerloss.Disk{}
			for i, dir := range dirs {
				disks[uint16(i+1)] = powerloss.NewDisk(dir, uint64(i))
			}
			nodes := startMetaClusterTB(t, dirs, 2*time.Millisecond, func(id uint16) metaNodeOpts {
				return metaNodeOpts{wrap: disks[id].Wrap}
			}, nil)
			alive := map[uint16]bool{1: true, 2: true, 3: true}
			waitFor(t, "a primary", func() bool { return primaryOf(nodes, alive) != nil })
			var last uint64
			for req := uint64(1); req <= 4; req++ {
				last = commitOp(t, nodes, alive, 5, req, registerOp(uint16(500+req))).Op
			}
			p := primaryOf(nodes, alive)
			view := p.group.Status().View
			disks[p.id].Inject(powerloss.Fault{Op: ring.OpWrite, Errno: errno})
			p.group.Propose(5, 5, registerOp(505)) // its persist fails
			waitFor(t, "the failed primary out", func() bool {
				st := p.group.Status()
				return st.PersistErr != nil && !st.Primary
			})
			if st := p.group.Status(); !errors.Is(st.PersistErr, errno) || !errors.Is(st.PersistErr, ErrStorage) {
				t.Fatalf("status %+v, want a storage error wrapping %v", st, errno)
			}
			alive[p.id] = false
			waitFor(t, "a new primary", func() bool {
				q := primaryOf(nodes, alive)
				return q != nil && q.group.Status().View > view
			})
			for req := uint64(5); req <= 7; req++ {
				last = commitOp(t, nodes, alive, 5, req, registerOp(uint16(500+req))).Op
			}
			waitFor(t, "both survivors at the last op", func() bool {
				for _, n := range nodes {
					if alive[n.id] && n.group.Status().Commit < last {
						return false
					}
				}
				return true
			})
			for _, n := range nodes {
				_ = n.node.Stop()
			}
			for _, n := range nodes {
				if !alive[n.id] {
					continue
				}
				for id := uint16(501); id <= 507; id++ {
					if _, ok := n.group.State().Node(id); !ok {
						t.Errorf("node %d: registered node %d lost", n.id, id)
					}
				}
			}
		})
	}
}
