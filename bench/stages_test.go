package bench

import (
	"testing"

	"github.com/ringstream/ringstream/engine/adminapi"
)

// The budget joins a client batch with the owner's handler and copy traces by producer and sequence,
// and with the prepare of the follower whose answer made the quorum (W = 3: the second answer, here
// node 3's, though node 2 answered first), covering the batch and received after the owner appended
// it; a batch some process did not trace is left out. The top-level stages follow one another from
// the append to the wake.
func TestBudgetJoinsTheQuorumFollower(t *testing.T) {
	clients := []clientTrace{
		{producer: 9, seq: 1, appended: 1000000, taken: 1010000, sent: 1020000, replyRead: 1900000, woken: 1950000},
		{producer: 9, seq: 2, appended: 3000000, taken: 3010000, sent: 3020000, replyRead: 3900000, woken: 3950000}, // no owner trace
	}
	owner := adminapi.StageTrace{Node: 1, Entries: []adminapi.StageEntry{
		{Kind: adminapi.StageRequest, Stream: 4, Producer: 9, Sequence: 1, Received: 1100000, Replied: 1800000},
		{Kind: adminapi.StageOwner, Stream: 4, Producer: 9, Sequence: 1, Base: 10, End: 11, Quorum: 3, Appended: 1110000,
			Submitted: 1120000, Durable: 1500000, Answers: []adminapi.StageAnswer{{Node: 3, At: 1700000}, {Node: 2, At: 1600000}},
			Confirmed: 1790000},
		{Kind: adminapi.StageRequest, Stream: 4, Producer: 9, Sequence: 2, Received: 3100000, Replied: 3800000},
	}}
	follower := func(node uint16, received, answered int64) adminapi.StageTrace {
		return adminapi.StageTrace{Node: node, Entries: []adminapi.StageEntry{
			{Kind: adminapi.StageFollower, Stream: 4, Peer: 1, Base: 8, End: 11, Received: 100000, Submitted: 110000,
				Durable: 120000, Answered: 130000}, // an older prepare that also covers offset 10: received before the append
			{Kind: adminapi.StageFollower, Stream: 4, Peer: 1, Base: 10, End: 11, Received: received,
				Submitted: received + 10_000, Durable: answered - 10_000, Answered: answered},
		}}
	}
	b := budget(clients, []adminapi.StageTrace{owner, follower(2, 1_200_000, 1_590_000), follower(3, 1_300_000, 1_690_000)})
	if b.Batches != 1 || b.ClientBatches != 2 {
		t.Fatalf("batches %d of %d, want 1 of 2", b.Batches, b.ClientBatches)
	}
	want := map[string]float64{StageClientTake: 10, StageClientSend: 10, StageToOwner: 80, StageOwnerStep: 10,
		StageReplicate: 680, StageOwnerQueue: 10, StageOwnerSync: 380, StagePrepare: 190, StageFollowQueue: 10,
		StageFollowSync: 370, StageFollowAnswer: 10, StageAnswer: 10, StageConfirm: 90, StageOwnerReply: 10,
		StageToClient: 100, StageClientWake: 50}
	var top float64
	for _, s := range b.Stages {
		ns, ok := want[s.Name]
		if !ok || s.P50Us != ns {
			t.Errorf("stage %q: %.0f us, want %.0f", s.Name, s.P50Us, ns)
		}
		if s.Part == "" {
			top += s.P50Us
		}
		delete(want, s.Name)
	}
	if len(want) != 0 {
		t.Errorf("stages missing: %v", want)
	}
	if e2e := b.EndToEnd.P50Us; e2e != 950 || top != e2e {
		t.Errorf("end to end %.1f us, top-level stages add up to %.1f us; want 950 both", e2e, top)
	}
}
