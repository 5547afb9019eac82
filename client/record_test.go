package client

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringstream/ringstream/wire"
)

// testRecords2 is a FormatRecords payload, uncompressed: base timestamp base, then recs.
func testRecords2(base int64, recs ...Record) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(base))
	for i := range recs {
		b = appendRecord2(b, &recs[i], recs[i].Timestamp.UnixMilli()-base, uint32(i))
	}
	return b
}

// fetchOnly serves one fixed fetch reply of count records from offset 0 for every fetch.
func fetchOnly(t *testing.T, count uint32, batches []byte) *Client {
	return fetchOnlyB(t, count, batches)
}

func fetchOnlyB(t testing.TB, count uint32, batches []byte) *Client {
	t.Helper()
	var n *fakeNode
	n = startFake(t, 1, func(h *wire.Header, body []byte) ([]byte, bool) {
		if h.Command == wire.CommandLookupStream {
			return n.lookupReply(h, 1, n.addr), false
		}
		return wire.AppendFetchReply(nil, n.from(), &wire.FetchReply{RequestID: reqID(h), Stream: 7,
			Incarnation: 1, Count: count, ConfirmedTail: uint64(count), Batches: batches}), false
	})
	return dialTest(t, testConfig(n.addr))
}

func headersOf(r *Records) string {
	var s []string
	for it := r.Headers(); it.Next(); {
		h := it.Header()
		if h.Value == nil {
			s = append(s, string(h.Key)+"(null)")
		} else {
			s = append(s, string(h.Key)+"="+string(h.Value))
		}
	}
	return strings.Join(s, ",")
}

// Records with keys, headers and timestamps (null and empty keys and values, null header values, a
// timestamp before the batch's base) come back as appended with every codec, in batches of FormatRecords.
func TestRecordsRoundTripEveryCodec(t *testing.T) {
	t0 := time.UnixMilli(1_700_000_000_000)
	in := []Record{
		{Key: []byte("k1"), Value: []byte("v1"), Timestamp: t0,
			Headers: []Header{{Key: []byte("a"), Value: []byte("1")}, {Key: []byte("b"), Value: nil}}},
		{Key: nil, Value: []byte("no key"), Timestamp: t0.Add(-5 * time.Millisecond)},
		{Key: []byte{}, Value: nil, Timestamp: t0.Add(time.Hour), Headers: []Header{{Key: []byte{}, Value: []byte{}}}},
	}
	for _, codec := range []Codec{CodecNone, CodecZstd, CodecS2} {
		t.Run(codec.String(), func(t *testing.T) {
			n, st := ownerCluster(t)
			c := dialTest(t, testConfig(n.addr))
			ctx := testCtx(t)
			p, err := c.Producer(ProducerConfig{Stream: "orders", Codec: codec, BatchBytes: 64, Linger: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			before := time.Now().Truncate(time.Millisecond)
			for range 10 {
				for _, r := range in {
					if err := p.AppendRecord(ctx, r); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := p.Append(ctx, []byte("plain")); err != nil {
				t.Fatal(err)
			}
			if err := p.Close(ctx); err != nil {
				t.Fatal(err)
			}
			after := time.Now()
			if len(st.produces) < 2 {
				t.Fatalf("%d batches, want BatchBytes 64 to split them", len(st.produces))
			}
			for _, m := range st.produces {
				if m.Format != wire.FormatRecords {
					t.Fatalf("batch of format %d, want %d", m.Format, wire.FormatRecords)
				}
			}
			recs, err := c.Fetch(ctx, "orders", 0, FetchOptions{})
			if err != nil {
				t.Fatal(err)
			}
			i := 0
			for ; recs.Next(); i++ {
				if i == 30 {
					if recs.Key() != nil || string(recs.Value()) != "plain" || recs.HeaderCount() != 0 ||
						recs.Timestamp().Before(before) || recs.Timestamp().After(after) {
						t.Fatalf("Append's record: key %q value %q headers %q at %v, want null key, no headers, now",
							recs.Key(), recs.Value(), headersOf(recs), recs.Timestamp())
					}
					continue
				}
				want := in[i%3]
				if recs.Format() != FormatRecords || !bytes.Equal(recs.Key(), want.Key) || (recs.Key() == nil) != (want.Key == nil) ||
					!bytes.Equal(recs.Value(), want.Value) || (recs.Value() == nil) != (want.Value == nil) ||
					!recs.Timestamp().Equal(want.Timestamp) {
					t.Fatalf("record %d: format %v key %q value %q at %v, want %+v", i, recs.Format(), recs.Key(),
						recs.Value(), recs.Timestamp(), want)
				}
				wantH := []string{"a=1,b(null)", "", "="}[i%3]
				if got := headersOf(recs); got != wantH {
					t.Fatalf("record %d headers %q, want %q", i, got, wantH)
				}
				if got := recs.AppendHeaders(nil); len(got) != len(want.Headers) {
					t.Fatalf("record %d AppendHeaders %d, want %d", i, len(got), len(want.Headers))
				}
			}
			if i != 31 || recs.Err() != nil {
				t.Fatalf("%d records, err %v", i, recs.Err())
			}
		})
	}
}

// A FormatValues producer sends format 1 batches; their records have no key or headers and the
// timestamp of their batch's append; a record with a key is refused before anything is sent.
func TestFormatValuesProducer(t *testing.T) {
	n, st := ownerCluster(t)
	st.now = func() int64 { return 1234 }
	c := dialTest(t, testConfig(n.addr))
	ctx := testCtx(t)
	p, err := c.Producer(ProducerConfig{Stream: "orders", Format: FormatValues})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendRecord(ctx, Record{Key: []byte("k"), Value: []byte("v")}); !errors.Is(err, ErrConfig) {
		t.Fatalf("a keyed record to a FormatValues producer: %v, want ErrConfig", err)
	}
	if err := p.AppendRecord(ctx, Record{Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if len(st.produces) != 1 || st.produces[0].Format != wire.FormatValues || string(st.produces[0].Batch) != "\x01v" {
		t.Fatalf("produces %+v", st.produces)
	}
	recs, err := c.Fetch(ctx, "orders", 0, FetchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !recs.Next() || recs.Format() != FormatValues || recs.Key() != nil || string(recs.Value()) != "v" ||
		recs.Timestamp().UnixMilli() != 1234 || recs.HeaderCount() != 0 {
		t.Fatalf("format %v key %q value %q at %d", recs.Format(), recs.Key(), recs.Value(), recs.Timestamp().UnixMilli())
	}
	if _, err := c.Producer(ProducerConfig{Stream: "orders", Format: 3}); !errors.Is(err, ErrConfig) {
		t.Fatalf("format 3: %v, want ErrConfig", err)
	}
}

// A batch of a format this client does not read is refused as such, naming the version; a batch after it
// is not read as garbage.
func TestUnknownFormatRefused(t *testing.T) {
	batches := appendTestBatchAt(nil, 0, 1, CodecNone, 3, 1, 1, 0, []byte{1, 'a'})
	c := fetchOnly(t, 1, batches)
	recs, err := c.Fetch(testCtx(t), "orders", 0, FetchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if recs.Next() || !errors.Is(recs.Err(), ErrUnknownFormat) || errors.Is(recs.Err(), ErrCorruptBatch) ||
		!strings.Contains(recs.Err().Error(), "batch version 3") {
		t.Fatalf("Err %v, want ErrUnknownFormat naming version 3", recs.Err())
	}
}

// Each malformed FormatRecords record is ErrCorruptBatch naming what broke, never a panic.
func TestCorruptRecords2(t *testing.T) {
	rec := func(body ...byte) []byte { // one record: its length, then body
		return append(binary.AppendVarint(nil, int64(len(body))), body...)
	}
	ts := make([]byte, 8)
	v := func(x int64) byte { return binary.AppendVarint(nil, x)[0] } // small values: one byte
	good := []byte{0, 0, 0, v(1), 'k', v(1), 'v', 0}
	cases := map[string]struct {
		payload []byte
		want    string
		count   uint32 // 0: 2
	}{
		"no base timestamp":  {[]byte{1, 2, 3}, "without its base timestamp", 0},
		"record overruns":    {append(append([]byte(nil), ts...), v(20), 0, 0), "overruns", 0},
		"negative length":    {append(append([]byte(nil), ts...), v(-3), 0, 0), "overruns", 0},
		"attributes":         {append(append([]byte(nil), ts...), rec(1, 0, 0, v(-1), v(-1), 0)...), "bad attributes", 0},
		"offset delta":       {append(append([]byte(nil), ts...), rec(0, 0, v(1), v(-1), v(-1), 0)...), "bad offset delta", 0},
		"key overruns":       {append(append([]byte(nil), ts...), rec(0, 0, 0, v(9), 'k', v(-1), 0)...), "bad key length", 0},
		"key length -2":      {append(append([]byte(nil), ts...), rec(0, 0, 0, v(-2), v(-1), 0)...), "bad key length", 0},
		"value overruns":     {append(append([]byte(nil), ts...), rec(0, 0, 0, v(-1), v(5), 'v', 0)...), "bad value length", 0},
		"header count < 0":   {append(append([]byte(nil), ts...), rec(0, 0, 0, v(-1), v(-1), v(-1))...), "bad header count", 0},
		"header count big":   {append(append([]byte(nil), ts...), rec(0, 0, 0, v(-1), v(-1), v(50), 0, 0)...), "bad header count", 0},
		"header key null":    {append(append([]byte(nil), ts...), rec(0, 0, 0, v(-1), v(-1), v(1), v(-1), v(-1))...), "bad header key length", 0},
		"header value over":  {append(append([]byte(nil), ts...), rec(0, 0, 0, v(-1), v(-1), v(1), 0, v(4), 'x')...), "bad header value length", 0},
		"bytes in record":    {append(append([]byte(nil), ts...), rec(0, 0, 0, v(-1), v(-1), 0, 7)...), "bad bytes after the headers", 0},
		"timestamp varint":   {append(append([]byte(nil), ts...), rec(0, 0xff)...), "bad timestamp delta", 0},
		"empty record":       {append(append([]byte(nil), ts...), rec()...), "bad attributes", 0},
		"bytes after last":   {append(append(append([]byte(nil), ts...), rec(good...)...), 0), "bytes past the last record", 1},
		"good then overruns": {append(append(append([]byte(nil), ts...), rec(good...)...), v(9)), "overruns", 0},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			count := tc.count
			if count == 0 {
				count = 2
			}
			c := fetchOnly(t, count, appendTestBatchAt(nil, 0, count, CodecNone, FormatRecords, 1, 1, 0, tc.payload))
			recs, err := c.Fetch(testCtx(t), "orders", 0, FetchOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for recs.Next() {
			}
			if !errors.Is(recs.Err(), ErrCorruptBatch) || !strings.Contains(recs.Err().Error(), tc.want) {
				t.Fatalf("Err %v, want ErrCorruptBatch saying %q", recs.Err(), tc.want)
			}
		})
	}
	// The good record alone, twice, decodes: the table's cases break only what they name.
	payload := append(append(append([]byte(nil), ts...), rec(good...)...), rec(0, 0, v(1), v(1), 'k', v(1), 'v', 0)...)
	c := fetchOnly(t, 2, appendTestBatchAt(nil, 0, 2, CodecNone, FormatRecords, 1, 1, 0, payload))
	recs, err := c.Fetch(testCtx(t), "orders", 0, FetchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	k := 0
	for ; recs.Next(); k++ {
		if string(recs.Key()) != "k" || string(recs.Value()) != "v" {
			t.Fatalf("record %d: %q=%q", k, recs.Key(), recs.Value())
		}
	}
	if k != 2 || recs.Err() != nil {
		t.Fatalf("%d records, err %v", k, recs.Err())
	}
}

// ErrRecordTooLarge counts the encoded record (key, headers, framing, the batch's base timestamp), not
// its value alone: the largest record that fits is taken, one byte more is refused.
func TestRecordTooLargeCountsEncoding(t *testing.T) {
	n, _ := ownerCluster(t)
	c := dialTest(t, testConfig(n.addr))
	ctx := testCtx(t)
	const batch = 100
	p, err := c.Producer(ProducerConfig{Stream: "orders", BatchBytes: batch})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	hdr := []Header{{Key: []byte("h"), Value: []byte("0123456789")}}
	fit := Record{Key: []byte("key"), Headers: hdr}
	for baseTimestampSize+record2Size(&fit, 0, 0) < batch {
		fit.Value = append(fit.Value, 'v')
	}
	if err := p.AppendRecord(ctx, fit); err != nil {
		t.Fatalf("a record of exactly BatchBytes encoded: %v", err)
	}
	over := fit
	over.Value = append(append([]byte(nil), fit.Value...), 'v')
	if err := p.AppendRecord(ctx, over); !errors.Is(err, ErrRecordTooLarge) {
		t.Fatalf("one byte over: %v, want ErrRecordTooLarge", err)
	}
	if len(over.Value) >= batch-2 {
		t.Fatalf("value of %d bytes: the key and header should have counted", len(over.Value))
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

// OffsetForTime finds the first batch appended at or after t by the batches' append times (the
// owner's, not the records' timestamps): before every batch it is the head, after every batch the
// tail, between two batches the later one's base, and a t within a millisecond rounds up.
func TestOffsetForTime(t *testing.T) {
	n, st := ownerCluster(t)
	c := dialTest(t, testConfig(n.addr))
	ctx := testCtx(t)
	// Batches of 3 records appended at these times (ms); the records' own timestamps run backwards.
	appendAt := []int64{100, 100, 200, 300, 300, 300, 400, 500}
	var clock atomic.Int64
	st.now = clock.Load
	p, err := c.Producer(ProducerConfig{Stream: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	for i, at := range appendAt {
		clock.Store(at)
		for j := range 3 {
			r := Record{Value: []byte{byte(i), byte(j)}, Timestamp: time.UnixMilli(10_000 - at)}
			if err := p.AppendRecord(ctx, r); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// A group's first record may go out alone (nothing in flight) and the rest behind it: a group is one
	// or two batches of the same append time, which moves no answer below.
	if len(st.bases) < len(appendAt) {
		t.Fatalf("%d batches, want at least one per Flush", len(st.bases))
	}
	for _, c2 := range []struct {
		t    time.Time
		want uint64
	}{
		{time.UnixMilli(0), 0}, {time.UnixMilli(100), 0}, {time.UnixMilli(101), 6}, {time.UnixMilli(200), 6},
		{time.UnixMilli(250), 9}, {time.UnixMilli(300), 9}, {time.UnixMilli(301), 18}, {time.UnixMilli(500), 21},
		{time.UnixMilli(501), 24}, {time.UnixMilli(9_000), 24},
		{time.UnixMilli(200).Add(time.Microsecond), 9}, {time.UnixMilli(200).Add(-time.Microsecond), 6},
	} {
		got, err := c.OffsetForTime(ctx, "orders", c2.t)
		if err != nil {
			t.Fatal(err)
		}
		if got != c2.want {
			t.Errorf("OffsetForTime(%d µs) = %d, want %d", c2.t.UnixMicro(), got, c2.want)
		}
	}
	if _, err := c.OffsetForTime(ctx, "bad/name", time.Now()); !errors.Is(err, ErrInvalidName) {
		t.Fatalf("a bad stream name: %v", err)
	}
}

// On an empty stream OffsetForTime is the tail, 0, without a fetch.
func TestOffsetForTimeEmpty(t *testing.T) {
	n, _ := ownerCluster(t)
	c := dialTest(t, testConfig(n.addr))
	got, err := c.OffsetForTime(testCtx(t), "orders", time.Now())
	if err != nil || got != 0 || n.count(wire.CommandFetch) != 0 {
		t.Fatalf("OffsetForTime of an empty stream: %d %v after %d fetches", got, err, n.count(wire.CommandFetch))
	}
}

// A fetch during the search that answers no batch, or a batch that does not hold the offset asked for,
// fails OffsetForTime instead of steering the search with a wrong time.
func TestOffsetForTimeRefusesWrongBatches(t *testing.T) {
	for name, c := range map[string]struct {
		count   uint32
		batches []byte
		want    error
	}{
		"no batch":           {0, nil, ErrProtocol},
		"batch without mid":  {10, appendTestBatchAt(nil, 0, 1, CodecNone, FormatValues, 1, 1, 5, []byte{0}), ErrCorruptBatch},
		"batch of a bad sum": {10, []byte("not a batch at all, not a batch at all, not a batch at all, not a batch at all!!"), ErrCorruptBatch},
	} {
		t.Run(name, func(t *testing.T) {
			var n *fakeNode
			n = startFake(t, 1, func(h *wire.Header, body []byte) ([]byte, bool) {
				switch h.Command {
				case wire.CommandLookupStream:
					return n.lookupReply(h, 1, n.addr), false
				case wire.CommandListCursors:
					return wire.AppendListCursorsReply(nil, n.from(), &wire.ListCursorsReply{RequestID: reqID(h), Stream: 7,
						Incarnation: 1, ConfirmedTail: 10}, nil), false
				}
				return wire.AppendFetchReply(nil, n.from(), &wire.FetchReply{RequestID: reqID(h), Stream: 7,
					Incarnation: 1, Count: c.count, ConfirmedTail: 10, Batches: c.batches}), false
			})
			cl := dialTest(t, testConfig(n.addr))
			if off, err := cl.OffsetForTime(testCtx(t), "orders", time.UnixMilli(1)); !errors.Is(err, c.want) {
				t.Fatalf("OffsetForTime: %d %v, want %v", off, err, c.want)
			}
		})
	}
}

// BatchBytesFor holds n records of the size asked as appendRecord2 encodes them, behind the batch's
// base timestamp, with timestamp deltas up to its bound, and is no looser than a few bytes a record.
func TestBatchBytesForHoldsNRecords(t *testing.T) {
	for _, size := range []int{0, 1, 127, 128, 1024, 16383, 16384} {
		for _, n := range []int{1, 2, 16, 200} {
			for _, delta := range []int64{0, 1, 1500, tsDeltaMax} {
				b := make([]byte, baseTimestampSize)
				r := Record{Value: make([]byte, size)}
				for i := range n {
					b = appendRecord2(b, &r, delta, uint32(i))
				}
				got := BatchBytesFor(n, size)
				if len(b) > got || got-len(b) > 8*n {
					t.Fatalf("%d records of %d bytes (delta %d ms): encoded %d bytes, BatchBytesFor %d", n, size,
						delta, len(b), got)
				}
			}
		}
	}
}
