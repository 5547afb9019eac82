package bench

import (
	"testing"
)

// FuzzParseRecord: any bytes read back from a stream are classified without a panic, and a record
// the bench wrote reads back as its id.
func FuzzParseRecord(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte("hello"))
	f.Add(record(recordID{producer: 3, seq: 42}))
	f.Fuzz(func(t *testing.T, b []byte) {
		l := &ledger{stream: "s"}
		l.beginRead()
		l.read(0, b)
		l.read(1, b)
		if id, ok := parseRecord(b); ok {
			rec := make([]byte, recordHeaderBytes)
			putRecord(rec, id, nil)
			if back, ok := parseRecord(rec); !ok || back != id {
				t.Fatalf("id %v did not round-trip", id)
			}
			if l.dupes != 1 {
				t.Fatalf("a record read at two offsets counted %d duplicates", l.dupes)
			}
		} else if l.foreign != 2 {
			t.Fatalf("foreign bytes counted %d times, want 2", l.foreign)
		}
	})
}

// FuzzParseMetrics: a node's /metrics body, whatever it holds, parses or fails with an error.
func FuzzParseMetrics(f *testing.F) {
	f.Add([]byte("# TYPE a counter\na{x=\"1\"} 3\n"))
	f.Add([]byte("# TYPE h histogram\nh_bucket{le=\"+Inf\"} 1\nh_sum 2\nh_count 1\n"))
	f.Add([]byte("garbage {"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := parseMetrics(b)
		if err == nil && m == nil {
			t.Fatal("no error and no metrics")
		}
	})
}
