package bench

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
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
	live := newLiveStats()
	a := newRecorder(start, 100*time.Millisecond, live)
	b := newRecorder(start, 100*time.Millisecond, live)
	a.confirm(start, start.Add(50*time.Millisecond), 10, 1000) // in warmup: timeline only
	a.confirm(start.Add(150*time.Millisecond), start.Add(152*time.Millisecond), 10, 1000)
	b.confirm(start.Add(250*time.Millisecond), start.Add(254*time.Millisecond), 5, 500)
	b.confirm(start.Add(350*time.Millisecond), start.Add(451*time.Millisecond), 5, 500) // after an empty point
	m := merge([]*recorder{a, b}, 700*time.Millisecond)
	if live.confirmed.Load() != 30 || m.records != 30 || m.bytes != 3000 {
		t.Fatalf("live %d records %d bytes %d", live.confirmed.Load(), m.records, m.bytes)
	}
	if len(m.timeline) != 7 || m.timeline[0].RecordsPerSec != 100 || m.timeline[2].MiBPerSec != 5000.0/mib {
		t.Fatalf("timeline %+v, want 7 points (the span of 700 ms)", m.timeline)
	}
	p99 := func(i int) float64 {
		if m.timeline[i].P99Ms == nil {
			t.Fatalf("point %d has no p99: %+v", i, m.timeline[i])
		}
		return *m.timeline[i].P99Ms
	}
	if p99(1) != 2 || p99(2) != 4 || p99(4) != 101 {
		t.Fatalf("p99 per point %v %v %v", p99(1), p99(2), p99(4))
	}
	for _, i := range []int{3, 5, 6} { // nothing confirmed: no latency, not 0
		if m.timeline[i].P99Ms != nil || m.timeline[i].RecordsPerSec != 0 {
			t.Fatalf("point %d with nothing confirmed: %+v", i, m.timeline[i])
		}
	}
	if m.hist.TotalCount() != 20 {
		t.Fatalf("histogram holds %d, want 20 (warmup excluded)", m.hist.TotalCount())
	}
	lat := latency(m.hist)
	if lat.P50 < 1.99 || lat.P50 > 2.01 || lat.Max < 100.9 || lat.Max > 101.1 {
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
		Timeline: []Point{{AtMs: 0, RecordsPerSec: 10, P99Ms: ptr(1.0)}, {AtMs: 100, RecordsPerSec: 20, P99Ms: ptr(2.0)}}}
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
	if u.rssMaxMiB <= 0 || u.cpuSeconds < 0 {
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

// Byte figures are MiB for memory and MiB/s for throughput, in the table and in the JSON keys.
func TestReportUnitsAreMiB(t *testing.T) {
	r := sampleReport()
	r.ThroughputMiBPerS = 12.5
	r.Nodes = []NodeUsage{{Node: 1, CPUSeconds: 1, RSSMaxMiB: 40.25}}
	var b bytes.Buffer
	if err := r.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"12.50 MiB/s", "rss max 40.2 MiB"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table has no %q:\n%s", want, b.String())
		}
	}
	if strings.Contains(b.String(), " MB") {
		t.Errorf("table still says MB:\n%s", b.String())
	}
	b.Reset()
	if err := r.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"throughput_mib_per_s": 12.5`, `"rss_max_mib": 40.25`, `"mib_per_s"`} {
		if !strings.Contains(b.String(), key) {
			t.Errorf("JSON has no %s", key)
		}
	}
}

// `bench traffic --groups 1000` reports 1000 stream groups: the shards' gauges also count the
// metadata group its primary leads, which the report takes off (idle first, then busy).
func TestTrafficReportCountsStreamGroupsOnly(t *testing.T) {
	tc := DefaultTrafficConfig()
	after := Metrics{"ringstream_shard_groups_idle": 1001, "ringstream_shard_groups_busy": 0}
	rep := trafficReport(tc, Metrics{}, after, 10*time.Second, 1)
	if rep.GroupsIdle != 1000 || rep.GroupsBusy != 0 || rep.MetadataGroupsLed != 1 {
		t.Fatalf("idle %v busy %v metadata %v, want 1000, 0, 1", rep.GroupsIdle, rep.GroupsBusy, rep.MetadataGroupsLed)
	}
	var b bytes.Buffer
	if err := rep.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	if f := strings.Fields(b.String()[strings.Index(b.String(), "stream groups"):]); len(f) < 7 || f[5] != "1000" {
		t.Fatalf("table:\n%s", b.String())
	}
	tc.Busy = true
	busy := trafficReport(tc, Metrics{}, Metrics{"ringstream_shard_groups_busy": 1001}, 10*time.Second, 1)
	if busy.GroupsIdle != 0 || busy.GroupsBusy != 1000 {
		t.Fatalf("busy: idle %v busy %v, want 0, 1000", busy.GroupsIdle, busy.GroupsBusy)
	}
}

// The latency panel draws nothing where nothing was confirmed: the series breaks there instead of
// dropping to 0.
func TestLatencySegmentsBreakWhereNothingWasConfirmed(t *testing.T) {
	tl := []Point{{AtMs: 0, P99Ms: ptr(1.0)}, {AtMs: 100, P99Ms: ptr(2.0)}, {AtMs: 200}, {AtMs: 300},
		{AtMs: 400, P99Ms: ptr(30.0)}, {AtMs: 500}, {AtMs: 600, P99Ms: ptr(3.0)}, {AtMs: 700, P99Ms: ptr(2.5)}}
	segs := latencySegments(tl)
	if len(segs) != 3 || len(segs[0]) != 2 || len(segs[1]) != 1 || len(segs[2]) != 2 {
		t.Fatalf("segments %v, want 3 of 2, 1 and 2 points", segs)
	}
	for _, s := range segs {
		for _, xy := range s {
			if xy.Y == 0 {
				t.Fatalf("a point at 0 ms latency drawn at %v s", xy.X)
			}
		}
	}
	if segs[1][0].X != 0.4 || segs[1][0].Y != 30 {
		t.Fatalf("lone point %v", segs[1][0])
	}
}

// The chart shades the failover gap, from the owner's kill to the first confirm at a newer epoch (to
// the end when there was none), and the stall of a pause; a follower's kill opens no gap.
func TestPlotGapsSpanKillToFirstConfirm(t *testing.T) {
	r := sampleReport()
	r.Config.KillOwnerAt = 8
	r.Timeline = make([]Point, 200) // 20 s
	for i := range r.Timeline {
		r.Timeline[i].AtMs = float64(i * 100)
	}
	r.Events = []Event{{Name: EventKill, Node: 2, AtMs: 3000, Note: "follower"},
		{Name: EventKill, Node: 1, AtMs: 8000, Note: ownerKillNote + "bench-0 at epoch 1"},
		{Name: EventRestart, Node: 1, AtMs: 14000}}
	gap := 250.0
	r.FailoverGapMs = &gap
	if g := r.gaps(); len(g) != 1 || g[0] != (span{8, 8.25}) {
		t.Fatalf("gaps %v, want 8 s to 8.25 s", g)
	}
	r.FailoverGapMs = nil
	if g := r.gaps(); len(g) != 1 || g[0] != (span{8, 20}) {
		t.Fatalf("a gap that never ended: %v, want 8 s to the end (20 s)", g)
	}
	p := DefaultConfig()
	p.KillOwnerAt, p.PauseOwnerAt = 0, 5
	stall := 1500.0
	r = &Report{Config: p, StallMs: &stall, Timeline: make([]Point, 100),
		Events: []Event{{Name: EventPause, Node: 1, AtMs: 5000}, {Name: EventResume, Node: 1, AtMs: 7000}}}
	if g := r.gaps(); len(g) != 1 || g[0] != (span{5, 6.5}) {
		t.Fatalf("pause gaps %v, want 5 s to 6.5 s", g)
	}
}

// Every event the runs mark that is part of a fault's story has a marker colour on the chart.
func TestPlotMarksEveryFaultEvent(t *testing.T) {
	for _, name := range []string{EventKill, EventAssignment, EventRestart, EventPause, EventResume, EventCaughtUp,
		EventRejoined} {
		if _, ok := eventColors[name]; !ok {
			t.Errorf("event %q has no marker on the chart", name)
		}
	}
}

// A pause run's table speaks of the pause and the resume, not of a kill and a restart, and says why
// there is no rejoin when the owner kept the stream.
func TestReportTablePauseWording(t *testing.T) {
	r := sampleReport()
	r.Config.KillOwnerAt, r.Config.PauseOwnerAt = 0, 3
	assign, catch := 3100.0, 40.0
	r.NewAssignmentMs, r.CatchUpMs = &assign, &catch
	var b bytes.Buffer
	if err := r.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	s := b.String()
	if !strings.Contains(s, "3100.0 ms after the pause") || !strings.Contains(s, "40.0 ms after the resume") ||
		strings.Contains(s, "after the kill") || strings.Contains(s, "after the restart") {
		t.Fatalf("table:\n%s", s)
	}
	r.NewAssignmentMs, r.CatchUpMs, r.RejoinedWithoutRecovery = nil, nil, nil
	b.Reset()
	r.WriteTable(&b)
	if !strings.Contains(b.String(), "no failover during the pause") {
		t.Fatalf("table:\n%s", b.String())
	}
	r = sampleReport()
	b.Reset()
	r.WriteTable(&b)
	if !strings.Contains(b.String(), "after the kill") || !strings.Contains(b.String(), "after the restart") {
		t.Fatalf("kill run's table:\n%s", b.String())
	}
}

// A stretch with nothing confirmed that no fault's gap explains (two points or more) is shaded too;
// one inside or touching the failover gap is part of it.
func TestPlotShadesOtherStretchesWithoutConfirms(t *testing.T) {
	r := sampleReport()
	r.Config.KillOwnerAt = 1
	rates := []float64{5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 0, 0, 0, 5, 5, 0, 5, 5, 0, 0, 0, 5}
	r.Timeline = nil
	for i, v := range rates {
		r.Timeline = append(r.Timeline, Point{AtMs: float64(i * 100), RecordsPerSec: v})
	}
	gap := 300.0
	r.FailoverGapMs = &gap
	r.Events = []Event{{Name: EventKill, Node: 1, AtMs: 1000, Note: ownerKillNote + "s at epoch 1"}}
	got := r.unconfirmed(r.gaps())
	if len(got) != 1 || got[0].from != 1.8 || got[0].to < 2.09 || got[0].to > 2.11 {
		t.Fatalf("unconfirmed %v, want one stretch 1.8 s to 2.1 s", got)
	}
}
