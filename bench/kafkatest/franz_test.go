package kafkatest

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"

	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/ringstream/ringstream/localcluster"
)

// kafkaError codes the test expects.
const (
	errOffsetOutOfRange    = 1
	errCorruptMessage      = 2
	errUnknownTopic        = 3
	errNotLeader           = 6
	errInvalidTopic        = 17
	errInvalidRequiredAcks = 21
	errTopicExists         = 36
	errInvalidPartitions   = 37
	errInvalidReplication  = 38
)

func franzClient(t *testing.T, lc *localcluster.Cluster, opts ...kgo.Opt) *kgo.Client {
	return newFranz(t, lc, append([]kgo.Opt{kgo.DisableIdempotentWrite()}, opts...)...)
}

// newFranz is a kgo client of lc's Kafka listeners with SASL PLAIN, acks=all and opts. MetadataMinAge:
// a broker answers Metadata from its own metadata replica, which may trail a create by a heartbeat;
// kgo's default of 5 s between refreshes would then stall a test that long (docs/kafka.md).
func newFranz(t *testing.T, lc *localcluster.Cluster, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(lc.KafkaAddrs()...),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.MetadataMinAge(100 * time.Millisecond),
		kgo.SASL(plain.Auth{User: "ringstream", Pass: password(lc)}.AsMechanism())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// TestFranzGo_ProduceConsume: franz-go creates a topic of three partitions (CreateTopics), produces
// 3,000 keyed records with acks=all, uncompressed to one topic and zstd-compressed to another, and
// a consumer reads each partition back from offset 0 with every record at the offset its produce was
// answered with. A produce sent to a broker that does not own the partition is answered
// NOT_LEADER_OR_FOLLOWER, a fetch past the high watermark OFFSET_OUT_OF_RANGE, and ListOffsets
// gives each partition's record count as its latest offset.
func TestFranzGo_ProduceConsume(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	lc := startCluster(t, ctx)
	for _, tc := range []struct {
		topic string
		codec kgo.CompressionCodec
	}{{"plain", kgo.NoCompression()}, {"zstd", kgo.ZstdCompression()}} {
		t.Run(tc.topic, func(t *testing.T) {
			cl := franzClient(t, lc, kgo.ProducerBatchCompression(tc.codec))
			createTopic(t, ctx, cl, tc.topic, 3)
			partitions(t, ctx, cl, tc.topic, 3)
			const n = 3000
			want := make(map[int32][]string) // per partition, the values in offset order
			for i := range n {
				r := &kgo.Record{Topic: tc.topic, Key: []byte("k" + strconv.Itoa(i%50)), Value: []byte("v" + strconv.Itoa(i)),
					Headers: []kgo.RecordHeader{{Key: "i", Value: []byte(strconv.Itoa(i))}}}
				cl.Produce(ctx, r, func(r *kgo.Record, err error) {
					if err != nil {
						t.Errorf("produce %s: %v", r.Value, err)
					}
				})
			}
			if err := cl.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			if t.Failed() {
				return
			}
			consumer := franzClient(t, lc, kgo.ConsumeTopics(tc.topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
			got := 0
			next := make(map[int32]int64)
			for got < n {
				fs := consumer.PollFetches(ctx)
				if err := ctx.Err(); err != nil {
					t.Fatalf("read %d of %d records: %v", got, n, err)
				}
				fs.EachError(func(topic string, p int32, err error) { t.Fatalf("%s[%d]: %v", topic, p, err) })
				fs.EachRecord(func(r *kgo.Record) {
					if r.Offset != next[r.Partition] {
						t.Fatalf("partition %d: offset %d, want %d", r.Partition, r.Offset, next[r.Partition])
					}
					next[r.Partition]++
					want[r.Partition] = append(want[r.Partition], string(r.Value))
					if len(r.Headers) != 1 || "v"+string(r.Headers[0].Value) != string(r.Value) {
						t.Fatalf("record %s: headers %v", r.Value, r.Headers)
					}
					got++
				})
			}
			// The producer spreads keys over the partitions its metadata listed (a broker's replica may
			// have trailed the create); every partition holds exactly what was read from it.
			latest := listLatest(t, ctx, cl, tc.topic, 3)
			for p := range int32(3) {
				if latest[p] != int64(len(want[p])) {
					t.Fatalf("partition %d: latest offset %d, %d records read", p, latest[p], len(want[p]))
				}
			}
		})
	}
	t.Run("offsets by time", func(t *testing.T) {
		cl := franzClient(t, lc, kgo.DefaultProduceTopic("timed"), kgo.AllowAutoTopicCreation())
		produce := func(v string) int64 {
			r, err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte(v)}).First()
			if err != nil {
				t.Fatal(err)
			}
			return r.Offset
		}
		produce("first")
		produce("second")
		time.Sleep(20 * time.Millisecond)
		between := time.Now().UnixMilli()
		time.Sleep(20 * time.Millisecond)
		third := produce("third")
		produce("fourth")
		for _, c := range []struct {
			ts, want int64
		}{{0, 0}, {between, third}, {time.Now().Add(time.Hour).UnixMilli(), -1}, {-2, 0}, {-1, third + 2}} {
			got := listOffset(t, ctx, cl, "timed", 0, c.ts)
			if got != c.want {
				t.Fatalf("ListOffsets at %d: offset %d, want %d", c.ts, got, c.want)
			}
		}
	})
	t.Run("long poll", func(t *testing.T) {
		// A Fetch with min_bytes 1 at the high watermark waits (max_wait_ms as the streams' long
		// poll) and is answered with the record produced meanwhile, not at once and empty.
		cl := franzClient(t, lc, kgo.DefaultProduceTopic("polled"), kgo.AllowAutoTopicCreation())
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("first")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		leader := partitions(t, ctx, cl, "polled", 1)[0].Leader
		fetch := kmsg.NewPtrFetchRequest()
		fetch.SetVersion(11)
		fetch.ReplicaID, fetch.MaxWaitMillis, fetch.MinBytes, fetch.MaxBytes = -1, 20000, 1, 1<<20
		fetch.Topics = []kmsg.FetchRequestTopic{{Topic: "polled", Partitions: []kmsg.FetchRequestTopicPartition{
			{Partition: 0, FetchOffset: 1, PartitionMaxBytes: 1 << 20, CurrentLeaderEpoch: -1, LogStartOffset: -1}}}}
		got := make(chan *kmsg.FetchResponse, 1)
		failed := make(chan error, 1)
		go func() {
			resp := kmsg.NewPtrFetchResponse()
			if err := rawExchangeErr(lc.Nodes()[leader-1].KafkaAddr, password(lc), fetch, resp); err != nil {
				failed <- err
				return
			}
			got <- resp
		}()
		time.Sleep(200 * time.Millisecond) // the fetch is (most likely) waiting: not asserted
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("second")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		select {
		case resp := <-got:
			p := resp.Topics[0].Partitions[0]
			var rb kmsg.RecordBatch
			if p.ErrorCode != 0 || len(p.RecordBatches) == 0 || rb.ReadFrom(p.RecordBatches) != nil || rb.FirstOffset != 1 {
				t.Fatalf("long poll answered error %d, %d record bytes, batch at %d", p.ErrorCode, len(p.RecordBatches),
					rb.FirstOffset)
			}
		case err := <-failed:
			t.Fatal(err)
		case <-ctx.Done():
			t.Fatal("the long poll never answered")
		}
	})
	t.Run("delete topic", func(t *testing.T) {
		cl := franzClient(t, lc)
		createTopic(t, ctx, cl, "gone", 2)
		del := kmsg.NewPtrDeleteTopicsRequest()
		del.TopicNames, del.TimeoutMillis = []string{"gone", "never-was"}, 10000
		resp, err := del.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Topics[0].ErrorCode != 0 || resp.Topics[1].ErrorCode != errUnknownTopic {
			t.Fatalf("delete gone, never-was: errors %d, %d; want 0, UNKNOWN_TOPIC_OR_PARTITION",
				resp.Topics[0].ErrorCode, resp.Topics[1].ErrorCode)
		}
		// Both partitions went: the topic cannot be deleted again, and is created again anew.
		if resp, err = del.RequestWith(ctx, cl); err != nil {
			t.Fatal(err)
		}
		if resp.Topics[0].ErrorCode != errUnknownTopic {
			t.Fatalf("second delete of gone: error %d, want UNKNOWN_TOPIC_OR_PARTITION", resp.Topics[0].ErrorCode)
		}
		createTopic(t, ctx, cl, "gone", 1)
	})
	t.Run("authentication", func(t *testing.T) {
		addr := lc.Nodes()[0].KafkaAddr
		// ApiVersions needs no authentication, and lists the SASL APIs.
		av := kmsg.NewPtrApiVersionsRequest()
		avr := kmsg.NewPtrApiVersionsResponse()
		rawExchange(t, addr, "", av, avr)
		var keys []int16
		for _, k := range avr.ApiKeys {
			keys = append(keys, k.ApiKey)
		}
		if !slices.Contains(keys, 17) || !slices.Contains(keys, 36) {
			t.Fatalf("ApiVersions lists %v, without SaslHandshake and SaslAuthenticate", keys)
		}
		// Metadata before authenticating: the connection closes.
		c, err := net.DialTimeout("tcp", addr, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		if _, err := c.Write(kmsg.NewRequestFormatter().AppendRequest(nil, kmsg.NewPtrMetadataRequest(), 1)); err != nil {
			t.Fatal(err)
		}
		if n, err := c.Read(make([]byte, 1)); err == nil {
			t.Fatalf("an unauthenticated Metadata was answered (%d bytes)", n)
		}
		// A wrong password is refused, the cluster secret itself included (it never crosses the wire).
		for _, pass := range []string{"wrong", lc.Secret()} {
			bad, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.SASL(plain.Auth{User: "ringstream", Pass: pass}.AsMechanism()))
			if err != nil {
				t.Fatal(err)
			}
			_, err = kmsg.NewPtrMetadataRequest().RequestWith(ctx, bad)
			bad.Close()
			if err == nil || !strings.Contains(err.Error(), "SASL_AUTHENTICATION_FAILED") {
				t.Fatalf("metadata with password %q: %v, want SASL_AUTHENTICATION_FAILED", pass, err)
			}
		}
	})
	t.Run("errors", func(t *testing.T) {
		cl := franzClient(t, lc)
		topic := "plain"
		leader := partitions(t, ctx, cl, topic, 3)[0].Leader
		var other int32 = 1
		if leader == 1 {
			other = 2
		}
		fetch := kmsg.NewPtrFetchRequest()
		fetch.MaxWaitMillis, fetch.MaxBytes = 100, 1<<20
		fetch.Topics = []kmsg.FetchRequestTopic{{Topic: topic, Partitions: []kmsg.FetchRequestTopicPartition{
			{Partition: 0, FetchOffset: 1 << 40, PartitionMaxBytes: 1 << 20}}}}
		fresp, err := fetch.RequestWith(ctx, cl.Broker(int(leader)))
		if err != nil {
			t.Fatal(err)
		}
		if code := fresp.Topics[0].Partitions[0].ErrorCode; code != errOffsetOutOfRange {
			t.Fatalf("fetch past the tail: error %d, want OFFSET_OUT_OF_RANGE", code)
		}
		fetch.Topics[0].Partitions[0].FetchOffset = 0
		fresp, err = fetch.RequestWith(ctx, cl.Broker(int(other)))
		if err != nil {
			t.Fatal(err)
		}
		if code := fresp.Topics[0].Partitions[0].ErrorCode; code != errNotLeader {
			t.Fatalf("fetch from broker %d, leader %d: error %d, want NOT_LEADER_OR_FOLLOWER", other, leader, code)
		}

		prod := kmsg.NewPtrProduceRequest()
		prod.SetVersion(7)
		prod.Acks, prod.TimeoutMillis = 2, 5000 // kgo sends its own acks: this one goes raw
		prod.Topics = []kmsg.ProduceRequestTopic{{Topic: topic, Partitions: []kmsg.ProduceRequestTopicPartition{
			{Partition: 0, Records: []byte{0}}}}}
		presp := kmsg.NewPtrProduceResponse()
		rawExchange(t, lc.Nodes()[leader-1].KafkaAddr, password(lc), prod, presp)
		if code := presp.Topics[0].Partitions[0].ErrorCode; code != errInvalidRequiredAcks {
			t.Fatalf("produce with acks=2: error %d, want INVALID_REQUIRED_ACKS", code)
		}
		prod.Acks = -1
		presp, err = prod.RequestWith(ctx, cl.Broker(int(leader)))
		if err != nil {
			t.Fatal(err)
		}
		if code := presp.Topics[0].Partitions[0].ErrorCode; code != errCorruptMessage {
			t.Fatalf("produce of one byte: error %d, want CORRUPT_MESSAGE", code)
		}

		create := kmsg.NewPtrCreateTopicsRequest()
		create.TimeoutMillis = 5000
		for _, c := range []struct {
			topic      string
			partitions int32
			rf         int16
		}{{"no partitions", 0, 1}, {"a-topic", 0, 1}, {"a-topic", 2000, 1}, {"a-topic", 1, 4}, {"plain", 3, 3},
			{"wide", 12, 3}} { // wide: partitions 10 and 11 sort before 2 by name, as the batched create sends them

			rt := kmsg.NewCreateTopicsRequestTopic()
			rt.Topic, rt.NumPartitions, rt.ReplicationFactor = c.topic, c.partitions, c.rf
			create.Topics = append(create.Topics, rt)
		}
		cresp, err := create.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		for i, want := range []int16{errInvalidTopic, errInvalidPartitions, errInvalidPartitions, errInvalidReplication,
			errTopicExists, 0} {
			if code := cresp.Topics[i].ErrorCode; code != want {
				t.Errorf("create %s: error %d, want %d", cresp.Topics[i].Topic, code, want)
			}
		}
	})
}

// createTopic creates topic with CreateTopics, asking again while the answer is
// LEADER_NOT_AVAILABLE (a cluster just started: its nodes not registered yet), as an operator would.
func createTopic(t *testing.T, ctx context.Context, cl *kgo.Client, topic string, partitions int32) {
	t.Helper()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, partitions, 3
	req.Topics = append(req.Topics, rt)
	req.TimeoutMillis = 10000
	for {
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		code := resp.Topics[0].ErrorCode
		if code == 0 {
			return
		}
		msg := ""
		if resp.Topics[0].ErrorMessage != nil {
			msg = *resp.Topics[0].ErrorMessage
		}
		if code != 5 || ctx.Err() != nil {
			t.Fatalf("create topic %s: error %d %s", topic, code, msg)
		}
		t.Logf("create topic %s: error %d %s; again", topic, code, msg)
	}
}

// partitions is the topic's partitions as Metadata lists them, once all n are listed with a leader:
// a broker answers from its own metadata replica, which may trail the primary for a heartbeat.
func partitions(t *testing.T, ctx context.Context, cl *kgo.Client, topic string, n int) []kmsg.MetadataResponseTopicPartition {
	t.Helper()
	meta := kmsg.NewPtrMetadataRequest()
	meta.Topics = []kmsg.MetadataRequestTopic{{Topic: &topic}}
	for {
		mresp, err := meta.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		ps := mresp.Topics[0].Partitions
		ready := len(ps) == n
		for _, p := range ps {
			ready = ready && p.Leader >= 0
		}
		if ready {
			return ps
		}
		select {
		case <-ctx.Done():
			t.Fatalf("topic %s: %d partitions listed, want %d with leaders", topic, len(ps), n)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// listLatest is ListOffsets latest of partitions 0..n-1, asked of each partition's leader.
func listLatest(t *testing.T, ctx context.Context, cl *kgo.Client, topic string, n int32) map[int32]int64 {
	t.Helper()
	out := make(map[int32]int64)
	for _, p := range partitions(t, ctx, cl, topic, int(n)) {
		req := kmsg.NewPtrListOffsetsRequest()
		req.ReplicaID = -1
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = topic
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition, rp.Timestamp = p.Partition, -1
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl.Broker(int(p.Leader)))
		if err != nil {
			t.Fatal(err)
		}
		lp := resp.Topics[0].Partitions[0]
		if lp.ErrorCode != 0 {
			t.Fatalf("list offsets %s[%d]: error %d", topic, p.Partition, lp.ErrorCode)
		}
		out[p.Partition] = lp.Offset
	}
	if len(out) != int(n) {
		t.Fatalf("%d partitions listed, want %d", len(out), n)
	}
	return out
}

// listOffset is ListOffsets of one partition at timestamp ts, asked of its leader.
func listOffset(t *testing.T, ctx context.Context, cl *kgo.Client, topic string, partition int32, ts int64) int64 {
	t.Helper()
	p := partitions(t, ctx, cl, topic, 1)[partition]
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Partition, rp.Timestamp = partition, ts
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl.Broker(int(p.Leader)))
	if err != nil {
		t.Fatal(err)
	}
	lp := resp.Topics[0].Partitions[0]
	if lp.ErrorCode != 0 {
		t.Fatalf("list offsets %s[%d] at %d: error %d", topic, partition, ts, lp.ErrorCode)
	}
	return lp.Offset
}

// rawExchange sends req on a connection of its own to addr, after SASL PLAIN with password (none
// when it is empty), and reads its response into resp.
func rawExchange(t *testing.T, addr, password string, req kmsg.Request, resp kmsg.Response) {
	t.Helper()
	if err := rawExchangeErr(addr, password, req, resp); err != nil {
		t.Fatal(err)
	}
}

// rawExchangeErr is rawExchange for any goroutine: it returns what went wrong.
func rawExchangeErr(addr, password string, req kmsg.Request, resp kmsg.Response) error {
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if password != "" {
		hs := kmsg.NewPtrSASLHandshakeRequest()
		hs.SetVersion(1)
		hs.Mechanism = "PLAIN"
		if err := exchangeOn(c, hs, kmsg.NewPtrSASLHandshakeResponse()); err != nil {
			return err
		}
		auth := kmsg.NewPtrSASLAuthenticateRequest()
		auth.SetVersion(1)
		auth.SASLAuthBytes = []byte("\x00ringstream\x00" + password)
		ar := kmsg.NewPtrSASLAuthenticateResponse()
		if err := exchangeOn(c, auth, ar); err != nil {
			return err
		}
		if ar.ErrorCode != 0 {
			return fmt.Errorf("SASL authenticate: error %d", ar.ErrorCode)
		}
	}
	return exchangeOn(c, req, resp)
}

// exchangeOn sends req on c and reads its response into resp.
func exchangeOn(c net.Conn, req kmsg.Request, resp kmsg.Response) error {
	if _, err := c.Write(kmsg.NewRequestFormatter().AppendRequest(nil, req, 7)); err != nil {
		return err
	}
	var size [4]byte
	if _, err := io.ReadFull(c, size[:]); err != nil {
		return err
	}
	b := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(c, b); err != nil {
		return err
	}
	if id := int32(binary.BigEndian.Uint32(b)); id != 7 {
		return fmt.Errorf("correlation id %d, want 7", id)
	}
	body := b[4:]
	if req.IsFlexible() && req.Key() != 18 { // ApiVersions answers with header v0
		body = body[1:] // an empty tagged-field section
	}
	resp.SetVersion(req.GetVersion())
	return resp.ReadFrom(body)
}
