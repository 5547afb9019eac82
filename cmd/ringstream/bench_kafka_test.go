package main

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/ringstream/ringstream/bench"
)

// TestBenchKafka: `bench --client kafka` on three real `ringstream serve` processes, a few seconds
// with the owner killed and restarted: franz-go's idempotent producers' every confirmed record is
// read back by franz-go's consumer exactly once at its offset, nothing failed, and the report has
// the throughput, the latency and the failover gap (ended by a batch the new owner wrote), and
// names the client.
func TestBenchKafka(t *testing.T) {
	bin := buildBinary(t)
	out, code := runCLI(t, "", "bench", "--binary", bin, "--dir", t.TempDir(), "--client", "kafka",
		"--duration", "4s", "--warmup", "500ms", "--kill-owner-at-secs", "1.5", "--restart-after-secs", "1",
		"--producers", "2", "--in-flight", "2", "--progress", "off", "--json", "-")
	var rep bench.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("stdout is not the JSON report (%v):\n%s", err, out)
	}
	switch {
	case code != 0 || len(rep.Failures) != 0:
		t.Fatalf("exit %d: %v", code, rep.Failures)
	case rep.Config.Client != bench.ClientKafka:
		t.Fatalf("report's client %q", rep.Config.Client)
	case rep.Confirmed < 1000 || rep.ReadBack != rep.Confirmed || rep.Missing != 0 || rep.Misplaced != 0 ||
		rep.Duplicated != 0 || rep.ProduceErrors != 0:
		t.Fatalf("confirmed %d, read back %d, missing %d, misplaced %d, duplicated %d, produce errors %d",
			rep.Confirmed, rep.ReadBack, rep.Missing, rep.Misplaced, rep.Duplicated, rep.ProduceErrors)
	case rep.FailoverGapMs == nil || *rep.FailoverGapMs < 20: // the kill is found through the links' grace
		t.Fatalf("failover gap %v ms", rep.FailoverGapMs)
	case rep.ThroughputRecordsPerS <= 0 || rep.LatencyMs.P50 <= 0 || rep.LatencyMs.Max < rep.LatencyMs.P99:
		t.Fatalf("throughput %.0f, latency %+v", rep.ThroughputRecordsPerS, rep.LatencyMs)
	}
	t.Logf("kafka bench: %.0f records/s, p50 %.2f ms, p99 %.2f ms, failover gap %.0f ms", rep.ThroughputRecordsPerS,
		rep.LatencyMs.P50, rep.LatencyMs.P99, *rep.FailoverGapMs)
}

// --client takes ringstream or kafka; kafka needs a local cluster and a codec the Kafka listener
// stores.
func TestBenchKafkaFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--client", "rdkafka"}, "--client"},
		{[]string{"--client", "kafka", "--compression", "s2"}, "--client kafka"},
		{[]string{"--client", "kafka", "--cluster", "127.0.0.1:1"}, "--client kafka"},
	} {
		if _, err := resolveBench(t, c.args...); !errors.Is(err, bench.ErrConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want a refusal naming %s", c.args, err, c.want)
		}
	}
	if cfg, err := resolveBench(t, "--client", "kafka", "--compression", "zstd"); err != nil || cfg.Client != bench.ClientKafka {
		t.Errorf("--client kafka --compression zstd: %+v %v", cfg.Client, err)
	}
}
