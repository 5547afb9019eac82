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
		"throughput_records_per_s", "latency_ms", "config", "timeline", "events", "cpu_us_per_record"} {
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

// cpu_us_per_record is the nodes' and the bench's CPU time over the load per confirmed record, and
// not measured when a node's process changed, vanished or appeared in between, or there are no local
// nodes or no records.
func TestCPUPerRecord(t *testing.T) {
	before := cpuSample{self: 1, nodes: map[uint16]nodeCPU{1: {pid: 10, seconds: 1}, 2: {pid: 11, seconds: 2}}}
	after := cpuSample{self: 1.25, nodes: map[uint16]nodeCPU{1: {pid: 10, seconds: 1.5}, 2: {pid: 11, seconds: 2.5}}}
	parts, why := cpuPerRecord(before, after, 1000)
	if why != "" || parts != (CPUParts{TotalUs: 1250, NodesUs: 1000, BenchUs: 250}) {
		t.Fatalf("got %+v (%q), want 1250 us per record: 1000 of the nodes, 250 of the bench", parts, why)
	}
	notMeasured := map[string]func() (cpuSample, cpuSample, int64){
		"restarted": func() (cpuSample, cpuSample, int64) {
			a := cpuSample{self: 2, nodes: map[uint16]nodeCPU{1: {pid: 12, seconds: 0.1}, 2: after.nodes[2]}}
			return before, a, 1000
		},
		"killed": func() (cpuSample, cpuSample, int64) {
			return before, cpuSample{self: 2, nodes: map[uint16]nodeCPU{2: after.nodes[2]}}, 1000
		},
		"started": func() (cpuSample, cpuSample, int64) {
			a := cpuSample{self: 2, nodes: map[uint16]nodeCPU{1: after.nodes[1], 2: after.nodes[2], 3: {pid: 13}}}
			return before, a, 1000
		},
		"no records":      func() (cpuSample, cpuSample, int64) { return before, after, 0 },
		"not local":       func() (cpuSample, cpuSample, int64) { return cpuSample{self: 1}, cpuSample{self: 2}, 1000 },
		"no node running": func() (cpuSample, cpuSample, int64) { return cpuSample{nodes: map[uint16]nodeCPU{}}, after, 1000 },
	}
	for name, f := range notMeasured {
		b, a, n := f()
		if parts, why := cpuPerRecord(b, a, n); why == "" {
			t.Errorf("%s: measured %+v, want not measured", name, parts)
		}
	}
}

// The report carries cpu_us_per_record in its JSON (null with the reason when not measured) and its
// table.
func TestReportCarriesCPUPerRecord(t *testing.T) {
	r := sampleReport()
	r.setCPU(CPUParts{TotalUs: 41.5, NodesUs: 30.25, BenchUs: 11.25}, "")
	var b bytes.Buffer
	if err := r.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	parts, _ := m["cpu_us_per_record_parts"].(map[string]any)
	if m["cpu_us_per_record"] != 41.5 || parts["nodes"] != 30.25 || parts["bench"] != 11.25 {
		t.Fatalf("JSON cpu_us_per_record %v, parts %v", m["cpu_us_per_record"], m["cpu_us_per_record_parts"])
	}
	b.Reset()
	if err := r.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "cpu per record         41.5 us (nodes 30.2, bench client 11.2)") {
		t.Fatalf("table:\n%s", b.String())
	}
	r.setCPU(CPUParts{}, "node 1 was killed or restarted during the load")
	b.Reset()
	if err := r.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	m = nil
	if err := json.Unmarshal(b.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	if v, ok := m["cpu_us_per_record"]; !ok || v != nil || m["cpu_not_measured"] == nil {
		t.Fatalf("not measured: cpu_us_per_record %v (present %v), cpu_not_measured %v", v, ok, m["cpu_not_measured"])
	}
	b.Reset()
	r.WriteTable(&b)
	if !strings.Contains(b.String(), "- (node 1 was killed or restarted during the load)") {
		t.Fatalf("table:\n%s", b.String())
	}
}

// The bench's own CPU time is read from getrusage: this test process has used some.
func TestSelfCPUSeconds(t *testing.T) {
	if s := selfCPUSeconds(); s <= 0 {
		t.Fatalf("self CPU %v s", s)
	}
}
