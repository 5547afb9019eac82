package controlhost

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/engine/metahost"
	"github.com/ringstream/ringstream/wire"
)

// A metadata pipeline of one op and 150 streams losing their owner at once: the controller's
// RecordRecoveries ops (100 entries at most each) meet a full pipeline, which the replica refuses
// at once. Those streams come back as dropped (counted in ProposalsDropped) and are proposed again
// once the pipeline has room, so every stream's recovery is recorded, none refused and none left to
// expire (issue 25: the drop path of controlhost).
func TestControlHost_ProposalsRefusedByAFullPipelineAreProposedAgain(t *testing.T) {
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	var nodes []*controlNode
	opts := func(uint16) metaNodeOpts {
		return metaNodeOpts{drain: time.Millisecond, tune: func(c *metahost.Config) { c.VSR.PipelineOpsMax = 1 }}
	}
	metas := startMetaClusterTB(t, dirs, 2*time.Millisecond, opts, func(n *metaNode) {
		nodes = append(nodes, addControl(t, n, controlTestConfig(), nil))
	})
	alive := map[uint16]bool{1: true, 2: true, 3: true}
	waitFor(t, "a primary", func() bool { return primaryOf(metas, alive) != nil })
	p := primaryOf(metas, alive)
	victim := p.id%3 + 1
	setUpStream(t, nodes, victim)
	const more = 150
	policy := meta.Policy{Kind: meta.PolicyMajorityDurable}
	var followers []uint16
	for id := uint16(1); id <= 3; id++ {
		if id != victim {
			followers = append(followers, id)
		}
	}
	var entries []meta.CreateStream
	for i := range more {
		entries = append(entries, meta.CreateStream{Name: fmt.Sprintf("more-%03d", i), Copies: 3, Policy: policy,
			Owner: victim, Followers: followers, Stamped: policy})
	}
	for i, chunk := range [][]meta.CreateStream{entries[:meta.BatchEntriesMax], entries[meta.BatchEntriesMax:]} {
		checkResult(t, commitOp(t, metaNodes(nodes), alive, 5, uint64(10+i), meta.AppendOp(nil, meta.CreateStreams{Entries: chunk})))
	}
	var mu sync.Mutex
	recorded := map[uint64]bool{}
	refused := 0
	for _, n := range nodes {
		n.host.SetObserver(func(e Event) {
			if e.Kind != Committed {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case !e.OK:
				refused++
			case e.Op == meta.OpRecordRecovery:
				recorded[e.Stream] = true
			}
		})
	}
	waitFor(t, "every stream's assignment on every member", func() bool {
		for _, n := range nodes {
			if n.stream.assignments.Load() < 1+more {
				return false
			}
		}
		return true
	})
	kill(t, nodes[victim-1])
	alive[victim] = false
	waitFor(t, "every stream's recovery recorded", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(recorded) == 1+more
	})
	c := controllerOn(nodes, alive)
	waitFor(t, "the controller's status published", func() bool { return c.host.Status().Stats.ProposalsDropped > 0 })
	time.Sleep(10 * DefaultStatusTicks * 2 * time.Millisecond) // ten status refreshes: the counters are current
	mu.Lock()
	defer mu.Unlock()
	if st := c.host.Status().Stats; refused != 0 || st.ProposalsRefused != 0 || st.ProposalsExpired != 0 {
		t.Fatalf("%d refused; controller stats %+v", refused, st)
	}
}

// Seal replies arrive on any shard, and shard 0 takes them in batches: every reply of a burst from
// four goroutines reaches the controller (the observer hears each), and so does every reply of a
// later burst, after the queue emptied.
func TestControlHost_SealRepliesInBurstsAllReachTheController(t *testing.T) {
	nodes := startControlCluster(t, controlTestConfig(), nil)
	alive := map[uint16]bool{1: true, 2: true, 3: true}
	setUpStream(t, nodes, 1)
	c := controllerOn(nodes, alive)
	var mu sync.Mutex
	heard := map[uint64]int{}
	c.host.SetObserver(func(e Event) {
		if e.Kind == SealReply {
			mu.Lock()
			heard[e.Stream]++
			mu.Unlock()
		}
	})
	burst := func(first, count uint64) {
		var wg sync.WaitGroup
		for g := range uint64(4) {
			wg.Go(func() {
				for s := first + g; s < first+count; s += 4 {
					c.host.OnSealReply(2, wire.StreamSealReply{Stream: s, Incarnation: 1, FenceEpoch: 2, Status: wire.SealSealed})
				}
			})
		}
		wg.Wait()
		waitFor(t, "every reply of the burst heard", func() bool {
			mu.Lock()
			defer mu.Unlock()
			for s := first; s < first+count; s++ {
				if heard[s] != 1 {
					return false
				}
			}
			return true
		})
	}
	burst(1000, 500)
	burst(2000, 3)
	burst(3000, 1)
}
