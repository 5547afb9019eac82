package streamhost_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/engine/stream"
	"github.com/ringstream/ringstream/engine/streamhost"
)

// TestRetention_ByAgeOnRealLogs: issue 11, retention by age on real logs. A copy whose spec sets
// only RetainAgeMs loses its closed segments once their newest batch (stamped with the owner's
// wall clock) is older than the age, at one of the host's RetainEveryTicks rounds, and keeps them
// while they are younger; a copy without a limit keeps every segment. With the age ignored
// (by the host or by segment) no segment goes and the test fails at its deadline.
func TestRetention_ByAgeOnRealLogs(t *testing.T) {
	const ageMs = 1500
	n := soloNode(t, t.TempDir(), func(c *streamhost.Config) {
		c.Segment.SegmentBytes = 16 << 10 // two 8 KiB batches per segment
		c.RetainEveryTicks = 5            // 10 ms at the test nodes' 2 ms tick
	})
	aged, kept := soloSpec(7), soloSpec(8)
	aged.RetainAgeMs = ageMs
	if _, errs := openAll(t, n, []streamhost.Spec{aged, kept}); len(errs) > 0 {
		t.Fatal(errs)
	}
	segments := func(id uint64) int {
		t.Helper()
		m, err := filepath.Glob(filepath.Join(n.host.Dir(id, 1), "records", "*.log"))
		if err != nil {
			t.Fatal(err)
		}
		return len(m)
	}
	start := time.Now()
	const batches = 12
	for seq := range uint64(batches) {
		for _, id := range []uint64{7, 8} {
			if r := produceOne(t, n, id, seq); r.Kind != stream.ReplyProduce {
				t.Fatalf("produce %d to %d answered %+v", seq, id, r)
			}
		}
	}
	// The copy without a limit counts the segments both wrote: under load the aged copy may already
	// have lost some here, if producing took longer than the age.
	before := segments(8)
	if before < 4 {
		t.Fatalf("%d segments after %d batches, want several", before, batches)
	}
	// Younger than the age: a few retention rounds pass and every segment stays.
	time.Sleep(100 * time.Millisecond)
	if young := time.Since(start); young < ageMs*time.Millisecond/2 {
		if got := segments(7); got != before {
			t.Fatalf("%d of %d segments left %v after they were written, younger than %d ms", got, before, young, ageMs)
		}
	}
	// Older than the age: every closed segment goes at a retention round, the active one stays.
	deadline := start.Add(ageMs*time.Millisecond + 10*time.Second)
	for segments(7) > 1 {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d segments still there %v after they were written, age limit %d ms", segments(7), before, time.Since(start), ageMs)
		}
		time.Sleep(20 * time.Millisecond) // the age is wall-clock time: nothing shorter to wait on
	}
	if got := time.Since(start); got < ageMs*time.Millisecond {
		t.Fatalf("segments removed %v after they were written, before the %d ms age", got, ageMs)
	}
	if got := segments(8); got != before {
		t.Fatalf("the copy without a limit has %d segments, want %d", got, before)
	}
	if r := produceOne(t, n, 7, batches); r.Kind != stream.ReplyProduce || r.Produce.BaseOffset != batches*recordsPerBatch {
		t.Fatalf("produce after retention answered %+v", r)
	}
}

// TestRetention_NodeLimitReachesCopiesAnAssignmentCreates: the node's retention (Config.RetainBytes,
// storage.retention_bytes) applies to the copies assignments create, which is how every copy of a
// running node comes to be: with 16 KiB of closed segments kept, a copy that wrote many segments
// keeps one closed segment and its active one. Before, assignments created copies without the
// node's limits and retention never ran.
func TestRetention_NodeLimitReachesCopiesAnAssignmentCreates(t *testing.T) {
	n := soloNode(t, t.TempDir(), func(c *streamhost.Config) {
		c.Segment.SegmentBytes = 16 << 10 // two 8 KiB batches per segment
		c.RetainEveryTicks = 5
		c.RetainBytes = 16 << 10
	})
	assignOn(t, n, meta.Assignment{Epoch: 1, Owner: 1, Policy: meta.Policy{Kind: meta.PolicyMajorityDurable}}, nil)
	for seq := range uint64(12) {
		if r := produceOne(t, n, testStream, seq); r.Kind != stream.ReplyProduce {
			t.Fatalf("produce %d answered %+v", seq, r)
		}
	}
	segments := func() int {
		m, err := filepath.Glob(filepath.Join(n.host.Dir(testStream, testIncarnation), "records", "*.log"))
		if err != nil {
			t.Fatal(err)
		}
		return len(m)
	}
	deadline := time.Now().Add(20 * time.Second)
	for segments() > 2 {
		if time.Now().After(deadline) {
			t.Fatalf("%d segments left with a 16 KiB limit on 16 KiB segments", segments())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
