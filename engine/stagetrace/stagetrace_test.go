package stagetrace

import (
	"reflect"
	"testing"

	"github.com/ringstream/ringstream/engine/adminapi"
)

// An owner's batch and a follower's prepare go from begun to finished through their marks, and only
// then show in the snapshot, with every mark; a follower's answer finishes only prepares already
// durable and covered; an owner trace finishes at its confirm.
func TestTracesFinishAtTheirLastStage(t *testing.T) {
	tr := New(1)
	s := tr.Shard(0)
	if s.On() {
		t.Fatal("tracing on before Start")
	}
	tr.Start()
	if !s.On() {
		t.Fatal("tracing off after Start")
	}
	s.OwnerAppended(7, 99, 1, 10, 11, 2, 100)
	s.FollowerReceived(8, 3, 20, 22, 110)
	s.FollowerReceived(8, 3, 22, 23, 115) // not durable when the answer up to 22 goes
	s.Durable(7, 11, 120, 130)
	s.Durable(8, 22, 121, 131)
	s.OwnerAnswer(7, 2, 11, 140)
	s.OwnerAnswer(7, 2, 11, 141) // a second answer from node 2 is not another answer
	s.OwnerAnswer(7, 3, 10, 142) // below the batch's end: not an answer for it
	if got := tr.Snapshot(1).Entries; len(got) != 0 {
		t.Fatalf("entries before any trace finished: %+v", got)
	}
	s.FollowerAnswered(8, 22, 150)
	s.FollowerAnswered(8, 23, 151) // [22, 23) is not durable here yet: nothing can have answered it
	s.OwnerConfirmed(7, 10, 160)
	s.Request(7, 99, 1, 90, 170)
	got := tr.Snapshot(1)
	want := []adminapi.StageEntry{
		{Kind: adminapi.StageFollower, Stream: 8, Peer: 3, Base: 20, End: 22, Received: 110, Submitted: 121, Durable: 131,
			Answered: 150},
		{Kind: adminapi.StageOwner, Stream: 7, Producer: 99, Sequence: 1, Base: 10, End: 11, Quorum: 2, Appended: 100,
			Submitted: 120, Durable: 130, Answers: []adminapi.StageAnswer{{Node: 2, At: 140}}, Confirmed: 160},
		{Kind: adminapi.StageRequest, Stream: 7, Producer: 99, Sequence: 1, Received: 90, Replied: 170},
	}
	if len(got.Entries) != len(want) {
		t.Fatalf("entries %+v, want %+v", got.Entries, want)
	}
	for i := range want {
		g, w := got.Entries[i], want[i]
		if len(g.Answers) != len(w.Answers) || (len(w.Answers) > 0 && g.Answers[0] != w.Answers[0]) {
			t.Fatalf("entry %d answers %+v, want %+v", i, g.Answers, w.Answers)
		}
		if !reflect.DeepEqual(g, w) {
			t.Fatalf("entry %d:\n got %+v\nwant %+v", i, g, w)
		}
	}
	if s.nOpen != 1 {
		t.Fatalf("%d traces open, want the follower's undurable prepare", s.nOpen)
	}
}

// A full open table pushes its oldest trace out (counted as dropped), so traces that never finish
// cannot stop tracing; Start clears the log.
func TestFullTablePushesTheOldestOut(t *testing.T) {
	tr := New(1)
	s := tr.Shard(0)
	tr.Start()
	for i := range openMax + 1 {
		s.OwnerAppended(1, 5, uint64(i), uint64(i), uint64(i+1), 1, int64(1000+i))
	}
	s.OwnerConfirmed(1, 0, 5000) // the oldest: pushed out, nothing to finish
	s.OwnerConfirmed(1, openMax, 5001)
	snap := tr.Snapshot(1)
	if len(snap.Entries) != 1 || snap.Entries[0].Base != openMax || snap.Dropped != 1 {
		t.Fatalf("entries %+v dropped %d, want the newest batch finished and one dropped", snap.Entries, snap.Dropped)
	}
	tr.Start()
	if snap := tr.Snapshot(1); len(snap.Entries) != 0 {
		t.Fatalf("entries after a new Start: %+v", snap.Entries)
	}
}

// A nil tracer's shards are off, so hosts built without one call no hook.
func TestNilTracerIsOff(t *testing.T) {
	var tr *Tracer
	if tr.Shard(0).On() {
		t.Fatal("a nil tracer's shard is on")
	}
}

// Hooks allocate nothing while tracing is on (the log is allocated by Start).
func TestHooksAllocateNothing(t *testing.T) {
	tr := New(1)
	s := tr.Shard(0)
	tr.Start()
	var seq uint64
	allocs := testing.AllocsPerRun(1000, func() {
		seq++
		now := s.Now()
		s.OwnerAppended(1, 5, seq, seq, seq+1, 2, now)
		s.Durable(1, seq+1, now, now)
		s.OwnerAnswer(1, 2, seq+1, now)
		s.OwnerConfirmed(1, seq, now)
		s.FollowerReceived(2, 1, seq, seq+1, now)
		s.Durable(2, seq+1, now, now)
		s.FollowerAnswered(2, seq+1, now)
		s.Request(1, 5, seq, now, now)
	})
	if allocs != 0 {
		t.Fatalf("%.1f allocations per traced batch", allocs)
	}
}

// Snapshot, Start and Stop run on other goroutines (the admin listener's) while a shard traces: the
// race detector checks that they share only the log, under its lock, and the switch.
func TestSnapshotBesideTheShard(t *testing.T) {
	tr := New(1)
	s := tr.Shard(0)
	tr.Start()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 2000 {
			if !s.On() {
				continue
			}
			seq := uint64(i)
			s.OwnerAppended(1, 5, seq, seq, seq+1, 1, s.Now())
			s.Durable(1, seq+1, s.Now(), s.Now())
			s.OwnerConfirmed(1, seq, s.Now())
		}
	}()
	for range 50 {
		_ = tr.Snapshot(1)
		tr.Stop()
		tr.Start()
	}
	<-done
}
