package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/ringstream/ringstream/engine/kafka"
)

// Clients for --client: the bench's producers and read-back go through this project's Go client, or
// through franz-go on the nodes' Kafka listeners.
const (
	ClientRingstream = "ringstream"
	ClientKafka      = "kafka"
)

// The Kafka driver (--client kafka) runs the same load with franz-go: each bench producer is one
// kgo client with its default idempotent producer (InitProducerId; retries without limit, each
// retry of a batch answered from the stream's producer table), acks=all, linger 1 ms, batches of at
// most --batch records (ProducerBatchMaxBytes), and in a closed loop one batch in flight (it
// produces --batch records, then Flush), as the Go client's producers do; with --in-flight N there
// are N such clients per bench producer. Stream i is topic PREFIX-i's partition 0 (the stream
// PREFIX-i.0), created through the Go client as the other streams are. Metadata is refreshed at most
// every 100 ms (kgo's default is 5 s, which would hold a failover that long: docs/kafka.md); every
// other kgo option is its default. A record's latency is from its own append to its promise (kgo
// answers per record; in a closed loop a batch's records are appended together). The failover gap
// ends at the first batch of the first stream that a node other than the killed owner reports
// written (kgo's OnProduceBatchWritten hook: Kafka produce answers carry no epoch). The read-back is
// a franz-go consumer of each partition from offset 0.

// kafkaStreamName is the stream of topic name's partition 0, the bench's stream name with
// --client kafka.
func kafkaStreamName(name string) string { return kafka.StreamName(name, 0) }

// kafkaEnv is what the Kafka driver needs of the cluster: its Kafka addresses and its password.
type kafkaEnv struct {
	addrs    []string
	password string // empty: the cluster has no secret
}

func (e kafkaEnv) opts() []kgo.Opt {
	o := []kgo.Opt{kgo.SeedBrokers(e.addrs...), kgo.MetadataMinAge(100 * time.Millisecond)}
	if e.password != "" {
		o = append(o, kgo.SASL(plain.Auth{User: "ringstream", Pass: e.password}.AsMechanism()))
	}
	return o
}

// kafkaEnv is the local cluster's Kafka addresses and password.
func (r *run) kafkaEnv() kafkaEnv {
	env := kafkaEnv{addrs: r.lc.KafkaAddrs()}
	if s := r.lc.Secret(); s != "" {
		env.password = kafka.Password([]byte(s))
	}
	return env
}

// kafkaCompression is kgo's codec for --compression (none or zstd: the Kafka listener stores no other).
func kafkaCompression(name string) (kgo.CompressionCodec, error) {
	switch name {
	case "none":
		return kgo.NoCompression(), nil
	case "zstd":
		return kgo.ZstdCompression(), nil
	}
	return kgo.CompressionCodec{}, fmt.Errorf("%w: --compression %s with --client kafka: none or zstd", ErrConfig, name)
}

// runKafka is run with a franz-go producer: it appends records until ctx ends, then waits up to
// drain for the confirmations of what it holds. A record whose promise fails (it is never retried
// further: the end of the drain) is forgotten, not confirmed; each failed kgo client counts once in
// errors.
func (p *producer) runKafka(ctx context.Context, env kafkaEnv, codec kgo.CompressionCodec, pacer *pacer,
	drain time.Duration) {
	topic, _, _ := kafka.SplitStreamName(p.stream)
	batchBytes := min(p.cfg.Batch*(p.cfg.RecordSize+32)+128, 1<<20)
	var failed sync.Once
	opts := append(env.opts(), kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(time.Millisecond), kgo.ProducerBatchCompression(codec),
		kgo.ProducerBatchMaxBytes(int32(batchBytes)), kgo.MaxBufferedRecords(max(4*p.cfg.Batch, 1024)),
		kgo.WithHooks(batchWritten{stream: p.stream, watch: p.watch}))
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		p.errors.Add(1)
		return
	}
	// Records and their values are reused once their promise ran (kgo is done with them then), as a
	// franz-go user producing at this rate would: the bench's own garbage would otherwise weigh on
	// the client's side of the comparison with the Go client, which allocates nothing per record.
	var free []*kgo.Record
	promise := func(rec *kgo.Record, err error) {
		now := time.Now()
		p.mu.Lock()
		if len(p.queue) == 0 { // cannot be: a promise per record, in order
			p.mu.Unlock()
			return
		}
		pr := p.queue[0]
		p.queue = p.queue[1:]
		if err == nil {
			p.confirmed = append(p.confirmed, confirmation{id: pr.id, offset: uint64(rec.Offset)})
			p.rec.confirm(pr.sent, now, 1, p.cfg.RecordSize)
		}
		free = append(free, rec)
		p.mu.Unlock()
		if err != nil {
			failed.Do(func() { p.errors.Add(1) })
			return
		}
		p.watch.confirmed(now, pr.sent, 0)
	}
	for n := 1; ; n++ {
		due, ok := pacer.next(ctx)
		if !ok {
			break
		}
		p.mu.Lock()
		var rec *kgo.Record
		if n := len(free); n > 0 {
			rec, free = free[n-1], free[:n-1]
			*rec = kgo.Record{Value: rec.Value[:p.cfg.RecordSize]}
		} else {
			rec = &kgo.Record{Value: make([]byte, p.cfg.RecordSize)} // kgo holds it until its promise
		}
		id := recordID{producer: p.index, seq: p.seq}
		p.seq++
		p.queue = append(p.queue, pending{id: id, sent: due})
		p.mu.Unlock()
		putRecord(rec.Value, id, p.pad)
		cl.Produce(ctx, rec, promise)
		if pacer.interval == 0 && n%p.cfg.Batch == 0 {
			if err := cl.Flush(ctx); err != nil {
				break
			}
		}
	}
	flushCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), drain)
	err = cl.Flush(flushCtx)
	cancel()
	cl.Close() // fails what is still buffered: forgotten
	if err != nil && !errors.Is(err, context.Canceled) {
		failed.Do(func() { p.errors.Add(1) })
	}
}

// batchWritten is the kgo hook that ends the failover gap: a batch of the watched stream written by
// a node (watches.writtenBy).
type batchWritten struct {
	stream string
	watch  *watches
}

func (h batchWritten) OnProduceBatchWritten(b kgo.BrokerMetadata, topic string, partition int32, _ kgo.ProduceBatchMetrics) {
	if kafka.StreamName(topic, partition) == h.stream {
		h.watch.writtenBy(time.Now(), h.stream, uint16(b.NodeID))
	}
}

// readBackKafka is readBack with a franz-go consumer of l's stream (a topic's partition 0).
func (r *run) readBackKafka(ctx context.Context, l *ledger) error {
	var target int64
	for _, c := range l.confirmed {
		target = max(target, int64(c.offset)+1)
	}
	topic, part, ok := kafka.SplitStreamName(l.stream)
	if !ok {
		return fmt.Errorf("bench: stream %s is no Kafka partition", l.stream)
	}
	cl, err := kgo.NewClient(append(r.kafkaEnv().opts(), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{
		topic: {part: kgo.NewOffset().At(0)}}), kgo.FetchMaxWait(readBackWait), kgo.FetchMaxBytes(4<<20))...)
	if err != nil {
		return err
	}
	defer cl.Close()
	next := int64(0)
	var errs []string
	for next < target || target == 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("%w (at offset %d of %d; fetch errors: %s)", err, next, target, strings.Join(errs, "; "))
		}
		fs.EachError(func(_ string, _ int32, err error) {
			if len(errs) < 5 {
				errs = append(errs, err.Error())
			}
		})
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			for _, rec := range p.Records {
				l.read(uint64(rec.Offset), rec.Value)
				next = rec.Offset + 1
			}
			target = max(target, p.HighWatermark)
		})
		if target == 0 {
			return nil
		}
	}
	return nil
}
