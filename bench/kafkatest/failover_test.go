package kafkatest

import (
	"context"
	"os/exec"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestFranzGo_OwnerKilled: franz-go produces to a partition (acks=all, without idempotence),
// its stream's owner is SIGKILLed, and the producer goes on: it meets the failover as
// NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE or a refused connection, refreshes its metadata and
// follows the new owner. Metadata (and kcat -L, when kcat is installed) names the new leader, and a
// consumer reads every acknowledged record back; a batch retried across the failover may be there
// twice (no idempotent producer yet), never missing.
func TestFranzGo_OwnerKilled(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	lc := startCluster(t, ctx)
	cl := franzClient(t, lc, kgo.DefaultProduceTopic("failover"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	createTopic(t, ctx, cl, "failover", 1)
	acked := map[string]bool{}
	produce := func(from, to int) {
		for i := from; i < to; i++ {
			v := "v" + strconv.Itoa(i)
			if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte(v)}).FirstErr(); err != nil {
				t.Fatalf("produce %s: %v", v, err)
			}
			acked[v] = true
		}
	}
	produce(0, 200)
	old := partitions(t, ctx, cl, "failover", 1)[0].Leader
	if err := lc.Kill(uint16(old)); err != nil {
		t.Fatal(err)
	}
	t.Logf("owner node %d killed", old)
	produce(200, 400)
	var leader int32
	for leader = old; leader == old; {
		leader = partitions(t, ctx, cl, "failover", 1)[0].Leader
		if leader == old {
			time.Sleep(50 * time.Millisecond)
		}
	}
	t.Logf("new leader: node %d", leader)
	if path, err := exec.LookPath("kcat"); err == nil {
		var live string
		for _, n := range lc.Nodes() {
			if n.ID != uint16(old) {
				live = n.KafkaAddr
				break
			}
		}
		list := string(kcat(t, ctx, path, nil, append(saslArgs(lc), "-L", "-b", live, "-t", "failover")...))
		m := regexp.MustCompile(`partition 0, leader (\d+),`).FindStringSubmatch(list)
		if m == nil || m[1] == strconv.Itoa(int(old)) {
			t.Fatalf("kcat -L after the kill of node %d:\n%s", old, list)
		}
	}
	consumer := franzClient(t, lc, kgo.ConsumeTopics("failover"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	seen := map[string]int{}
	next := int64(0)
	for len(seen) < len(acked) {
		fs := consumer.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("read %d of %d acknowledged records: %v", len(seen), len(acked), err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset != next {
				t.Fatalf("offset %d, want %d", r.Offset, next)
			}
			next++
			seen[string(r.Value)]++
		})
	}
	for v := range acked {
		if seen[v] == 0 {
			t.Fatalf("acknowledged record %s not read back", v)
		}
	}
	dups := 0
	for _, n := range seen {
		dups += n - 1
	}
	t.Logf("%d acknowledged records read back, %d read twice (retried across the failover)", len(acked), dups)
}
