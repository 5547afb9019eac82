package streamhost_test

import (
	"testing"

	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/engine/stream"
)

// R24, issue 22 finding 8: an owner that lost its quorum, heard it again and then loses it a second
// time in the same epoch stops serving again (shard/heartbeat reports every loss, not one per epoch;
// the stream simulator's QuorumOncePerEpoch runs the old behaviour).
func TestQuorum_SecondLossInTheSameEpochStopsServing(t *testing.T) {
	a := meta.Assignment{Epoch: 1, Owner: 1, Followers: []uint16{2, 3}, Policy: meta.Policy{Kind: meta.PolicyLocalDurable}}
	c := newCluster(t, a)
	n1 := c.nodes[1]
	produceConfirmed(t, n1, 0, 2, 0)
	for loss := uint64(1); loss <= 2; loss++ {
		if err := c.nodes[3].node.Stop(); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, "the owner losing its quorum", func() bool { return hostStats(t, n1).QuorumLost >= loss })
		if r := fetchAt(t, n1, testStream, 0); !refusedUnavailable(r, "quorum") {
			t.Fatalf("loss %d: fetch answered kind %d code %d (%s), want unavailable", loss, r.Kind, r.Error.Code,
				r.Error.Message)
		}
		c.restart(3)
		waitUntil(t, "the owner serving again with both followers", func() bool {
			return fetchAt(t, n1, testStream, 0).Kind == stream.ReplyFetch
		})
	}
	if st := state(t, n1); st.Role != stream.RoleOwner || st.Epoch != 1 {
		t.Fatalf("owner after two losses: %+v, want owner at epoch 1", st)
	}
}
