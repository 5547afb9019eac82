package stream_test

import (
	"fmt"
	"testing"

	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/engine/stream"
	"github.com/ringstream/ringstream/wire"
)

// policies is every policy kind, with counts around every copy-set size.
func policies() []meta.Policy {
	ps := []meta.Policy{{Kind: meta.PolicyUnset}, {Kind: meta.PolicyLocalDurable}, {Kind: meta.PolicyMajorityDurable}}
	for n := uint8(1); n <= 6; n++ {
		ps = append(ps, meta.Policy{Kind: meta.PolicyCountDurable, Count: n}, meta.Policy{Kind: meta.PolicyCountAccepted, Count: n})
	}
	return ps
}

// wantW is the confirm rule written out by hand from the stream-failover spec ("One rule for W"):
// unset and local_durable are every copy, majority_durable a majority, a count capped at the set and
// an accepted count read as durable.
func wantW(p meta.Policy, copies int) int {
	switch p.Kind {
	case meta.PolicyMajorityDurable:
		return copies/2 + 1
	case meta.PolicyCountDurable, meta.PolicyCountAccepted:
		return min(int(p.Count), copies)
	}
	return copies
}

// TestConfirmRule_EveryPolicyAndCopyCount drives an owner of E = 1..5 copies under every policy:
// with k followers holding a batch durably (and the owner), it is confirmed exactly when 1+k >= W,
// W from Assignment.ConfirmCount (meta.StreamConfirmPolicy).
func TestConfirmRule_EveryPolicyAndCopyCount(t *testing.T) {
	for copies := 1; copies <= 5; copies++ {
		for _, p := range policies() {
			a := meta.Assignment{Epoch: 1, Owner: 1, Policy: p}
			for f := 2; f <= copies; f++ {
				a.Followers = append(a.Followers, uint16(f))
			}
			w := a.ConfirmCount()
			if w != wantW(p, copies) || w != meta.StreamConfirmPolicy(p, copies) {
				t.Fatalf("E=%d %v: ConfirmCount %d, want %d", copies, p, w, wantW(p, copies))
			}
			for k := 0; k < copies; k++ {
				t.Run(fmt.Sprintf("E=%d/%v/acks=%d", copies, p, k), func(t *testing.T) {
					owner := newNode(t, testConfig(1), a, nil, nil, nil)
					m := stream.Message{Kind: stream.KindProduce, Client: 1}
					m.Produce = wire.Produce{RequestID: 1, Stream: testStream, Count: 10, Batch: payload(0, 64)}
					owner.c.Step(&m)
					owner.ready(t) // the owner's own append is durable (autoSync)
					for f := 0; f < k; f++ {
						ack(t, owner, a.Followers[f], 10)
					}
					want := uint64(0)
					if 1+k >= w {
						want = 10
					}
					if got := owner.c.Confirmed(); got != want {
						t.Fatalf("W=%d, %d follower acks: confirmed %d, want %d", w, k, got, want)
					}
					if acked := len(owner.replies) == 1; acked != (want == 10) {
						t.Fatalf("W=%d, %d follower acks: produce answered %v", w, k, acked)
					}
				})
			}
		}
	}
}

// ack steps a follower's durable acknowledgement of tail into owner.
func ack(t *testing.T, owner *node, from uint16, tail uint64) {
	t.Helper()
	m := stream.Message{Kind: stream.KindPrepareOK, From: from}
	m.PrepareOK = wire.StreamPrepareOK{Stream: testStream, Incarnation: testIncarnation, Epoch: 1,
		Status: wire.PrepareAppended, Log: wire.LogRecords, RecordTail: tail}
	owner.c.Step(&m)
	owner.ready(t)
}

// The confirmed tail is the W-th highest durable tail, the owner's included, and never past the
// owner's own durable tail (the owner serves reads from its log).
func TestConfirmRule_WthHighestCappedAtOwner(t *testing.T) {
	for _, tc := range []struct {
		name  string
		tails []uint64 // owner first
		w     int
		want  uint64
	}{
		{"one copy", []uint64{5}, 1, 5},
		{"majority of three", []uint64{10, 7, 3}, 2, 7},
		{"all of three", []uint64{10, 7, 3}, 3, 3},
		{"owner lags the followers", []uint64{4, 9, 9}, 2, 4},
		{"majority of five", []uint64{8, 1, 8, 6, 2}, 3, 6},
		{"ties", []uint64{6, 6, 6, 0, 0}, 3, 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tails := append([]uint64(nil), tc.tails...)
			got := min(stream.ConfirmedTailOf(tails, tc.w), tc.tails[0])
			if got != tc.want {
				t.Fatalf("confirmed %d, want %d", got, tc.want)
			}
		})
	}
}

// With the owner's fsync outstanding, follower acks alone never confirm (W met without the owner).
func TestConfirmRule_NotBeforeOwnersFsync(t *testing.T) {
	a := assignment(1, 1, 2, 3)
	owner := newNode(t, testConfig(1), a, nil, nil, nil)
	owner.autoSync = false
	m := stream.Message{Kind: stream.KindProduce, Client: 1}
	m.Produce = wire.Produce{RequestID: 1, Stream: testStream, Count: 10, Batch: payload(0, 64)}
	owner.c.Step(&m)
	owner.ready(t)
	ack(t, owner, 2, 10)
	ack(t, owner, 3, 10)
	if owner.c.Confirmed() != 0 || len(owner.replies) != 0 {
		t.Fatalf("confirmed %d with %d replies before the owner's fsync", owner.c.Confirmed(), len(owner.replies))
	}
	owner.sync(t)
	owner.ready(t)
	if owner.c.Confirmed() != 10 || len(owner.replies) != 1 {
		t.Fatalf("confirmed %d with %d replies after the owner's fsync", owner.c.Confirmed(), len(owner.replies))
	}
}
