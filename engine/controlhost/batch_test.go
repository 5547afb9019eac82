package controlhost

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ringstream/ringstream/engine/meta"
)

// Streams that lose their owner at once are recorded by one batch op on the real metadata group, and
// each entry's result reaches its stream: the observer hears each entry as its stream's record, every
// recovery is sealed and nothing is refused or left to expire; the stream whose copies answer (the
// test double holds stream 1 only) commits (issue 25).
func TestControlHost_StreamsLosingTheirOwnerAtOnceRecordInOneBatch(t *testing.T) {
	nodes := startControlCluster(t, controlTestConfig(), func(n *controlNode) {
		n.stream.answer, n.stream.tail = true, 100+uint64(n.id)
	})
	alive := map[uint16]bool{1: true, 2: true, 3: true}
	p := primaryOf(metaNodes(nodes), alive)
	victim := p.id%3 + 1
	setUpStream(t, nodes, victim)
	const more = 4
	policy := meta.Policy{Kind: meta.PolicyMajorityDurable}
	var followers []uint16
	for id := uint16(1); id <= 3; id++ {
		if id != victim {
			followers = append(followers, id)
		}
	}
	for i := range more {
		op := meta.AppendOp(nil, meta.CreateStream{Name: fmt.Sprintf("more-%d", i), Copies: 3, Policy: policy,
			Owner: victim, Followers: followers, Stamped: policy})
		checkResult(t, commitOp(t, metaNodes(nodes), alive, 5, uint64(10+i), op))
	}
	var mu sync.Mutex
	recorded, committed := map[uint64]int{}, map[uint64]bool{}
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
				recorded[e.Stream] = e.Batch
			case e.Op == meta.OpCommitRecovery:
				committed[e.Stream] = true
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
	waitFor(t, "every stream's recovery recorded and stream 1's committed", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(recorded) == 1+more && committed[testStream]
	})
	mu.Lock()
	defer mu.Unlock()
	if refused != 0 || len(recorded) != 1+more {
		t.Fatalf("%d refused, recorded %v", refused, recorded)
	}
	for s, batch := range recorded {
		if batch != 1+more {
			t.Fatalf("stream %d recorded in a batch of %d, want all %d in one", s, batch, 1+more)
		}
	}
	c := controllerOn(nodes, alive)
	// The other streams' recoveries wait for seal answers nobody gives, under attention.
	waitFor(t, "the other streams' recoveries under attention", func() bool {
		waiting := 0
		for _, a := range c.host.Status().Attention {
			if a.Recovery != 0 && a.Stream != testStream {
				waiting++
			}
		}
		return waiting == more
	})
	// Every entry's result reached its stream: nothing is left out to expire once a proposal's
	// time-out (and a status refresh) has passed.
	time.Sleep(2 * time.Duration(controlTestConfig().ProposalTimeoutTicks) * 2 * time.Millisecond)
	if st := c.host.Status().Stats; st.ProposalsRefused != 0 || st.ProposalsExpired != 0 {
		t.Fatalf("controller stats %+v", st)
	}
}
