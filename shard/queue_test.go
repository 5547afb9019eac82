package shard

import (
	"sync"
	"testing"

	"github.com/ringstream/ringstream/internal/allocs"
	"github.com/ringstream/ringstream/wire"
)

// The queue hands every message across threads once, in order, and reports full instead of dropping.
func TestSPSCQueueOrderAcrossGoroutines(t *testing.T) {
	q := newSPSCQueue(64)
	const total = 20000
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		m := message{kind: messageCommit}
		for i := uint64(1); i <= total; {
			m.commit.Group = i
			if q.Push(&m) {
				i++
			}
		}
	}()
	var got message
	for want := uint64(1); want <= total; {
		if !q.Pop(&got) {
			continue
		}
		if got.commit.Group != want {
			t.Fatalf("popped %d, want %d", got.commit.Group, want)
		}
		want++
	}
	wg.Wait()
	if q.Pop(&got) {
		t.Fatal("queue not empty")
	}
}

func TestSPSCQueueFullIsReported(t *testing.T) {
	q := newSPSCQueue(4)
	m := message{kind: messageReply}
	for i := range 4 {
		if !q.Push(&m) {
			t.Fatalf("push %d refused", i)
		}
	}
	if q.Push(&m) {
		t.Fatal("push into a full queue accepted")
	}
	var out message
	q.Pop(&out)
	if !q.Push(&m) {
		t.Fatal("push after a pop refused")
	}
}

func TestSPSCQueueAllocatesNothing(t *testing.T) {
	q := newSPSCQueue(16)
	m := message{kind: messageCommit, commit: wire.CommitEntry{Group: 1}}
	var out message
	got := allocs.In(t, 1000, func() {
		q.Push(&m)
		q.Pop(&out)
	})
	if got != 0 {
		t.Fatalf("%d allocations in 1000 pushes and pops, want 0", got)
	}
}

func TestShardOfSpreadsAndPinsMetadata(t *testing.T) {
	if ShardOf(MetadataGroupID, 4) != 0 {
		t.Fatal("metadata group not on shard 0")
	}
	counts := make([]int, 4)
	for id := uint64(1); id <= 4000; id++ {
		counts[ShardOf(id, 4)]++
	}
	for i, c := range counts {
		if c < 800 || c > 1200 {
			t.Fatalf("shard %d holds %d of 4000 groups", i, c)
		}
	}
}
