package bench

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// ledgerWith is a ledger of n confirmed records of producer 1 at offsets 0..n-1.
func ledgerWith(n int) *ledger {
	l := &ledger{stream: "s"}
	for i := range n {
		l.confirmed = append(l.confirmed, confirmation{id: recordID{producer: 1, seq: uint64(i)}, offset: uint64(i)})
	}
	return l
}

func record(id recordID) []byte {
	rec := make([]byte, 32)
	putRecord(rec, id, bytes.Repeat([]byte{0xab}, 16))
	return rec
}

func TestVerificationCountsMissingMisplacedAndDuplicated(t *testing.T) {
	cases := []struct {
		name                       string
		read                       func(l *ledger)
		missing, misplaced, dupes  int64
		foreign, readBack, confirm int64
	}{
		{"all back once", func(l *ledger) {
			for i := range 4 {
				l.read(uint64(i), record(recordID{1, uint64(i)}))
			}
		}, 0, 0, 0, 0, 4, 4},
		{"one missing", func(l *ledger) {
			for _, i := range []int{0, 1, 3} {
				l.read(uint64(i), record(recordID{1, uint64(i)}))
			}
		}, 1, 0, 0, 0, 3, 4},
		{"one at two offsets", func(l *ledger) {
			for i := range 4 {
				l.read(uint64(i), record(recordID{1, uint64(i)}))
			}
			l.read(4, record(recordID{1, 2}))
		}, 0, 0, 1, 0, 5, 4},
		{"read at another offset", func(l *ledger) {
			l.read(0, record(recordID{1, 0}))
			l.read(1, record(recordID{9, 9}))
			l.read(2, record(recordID{1, 1}))
			l.read(3, record(recordID{1, 2}))
			l.read(4, record(recordID{1, 3}))
		}, 0, 3, 0, 0, 5, 4},
		{"foreign bytes", func(l *ledger) {
			for i := range 4 {
				l.read(uint64(i), record(recordID{1, uint64(i)}))
			}
			l.read(4, []byte("hello"))
		}, 0, 0, 0, 1, 5, 4},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := ledgerWith(4)
			l.beginRead()
			tc.read(l)
			var v Verification
			l.check(&v)
			if v.Missing != tc.missing || v.Misplaced != tc.misplaced || v.Duplicated != tc.dupes ||
				v.Foreign != tc.foreign || v.ReadBack != tc.readBack || v.Confirmed != tc.confirm {
				t.Fatalf("got %+v", v)
			}
			bad := tc.missing+tc.misplaced+tc.dupes > 0
			if v.OK() == bad || (v.Err() != nil) != bad || (bad && !errors.Is(v.Err(), ErrVerify)) {
				t.Fatalf("OK %v Err %v for %+v", v.OK(), v.Err(), v)
			}
			if bad && len(v.Examples) == 0 {
				t.Fatal("a failed verification names no record")
			}
		})
	}
}

func TestRecordIDRoundTripsAndRejectsOthers(t *testing.T) {
	id := recordID{producer: 7, seq: 1 << 40}
	got, ok := parseRecord(record(id))
	if !ok || got != id {
		t.Fatalf("parse %v %v, want %v", got, ok, id)
	}
	for _, rec := range [][]byte{nil, make([]byte, 15), make([]byte, 64)} {
		if _, ok := parseRecord(rec); ok {
			t.Errorf("parsed %d bytes without the magic", len(rec))
		}
	}
}

func TestMergeBuildsTimelineAndExcludesWarmupFromLatency(t *testing.T) {
	start := time.Unix(1000, 0)
	var live atomic.Int64
	a := newRecorder(start, 100*time.Millisecond, &live)
	b := newRecorder(start, 100*time.Millisecond, &live)
	a.confirm(start, start.Add(50*time.Millisecond), 10, 1000) // in warmup: timeline only
	a.confirm(start.Add(150*time.Millisecond), start.Add(152*time.Millisecond), 10, 1000)
	b.confirm(start.Add(250*time.Millisecond), start.Add(254*time.Millisecond), 5, 500)
	m := merge([]*recorder{a, b})
	if live.Load() != 25 || m.records != 25 || m.bytes != 2500 {
		t.Fatalf("live %d records %d bytes %d", live.Load(), m.records, m.bytes)
	}
	if len(m.timeline) != 3 || m.timeline[0].RecordsPerSec != 100 || m.timeline[2].MBPerSec != 0.005 {
		t.Fatalf("timeline %+v", m.timeline)
	}
	if m.timeline[1].P99Ms != 2 || m.timeline[2].P99Ms != 4 {
		t.Fatalf("p99 per point %+v", m.timeline)
	}
	if m.hist.TotalCount() != 15 {
		t.Fatalf("histogram holds %d, want 15 (warmup excluded)", m.hist.TotalCount())
	}
	lat := latency(m.hist)
	if lat.P50 < 1.99 || lat.P50 > 2.01 || lat.Max < 3.99 || lat.Max > 4.01 {
		t.Fatalf("latency %+v", lat)
	}
}

func sampleReport() *Report {
	gap := 123.4
	yes := true
	return &Report{Config: DefaultConfig(), DurationS: 20, Confirmed: 100, ReadBack: 100,
		ThroughputRecordsPerS: 5, LatencyMs: Latency{P50: 1, P99: 2, P999: 3, Max: 4},
		FailoverGapMs: &gap, RejoinedWithoutRecovery: &yes,
		Events:   []Event{{Name: EventKill, Node: 1, AtMs: 8000}, {Name: EventRestart, Node: 1, AtMs: 14000}},
		Timeline: []Point{{AtMs: 0, RecordsPerSec: 10, P99Ms: 1}, {AtMs: 100, RecordsPerSec: 20, P99Ms: 2}}}
}

func TestReportJSONHasTheIssueKeys(t *testing.T) {
	var b bytes.Buffer
	if err := sampleReport().WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"confirmed", "missing", "duplicated", "failover_gap_ms", "rejoined_without_recovery",
		"throughput_records_per_s", "latency_ms", "config", "timeline", "events"} {
		if _, ok := m[k]; !ok {
			t.Errorf("JSON report has no %q", k)
		}
	}
	lat, _ := m["latency_ms"].(map[string]any)
	for _, k := range []string{"p50", "p99", "p999"} {
		if _, ok := lat[k]; !ok {
			t.Errorf("latency_ms has no %q", k)
		}
	}
}

func TestReportTableSaysPassOrWhy(t *testing.T) {
	r := sampleReport()
	var b bytes.Buffer
	if err := r.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "PASS\n") || !strings.Contains(b.String(), "failover gap") {
		t.Fatalf("table:\n%s", b.String())
	}
	r.Failures = append(r.Failures, "2 confirmed records missing")
	b.Reset()
	r.WriteTable(&b)
	if !strings.Contains(b.String(), "FAIL: 2 confirmed records missing") {
		t.Fatalf("table:\n%s", b.String())
	}
}

func TestPlotWritesPNGAndSVG(t *testing.T) {
	r := sampleReport()
	dir := t.TempDir()
	for name, magic := range map[string]string{"run.png": "\x89PNG", "run.svg": "<?xml"} {
		path := filepath.Join(dir, name)
		if err := r.WritePlot(path); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil || !bytes.HasPrefix(b, []byte(magic)) {
			t.Fatalf("%s: %q... (%v)", name, b[:min(len(b), 8)], err)
		}
	}
}

func TestParseMetricsSumsOverLabels(t *testing.T) {
	text := `# TYPE ringstream_shard_commit_batches_sent_total counter
ringstream_shard_commit_batches_sent_total{node="1",shard="0"} 3
ringstream_shard_commit_batches_sent_total{node="1",shard="1"} 4
# TYPE ringstream_shard_groups_idle gauge
ringstream_shard_groups_idle{node="1",shard="0"} 7
# TYPE x_seconds histogram
x_seconds_bucket{le="1"} 2
x_seconds_bucket{le="+Inf"} 3
x_seconds_sum 1.5
x_seconds_count 3
`
	m, err := parseMetrics([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	if m["ringstream_shard_commit_batches_sent_total"] != 7 || m["ringstream_shard_groups_idle"] != 7 ||
		m["x_seconds_count"] != 3 || m["x_seconds_sum"] != 1.5 {
		t.Fatalf("%v", m)
	}
	d := delta(Metrics{"a": 1}, Metrics{"a": 4, "b": 2})
	if d["a"] != 3 || d["b"] != 2 {
		t.Fatalf("delta %v", d)
	}
	if _, err := parseMetrics([]byte("not { metrics")); err == nil {
		t.Fatal("garbage parsed")
	}
}

func TestConfigValidateNamesTheFlag(t *testing.T) {
	ok := DefaultConfig()
	if err := ok.Validate(); err != nil {
		t.Fatalf("default config: %v", err)
	}
	cases := map[string]func(c *Config){
		"--nodes":              func(c *Config) { c.Nodes = 2 },
		"--record-size":        func(c *Config) { c.RecordSize = 8 },
		"--compression":        func(c *Config) { c.Compression = "lz4" },
		"--kill-owner-at-secs": func(c *Config) { c.KillOwnerAt = 30 },
		"--policy":             func(c *Config) { c.Policy = "majority" },
		"--copies":             func(c *Config) { c.Copies = 4 },
		"--cluster":            func(c *Config) { c.Addrs = []string{"127.0.0.1:1"} },
		"--kill-node":          func(c *Config) { c.KillNodeAt = 2 },
		"--stream":             func(c *Config) { c.Stream = "fast"; _ = c.ApplyStream() },
	}
	for flag, change := range cases {
		c := DefaultConfig()
		change(&c)
		err := c.Validate()
		if flag == "--stream" {
			c2 := DefaultConfig()
			c2.Stream = "fast"
			err = c2.ApplyStream()
		}
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), flag) {
			t.Errorf("%s: %v", flag, err)
		}
	}
}

func TestProcUsageOfThisProcess(t *testing.T) {
	u, err := readProcUsage(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if u.rssMaxMB <= 0 || u.cpuSeconds < 0 {
		t.Fatalf("%+v", u)
	}
}
