package kafkatest

import (
	"context"
	"encoding/binary"
	"hash/crc32"
	"os/exec"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringstream/ringstream/localcluster"
)

// idempotentClient is a franz-go client with its default idempotent producer (InitProducerId, up to
// 5 produce requests in flight per broker, retried without limit), acks=all, and batches
// uncompressed (kgo's default, snappy, is refused).
func idempotentClient(t *testing.T, lc *localcluster.Cluster, opts ...kgo.Opt) *kgo.Client {
	return newFranz(t, lc, append([]kgo.Opt{kgo.ProducerBatchCompression(kgo.NoCompression())}, opts...)...)
}

// TestFranzGo_OwnerKilled: franz-go's idempotent producer (acks=all, several requests in flight)
// produces to a partition of 3 copies while its stream's owner is SIGKILLed, and goes on: it meets
// the failover as NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE or a refused connection, refreshes
// its metadata and resends its unanswered batches to the new owner, whose producer table (rebuilt
// from its log) answers those the old owner had appended with their first offsets. Every record is
// acknowledged without error, no data loss is reported, Metadata (and kcat -L, when kcat is
// installed) names the new leader, and a consumer reads the partition back to its high watermark:
// every acknowledged record exactly once, at the offset its produce was answered with, and nothing
// else. Whether one of franz-go's batches is retried across the kill is up to timing, so the test
// also retries a batch of its own, confirmed by the old owner before the kill, on the new owner:
// answered with its first offset and not appended again, and the producer's next sequences are
// held to Kafka's rule there (OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_PRODUCER_EPOCH).
func TestFranzGo_OwnerKilled(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	lc := startCluster(t, ctx)
	var lost atomic.Int32
	cl := idempotentClient(t, lc, kgo.DefaultProduceTopic("failover"), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(2*time.Millisecond), kgo.ProducerOnDataLossDetected(func(string, int32) { lost.Add(1) }))
	createTopic(t, ctx, cl, "failover", 1)
	if id, epoch, err := cl.ProducerID(ctx); err != nil || id <= 0 || epoch != 0 {
		t.Fatalf("producer id %d epoch %d: %v (InitProducerId)", id, epoch, err)
	}
	old := partitions(t, ctx, cl, "failover", 1)[0].Leader

	var mu sync.Mutex
	acked := map[string]int64{} // value -> offset answered
	var failed []error
	var stop atomic.Bool
	done := make(chan int)
	go func() { // about 4,000 records a second, batched by the linger and the requests in flight
		i := 0
		for ; !stop.Load(); i++ {
			v := "v" + strconv.Itoa(i)
			cl.Produce(ctx, &kgo.Record{Value: []byte(v)}, func(r *kgo.Record, err error) {
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					failed = append(failed, err)
					return
				}
				acked[string(r.Value)] = r.Offset
			})
			if i%4 == 3 {
				time.Sleep(time.Millisecond)
			}
		}
		done <- i
	}()
	time.Sleep(time.Second)
	// A batch of a producer of the test's own, confirmed on the owner before the kill.
	init, err := kmsg.NewPtrInitProducerIDRequest().RequestWith(ctx, cl)
	if err != nil || init.ErrorCode != 0 || init.ProducerID <= 0 {
		t.Fatalf("InitProducerId: %v %+v", err, init)
	}
	pid := init.ProducerID
	rawAcked := map[string]int64{}
	first := rawBatch(pid, 0, 0, "r0", "r1", "r2")
	code, base := rawProduce(t, ctx, cl, old, "failover", first)
	if code != 0 {
		t.Fatalf("raw produce: error %d", code)
	}
	for i := range 3 {
		rawAcked["r"+strconv.Itoa(i)] = base + int64(i)
	}
	if err := lc.Kill(uint16(old)); err != nil {
		t.Fatal(err)
	}
	t.Logf("owner node %d killed", old)
	var leader int32
	for leader = old; leader == old; {
		leader = partitions(t, ctx, cl, "failover", 1)[0].Leader
		if leader == old {
			time.Sleep(50 * time.Millisecond)
		}
	}
	t.Logf("new leader: node %d", leader)
	// The new owner answers the retry of that batch from its producer table, with its first offset,
	// and holds the producer to Kafka's rule: the next base sequence is 3, a gap is out of order, a
	// new epoch starts at 0 and fences the old one.
	for {
		code, b := rawProduce(t, ctx, cl, leader, "failover", first)
		if code == 0 {
			if b != base {
				t.Fatalf("retry after the failover answered offset %d, first appended at %d", b, base)
			}
			break
		}
		if (code != 5 && code != 6) || ctx.Err() != nil { // not serving yet, or metadata behind
			t.Fatalf("retry after the failover: error %d", code)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, c := range []struct {
		epoch int16
		seq   int32
		want  int16
	}{{0, 3, 0}, {0, 10, 45}, {1, 0, 0}, {0, 5, 47}} {
		v := "r" + strconv.Itoa(int(c.epoch)*100+int(c.seq))
		code, b := rawProduce(t, ctx, cl, leader, "failover", rawBatch(pid, c.epoch, c.seq, v))
		if code != c.want {
			t.Fatalf("epoch %d sequence %d: error %d, want %d", c.epoch, c.seq, code, c.want)
		}
		if code == 0 {
			rawAcked[v] = b
		}
	}
	time.Sleep(time.Second)
	stop.Store(true)
	produced := <-done
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	switch {
	case len(failed) > 0:
		t.Fatalf("%d produces failed, the first: %v", len(failed), failed[0])
	case lost.Load() != 0:
		t.Fatal("the producer reported data loss")
	case len(acked) != produced:
		t.Fatalf("%d of %d records acknowledged", len(acked), produced)
	}
	for v, off := range rawAcked {
		acked[v] = off
	}

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
	latest := listLatest(t, ctx, cl, "failover", 1)[0]
	if latest != int64(len(acked)) {
		t.Fatalf("high watermark %d, %d records acknowledged", latest, len(acked))
	}
	consumer := franzClient(t, lc, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{
		"failover": {0: kgo.NewOffset().AtStart()}}))
	seen := map[string]bool{}
	for next := int64(0); next < latest; {
		fs := consumer.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("read %d of %d records: %v", next, latest, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			v := string(r.Value)
			off, ok := acked[v]
			switch {
			case r.Offset != next:
				t.Fatalf("offset %d, want %d", r.Offset, next)
			case seen[v]:
				t.Fatalf("record %s read twice (offsets %d and %d)", v, off, r.Offset)
			case !ok || off != r.Offset:
				t.Fatalf("record %s at offset %d, acknowledged at %d (%v)", v, r.Offset, off, ok)
			}
			seen[v] = true
			next++
		})
	}
	t.Logf("%d acknowledged records read back exactly once", len(acked))
}

// rawBatch is an uncompressed Kafka record batch (magic 2) of values, from producer id at epoch
// and base sequence seq.
func rawBatch(id int64, epoch int16, seq int32, values ...string) []byte {
	var records []byte
	for i, v := range values {
		r := kmsg.Record{OffsetDelta: int32(i), Value: []byte(v)}
		r.Length = int32(len(r.AppendTo(nil)) - 1) // the body after a length of 0 (one byte)
		records = r.AppendTo(records)
	}
	now := time.Now().UnixMilli()
	b := kmsg.RecordBatch{PartitionLeaderEpoch: -1, Magic: 2, LastOffsetDelta: int32(len(values) - 1),
		FirstTimestamp: now, MaxTimestamp: now, ProducerID: id, ProducerEpoch: epoch, FirstSequence: seq,
		NumRecords: int32(len(values)), Records: records}
	out := b.AppendTo(nil)
	binary.BigEndian.PutUint32(out[8:], uint32(len(out)-12))
	binary.BigEndian.PutUint32(out[17:], crc32.Checksum(out[21:], crc32.MakeTable(crc32.Castagnoli)))
	return out
}

// rawProduce sends batch to partition 0 of topic on node, acks=all, and returns the partition's
// error code and base offset.
func rawProduce(t *testing.T, ctx context.Context, cl *kgo.Client, node int32, topic string, batch []byte) (int16, int64) {
	t.Helper()
	req := kmsg.NewPtrProduceRequest()
	req.Acks, req.TimeoutMillis = -1, 10000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = batch
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl.Broker(int(node)))
	if err != nil {
		t.Fatalf("produce to node %d: %v", node, err)
	}
	p := resp.Topics[0].Partitions[0]
	return p.ErrorCode, p.BaseOffset
}
