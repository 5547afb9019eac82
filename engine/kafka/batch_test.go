package kafka

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"strconv"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringstream/ringstream/wire"
)

// testRecord is one record for kafkaBatch.
type testRecord struct {
	key, value []byte
	headers    [][2][]byte
	tsDelta    int64
}

// appendTestRecord appends r in Kafka's v2 record layout with offset delta i.
func appendTestRecord(dst []byte, r testRecord, i int) []byte {
	var body []byte
	body = append(body, 0)
	body = binary.AppendVarint(body, r.tsDelta)
	body = binary.AppendVarint(body, int64(i))
	body = appendNullable(body, r.key)
	body = appendNullable(body, r.value)
	body = binary.AppendVarint(body, int64(len(r.headers)))
	for _, h := range r.headers {
		body = binary.AppendVarint(body, int64(len(h[0])))
		body = append(body, h[0]...)
		body = appendNullable(body, h[1])
	}
	dst = binary.AppendVarint(dst, int64(len(body)))
	return append(dst, body...)
}

func appendNullable(dst, b []byte) []byte {
	if b == nil {
		return binary.AppendVarint(dst, -1)
	}
	dst = binary.AppendVarint(dst, int64(len(b)))
	return append(dst, b...)
}

// kafkaBatch is a produced Kafka batch (magic 2) of recs, as kmsg encodes one, with its CRC.
func kafkaBatch(recs []testRecord, baseTs int64, attrs int16) []byte {
	var records []byte
	for i, r := range recs {
		records = appendTestRecord(records, r, i)
	}
	return kafkaBatchOf(records, int32(len(recs)), baseTs, attrs)
}

func kafkaBatchOf(records []byte, count int32, baseTs int64, attrs int16) []byte {
	b := kmsg.RecordBatch{FirstOffset: 0, PartitionLeaderEpoch: -1, Magic: 2, Attributes: attrs,
		LastOffsetDelta: count - 1, FirstTimestamp: baseTs, MaxTimestamp: baseTs, ProducerID: -1, ProducerEpoch: -1,
		FirstSequence: -1, NumRecords: count, Records: records}
	out := b.AppendTo(nil)
	binary.BigEndian.PutUint32(out[kbLength:], uint32(len(out)-kbLeaderEpoch))
	binary.BigEndian.PutUint32(out[kbCRC:], crc32.Checksum(out[kbAttributes:], castagnoli))
	return out
}

// storedBatch is a batch as segment stores it (and a fetch reply carries it): the 80-byte header,
// little endian, then the payload.
func storedBatch(base uint64, count uint32, version uint16, codec uint8, payload []byte) []byte {
	h := make([]byte, sbHeaderSize)
	le := binary.LittleEndian
	le.PutUint32(h[8:], 0x31425352)
	le.PutUint16(h[sbVersion:], version)
	h[sbCodec] = codec
	le.PutUint64(h[sbBaseOffset:], base)
	le.PutUint32(h[sbCount:], count)
	le.PutUint32(h[sbPayloadLen:], uint32(len(payload)))
	le.PutUint64(h[sbMaxTs:], 1_700_000_000_999)
	return append(h, payload...)
}

func someRecords(n int) []testRecord {
	recs := make([]testRecord, n)
	for i := range recs {
		recs[i] = testRecord{key: []byte("key-" + strconv.Itoa(i)), value: []byte("value-" + strconv.Itoa(i)),
			headers: [][2][]byte{{[]byte("h"), []byte(strconv.Itoa(i))}, {[]byte("null"), nil}}, tsDelta: int64(i % 7)}
	}
	recs[0].value = nil // a tombstone
	return recs
}

// A produced batch is stored as its base timestamp and its records section byte for byte, and a
// fetch hands the same records back in a Kafka batch at the stored base offset, with a valid CRC,
// the record count and the largest record timestamp.
func TestProducedBatchStoredAndFetchedBack(t *testing.T) {
	recs := someRecords(5)
	kb := kafkaBatch(recs, 1_700_000_000_000, 0)
	pb, err := parseProducedBatch(kb)
	if err != nil {
		t.Fatal(err)
	}
	if pb.Count != 5 || pb.Codec != codecNone || pb.BaseTimestamp != 1_700_000_000_000 {
		t.Fatalf("parsed %+v", pb)
	}
	payload := appendStoredPayload(nil, &pb)
	if got := int64(binary.LittleEndian.Uint64(payload)); got != pb.BaseTimestamp {
		t.Fatalf("stored base timestamp %d", got)
	}
	if !bytes.Equal(payload[8:], kb[kbHeaderSize:]) {
		t.Fatal("stored records differ from the produced records section")
	}
	stored := append(storedBatch(100, 5, uint16(wire.FormatRecords), codecNone, payload),
		storedBatch(105, 5, uint16(wire.FormatRecords), codecNone, payload)...)
	out, err := appendKafkaBatches(nil, stored)
	if err != nil {
		t.Fatal(err)
	}
	for i, base := range []int64{100, 105} {
		var rb kmsg.RecordBatch
		if err := rb.ReadFrom(out); err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
		size := kbLeaderEpoch + int(rb.Length)
		if crc32.Checksum(out[kbAttributes:size], castagnoli) != uint32(rb.CRC) {
			t.Fatalf("batch %d: crc", i)
		}
		if rb.FirstOffset != base || rb.NumRecords != 5 || rb.LastOffsetDelta != 4 || rb.Magic != 2 ||
			rb.FirstTimestamp != 1_700_000_000_000 || rb.MaxTimestamp != 1_700_000_000_004 {
			t.Fatalf("batch %d: %+v", i, rb)
		}
		if !bytes.Equal(rb.Records, kb[kbHeaderSize:]) {
			t.Fatalf("batch %d: records differ", i)
		}
		out = out[size:]
	}
	if len(out) != 0 {
		t.Fatalf("%d bytes after the batches", len(out))
	}
}

// A zstd batch keeps its codec both ways; a stored batch of record format 1 is written as v2 records.
func TestFetchedBatchCodecsAndFormatValues(t *testing.T) {
	kb := kafkaBatchOf([]byte{0x28, 0xb5, 0x2f, 0xfd, 1, 2, 3}, 3, 5, kafkaCodecZstd)
	pb, err := parseProducedBatch(kb)
	if err != nil || pb.Codec != codecZstd {
		t.Fatalf("zstd batch: %+v %v", pb, err)
	}
	out, err := appendKafkaBatches(nil, storedBatch(7, 3, uint16(wire.FormatRecords), codecZstd, appendStoredPayload(nil, &pb)))
	if err != nil {
		t.Fatal(err)
	}
	if attr := binary.BigEndian.Uint16(out[kbAttributes:]); attr&attrCompression != kafkaCodecZstd {
		t.Fatalf("attributes %#x", attr)
	}
	var values []byte
	for _, v := range []string{"a", "", "ccc"} {
		values = binary.AppendUvarint(values, uint64(len(v)))
		values = append(values, v...)
	}
	out, err = appendKafkaBatches(nil, storedBatch(9, 3, uint16(wire.FormatValues), codecNone, values))
	if err != nil {
		t.Fatal(err)
	}
	var rb kmsg.RecordBatch
	if err := rb.ReadFrom(out); err != nil {
		t.Fatal(err)
	}
	if err := validateRecords(rb.Records, 3); err != nil {
		t.Fatalf("format 1 records as v2: %v", err)
	}
	if rb.FirstOffset != 9 || rb.NumRecords != 3 {
		t.Fatalf("%+v", rb)
	}
	if _, err := appendKafkaBatches(nil, storedBatch(0, 1, uint16(wire.FormatRecords), 2, make([]byte, 9))); !errors.Is(err, ErrStoredBatch) {
		t.Fatalf("s2 batch: %v", err)
	}
}

// Every rule of a produced batch refuses its own breach, with the error the Kafka code follows.
func TestParseProducedBatchRefuses(t *testing.T) {
	good := kafkaBatch(someRecords(3), 1, 0)
	resum := func(b []byte) []byte {
		binary.BigEndian.PutUint32(b[kbCRC:], crc32.Checksum(b[kbAttributes:], castagnoli))
		return b
	}
	edit := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	producer := func(id int64, epoch int16, seq int32) []byte {
		return edit(func(b []byte) []byte {
			binary.BigEndian.PutUint64(b[kbProducerID:], uint64(id))
			binary.BigEndian.PutUint16(b[kbProducerEpoch:], uint16(epoch))
			binary.BigEndian.PutUint32(b[kbBaseSequence:], uint32(seq))
			return resum(b)
		})
	}
	for _, ok := range [][]byte{producer(5, 0, 0), producer(5, 3, 1<<31-1), producer(-1, -1, -1)} {
		if _, err := parseProducedBatch(ok); err != nil {
			t.Fatalf("producer fields refused: %v", err)
		}
	}
	badRecord := func(r testRecord, i int) []byte {
		return kafkaBatchOf(appendTestRecord(nil, r, i), 1, 1, 0)
	}
	cases := []struct {
		name  string
		batch []byte
		want  error
	}{
		{"short", good[:40], ErrCorruptBatch},
		{"magic 1", edit(func(b []byte) []byte { b[kbMagic] = 1; return b }), ErrBatchKind},
		{"crc", edit(func(b []byte) []byte { b[len(b)-1] ^= 1; return b }), ErrCorruptBatch},
		{"two batches", append(bytes.Clone(good), good...), ErrCorruptBatch},
		{"length", edit(func(b []byte) []byte { // outside the CRC: only the length rule sees it
			binary.BigEndian.PutUint32(b[kbLength:], binary.BigEndian.Uint32(b[kbLength:])+1)
			return b
		}), ErrCorruptBatch},
		{"transactional", edit(func(b []byte) []byte { b[kbAttributes+1] |= attrTransactional; return resum(b) }), ErrBatchKind},
		{"control", edit(func(b []byte) []byte { b[kbAttributes+1] |= attrControl; return resum(b) }), ErrBatchKind},
		{"lz4", edit(func(b []byte) []byte { b[kbAttributes+1] |= 3; return resum(b) }), ErrCompression},
		{"count 0", edit(func(b []byte) []byte { binary.BigEndian.PutUint32(b[kbRecordCount:], 0); return resum(b) }), ErrCorruptBatch},
		{"last offset delta", edit(func(b []byte) []byte { binary.BigEndian.PutUint32(b[kbLastOffsetDelta:], 5); return resum(b) }), ErrCorruptBatch},
		{"count above records", edit(func(b []byte) []byte {
			binary.BigEndian.PutUint32(b[kbRecordCount:], 4)
			binary.BigEndian.PutUint32(b[kbLastOffsetDelta:], 3)
			return resum(b)
		}), ErrCorruptBatch},
		// zstd records are not walked: only the count rule sees these.
		{"zstd count 0", kafkaBatchOf([]byte{1, 2, 3}, 0, 1, kafkaCodecZstd), ErrCorruptBatch},
		{"zstd count above bytes", kafkaBatchOf([]byte{1, 2, 3}, 4, 1, kafkaCodecZstd), ErrCorruptBatch},
		{"offset delta", badRecord(testRecord{value: []byte("v")}, 1), ErrCorruptBatch},
		{"record attributes", edit(func(b []byte) []byte { b[kbHeaderSize+1] = 4; return resum(b) }), ErrCorruptBatch},
		{"key past the record", kafkaBatchOf([]byte{10, 0, 0, 0, 40, 'a', 'b', 'c', 'd', 0, 0}, 1, 1, 0), ErrCorruptBatch},
		// length 6 (zigzag 12): attributes, timestamp delta, offset delta, null key, null value, header count -1
		{"negative header count", kafkaBatchOf([]byte{12, 0, 0, 0, 1, 1, 1}, 1, 1, 0), ErrCorruptBatch},
		// length 7: the same with 0 headers, then a byte
		{"bytes after the headers", kafkaBatchOf([]byte{14, 0, 0, 0, 1, 1, 0, 'x'}, 1, 1, 0), ErrCorruptBatch},
		{"good bare record", nil, nil},
		{"bytes after the records", kafkaBatchOf(append(appendTestRecord(nil, testRecord{}, 0), 7), 1, 1, 0), ErrCorruptBatch},
		{"producer id -2", producer(-2, -1, -1), ErrProducerFields},
		{"producer epoch -1", producer(5, -1, 0), ErrProducerFields},
		{"base sequence -1", producer(5, 0, -1), ErrProducerFields},
	}
	if _, err := parseProducedBatch(good); err != nil {
		t.Fatalf("good batch refused: %v", err)
	}
	for _, c := range cases {
		if c.batch == nil { // the bare record of the two cases above, whole: taken
			c.batch = kafkaBatchOf([]byte{12, 0, 0, 0, 1, 1, 0}, 1, 1, 0)
		}
		_, err := parseProducedBatch(c.batch)
		if (c.want == nil) != (err == nil) || !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	if batchErrorCode(ErrCompression) != errUnsupportedCompress || batchErrorCode(ErrBatchKind) != errInvalidRecord ||
		batchErrorCode(ErrProducerFields) != errInvalidRecord ||
		batchErrorCode(ErrCorruptBatch) != errCorruptMessage {
		t.Fatal("batch error codes")
	}
}

func TestStreamNames(t *testing.T) {
	for _, c := range []struct {
		topic string
		p     int32
	}{{"orders", 0}, {"a.b.c", 3}, {"x", PartitionsMax - 1}, {"t-1_2", 12}} {
		name := StreamName(c.topic, c.p)
		if err := wire.ValidateStreamName(name); err != nil {
			t.Fatalf("%q: %v", name, err)
		}
		topic, p, ok := SplitStreamName(name)
		if !ok || topic != c.topic || p != c.p {
			t.Fatalf("%q split as %q %d %v", name, topic, p, ok)
		}
		if got := string(appendStreamName(nil, c.topic, c.p)); got != name {
			t.Fatalf("appendStreamName %q, want %q", got, name)
		}
	}
	for _, name := range []string{"orders", "orders.", ".0", "orders.01", "orders.-1", "orders.1024", "orders.x",
		"...0", string(bytes.Repeat([]byte("a"), 250)) + ".0"} {
		if topic, p, ok := SplitStreamName(name); ok {
			t.Errorf("%q split as %q %d", name, topic, p)
		}
	}
	for _, topic := range []string{"", ".", "..", "a b", "a/b", string(bytes.Repeat([]byte("a"), TopicNameMax+1))} {
		if validateTopic(topic) == nil {
			t.Errorf("topic %q accepted", topic)
		}
	}
}

// A Fetch response keeps within max_bytes: partitions' records in request order, the first one with
// records always, the next ones while they fit.
func TestTrimFetch(t *testing.T) {
	req := kmsg.NewPtrFetchRequest()
	req.MaxBytes = 100
	sizes := []int{0, 80, 30, 20, 200}
	fs := &fetchState{req: req}
	for _, n := range sizes {
		rp := kmsg.NewFetchResponseTopicPartition()
		rp.RecordBatches = make([]byte, n)
		fs.parts = append(fs.parts, fetchPart{rp: &rp})
	}
	trimFetch(fs)
	for i, want := range []int{0, 80, 0, 20, 0} {
		if got := len(fs.parts[i].rp.RecordBatches); got != want {
			t.Fatalf("partition %d: %d bytes kept, want %d", i, got, want)
		}
	}
	req.MaxBytes = 10
	fs.parts[1].rp.RecordBatches = make([]byte, 80)
	trimFetch(fs)
	if len(fs.parts[1].rp.RecordBatches) != 80 {
		t.Fatal("the first partition's records dropped: no progress past a batch above max_bytes")
	}
}
