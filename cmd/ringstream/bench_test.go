package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/ringstream/ringstream/bench"
	"github.com/ringstream/ringstream/client"
	"github.com/ringstream/ringstream/localcluster"
)

// resolveBench parses args as `ringstream bench` flags and resolves them.
func resolveBench(t *testing.T, args ...string) (bench.Config, error) {
	t.Helper()
	bf := &benchFlags{cfg: bench.DefaultConfig()}
	cmd := &cobra.Command{Use: "bench"}
	bf.register(cmd.Flags(), nil)
	if err := cmd.ParseFlags(args); err != nil {
		t.Fatal(err)
	}
	return bf.resolve(cmd.Flags())
}

func TestBenchFlags_DefaultFaultsFollowTheDuration(t *testing.T) {
	cases := []struct {
		args              []string
		killAt, restartAt float64
		follower          float64
	}{
		{nil, 8, 6, 0}, // the spec's case: 20 s, kill at 8 s, restart at 14 s
		{[]string{"--duration", "10s"}, 4, 3, 0},
		{[]string{"--stream", "durable", "--kill-owner-at-secs", "3", "--duration", "10s"}, 3, 3, 0},
		{[]string{"--kill-follower-at-secs", "2"}, 0, 6, 2}, // a fault given: no default owner kill
		{[]string{"--restart-after-secs", "-1"}, 8, -1, 0},
	}
	for _, tc := range cases {
		c, err := resolveBench(t, tc.args...)
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if c.KillOwnerAt != tc.killAt || c.RestartAfter != tc.restartAt || c.KillFollowerAt != tc.follower {
			t.Errorf("%v: kill owner at %v, restart after %v, kill follower at %v; want %v, %v, %v", tc.args,
				c.KillOwnerAt, c.RestartAfter, c.KillFollowerAt, tc.killAt, tc.restartAt, tc.follower)
		}
	}
}

func TestBenchFlags_StreamKindAndOverrides(t *testing.T) {
	c, err := resolveBench(t, "--stream", "local")
	if err != nil || c.Copies != 1 || c.Policy != "local_durable" {
		t.Fatalf("--stream local: %d copies, %s (%v)", c.Copies, c.Policy, err)
	}
	c, err = resolveBench(t, "--stream", "durable", "--copies", "2", "--policy", "count_durable(2)")
	if err != nil || c.Copies != 2 || c.Policy != "count_durable(2)" {
		t.Fatalf("overrides: %d copies, %s (%v)", c.Copies, c.Policy, err)
	}
	for _, args := range [][]string{
		{"--stream", "fast"},
		{"--duration", "5s", "--kill-owner-at-secs", "7"},
		{"--cluster", "127.0.0.1:1", "--kill-owner-at-secs", "1"},
		{"--compression", "lz4"},
		{"--stream-prefix", "two words"},
	} {
		if _, err := resolveBench(t, args...); !errors.Is(err, bench.ErrConfig) || !strings.Contains(err.Error(), "--") {
			t.Errorf("%v: %v, want bench.ErrConfig naming the flag", args, err)
		}
	}
	c, err = resolveBench(t, "--cluster", "127.0.0.1:1, 127.0.0.1:2", "--admin", "127.0.0.1:3")
	if err != nil || len(c.Addrs) != 2 || c.Addrs[1] != "127.0.0.1:2" || len(c.Admins) != 1 || c.KillOwnerAt != 0 {
		t.Fatalf("--cluster: %+v (%v)", c, err)
	}
}

func TestBenchSweepShardList(t *testing.T) {
	got, err := parseInts("1, 2,4")
	if err != nil || len(got) != 3 || got[2] != 4 {
		t.Fatalf("%v %v", got, err)
	}
	for _, bad := range []string{"", "0", "1,x", "-2"} {
		if _, err := parseInts(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// `--json -` puts the JSON document alone on stdout (the table goes to stderr) and creates no file
// named "-"; `--json FILE` writes the file and leaves the table on stdout.
func TestBenchJSONDashWritesStdout(t *testing.T) {
	t.Chdir(t.TempDir())
	rep := &bench.Report{Config: bench.DefaultConfig(), Confirmed: 42}
	var out, errOut bytes.Buffer
	cmd := &cobra.Command{Use: "bench"}
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	if err := writeOutputs(cmd, "-", rep.WriteTable, rep.WriteJSON); err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil || doc["confirmed"] != 42.0 {
		t.Fatalf("stdout is not the JSON document (%v):\n%s", err, out.String())
	}
	if !strings.Contains(errOut.String(), "confirmed") {
		t.Fatalf("the table is not on stderr:\n%s", errOut.String())
	}
	if _, err := os.Stat("-"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a file named - was created (%v)", err)
	}
	out.Reset()
	errOut.Reset()
	if err := writeOutputs(cmd, "out.json", rep.WriteTable, rep.WriteJSON); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("out.json")
	if err != nil || json.Unmarshal(b, &doc) != nil {
		t.Fatalf("out.json: %v %q", err, b)
	}
	if !strings.Contains(out.String(), "result") || errOut.Len() != 0 {
		t.Fatalf("table not on stdout: stdout %q stderr %q", out.String(), errOut.String())
	}
}

// --progress is auto, bar, lines or off; bar draws one redrawn line, lines plain ones; anything else
// is refused naming the flag.
func TestBenchProgressFlag(t *testing.T) {
	for arg, bar := range map[string]bool{"bar": true, "lines": false, "off": false} {
		c, err := resolveBench(t, "--progress", arg)
		if err != nil || c.ProgressBar != bar {
			t.Errorf("--progress %s: bar %v (%v), want %v", arg, c.ProgressBar, err, bar)
		}
	}
	if c, err := resolveBench(t); err != nil || c.ProgressBar { // the test's stderr is no terminal
		t.Errorf("--progress auto without a terminal: bar %v (%v), want plain lines", c.ProgressBar, err)
	}
	if _, err := resolveBench(t, "--progress", "on"); !errors.Is(err, bench.ErrConfig) ||
		!strings.Contains(err.Error(), "--progress") {
		t.Errorf("--progress on: %v, want a refusal naming --progress", err)
	}
}

// benchOnCluster runs `ringstream bench --cluster` against lc with a short load and returns its JSON
// report and exit status.
func benchOnCluster(t *testing.T, lc *localcluster.Cluster, extra ...string) (map[string]any, int) {
	t.Helper()
	var admins []string
	for _, n := range lc.Nodes() {
		admins = append(admins, n.AdminAddr)
	}
	args := append([]string{"bench", "--cluster", strings.Join(lc.ClientAddrs(), ","), "--admin",
		strings.Join(admins, ","), "--secret", lc.Secret(), "--duration", "2s", "--warmup", "0", "--producers", "1",
		"--in-flight", "1", "--progress", "off", "--json", "-"}, extra...)
	out, code := runCLI(t, "", args...)
	var doc map[string]any
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("bench --cluster: stdout is not the JSON report (%v):\n%s", err, out)
	}
	return doc, code
}

// TestBenchCluster_SecondRunWorks: `bench --cluster` twice on the same running cluster (three real
// `ringstream serve` processes): each run creates streams of its own and deletes them once verified,
// so the second does not meet the first's stream; --keep-streams leaves them.
func TestBenchCluster_SecondRunWorks(t *testing.T) {
	bin := buildBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	lc, err := localcluster.Start(ctx, localcluster.Options{Binary: bin, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	var prefixes []string
	for run := range 2 {
		doc, code := benchOnCluster(t, lc)
		cfg, _ := doc["config"].(map[string]any)
		prefix, _ := cfg["stream_prefix"].(string)
		if code != 0 || doc["confirmed"] == 0.0 || !strings.HasPrefix(prefix, "bench-") {
			t.Fatalf("run %d: exit %d, confirmed %v, prefix %q; failures %v", run+1, code, doc["confirmed"], prefix,
				doc["failures"])
		}
		prefixes = append(prefixes, prefix)
	}
	if prefixes[0] == prefixes[1] {
		t.Fatalf("both runs used the streams %s-*", prefixes[0])
	}
	doc, code := benchOnCluster(t, lc, "--keep-streams", "--stream-prefix", "kept")
	if code != 0 {
		t.Fatalf("--keep-streams run: exit %d, failures %v", code, doc["failures"])
	}
	c, err := client.Dial(ctx, client.Config{Addrs: lc.ClientAddrs(), Cluster: 1, Secret: []byte(lc.Secret())})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	list, err := c.ListStreams(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range list {
		names = append(names, s.Name)
	}
	if len(names) != 1 || names[0] != "kept-0" {
		t.Fatalf("streams left on the cluster %v, want only kept-0 (the other runs delete theirs)", names)
	}
}

// TestBenchTraceStages: `bench --trace-stages` on three real `ringstream serve` processes, one record
// at a time. Every batch the client traced is traced by the owner's handler, the owner and the quorum
// follower too; every stage is seen for each; no stage is negative beyond the clock's noise (the marks
// of four processes are in path order on one clock); the top-level stages add up to the end to end,
// and the owner's commit and the quorum follower's path each fit inside the replicate-and-confirm
// stage they detail. Behaviour, not speed.
func TestBenchTraceStages(t *testing.T) {
	bin := buildBinary(t)
	out, code := runCLI(t, "", "bench", "--binary", bin, "--dir", t.TempDir(), "--kill-owner-at-secs", "0",
		"--duration", "2s", "--warmup", "500ms", "--producers", "1", "--batch", "1", "--in-flight", "1",
		"--trace-stages", "--progress", "off", "--json", "-")
	var rep bench.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("stdout is not the JSON report (%v):\n%s", err, out)
	}
	if code != 0 {
		t.Fatalf("exit %d: %v", code, rep.Failures)
	}
	b := rep.StageBudget
	if b == nil || b.Batches < 10 || b.Batches != b.ClientBatches || len(b.Failures) != 0 {
		t.Fatalf("budget %+v: want every batch the client traced (at least 10) traced end to end", b)
	}
	const noiseUs = 20 // bench's stageClockNoise
	rows := map[string]bench.StageRow{}
	var topMeans float64
	for _, s := range b.Stages {
		rows[s.Name] = s
		if s.Count != b.Batches {
			t.Errorf("stage %q seen in %d of %d batches", s.Name, s.Count, b.Batches)
		}
		if s.MinUs < -noiseUs {
			t.Errorf("stage %q: a batch took %.1f us (its marks out of path order)", s.Name, s.MinUs)
		}
		if s.Part == "" {
			topMeans += s.MeanUs
		}
	}
	top := []string{bench.StageClientTake, bench.StageClientSend, bench.StageToOwner, bench.StageOwnerStep, bench.StageReplicate,
		bench.StageOwnerReply, bench.StageToClient, bench.StageClientWake}
	parts := []string{bench.StageOwnerQueue, bench.StageOwnerSync, bench.StagePrepare, bench.StageFollowQueue,
		bench.StageFollowSync, bench.StageFollowAnswer, bench.StageAnswer, bench.StageConfirm}
	for _, name := range append(top, parts...) {
		if _, ok := rows[name]; !ok {
			t.Errorf("stage %q missing from the budget", name)
		}
	}
	if len(rows) != len(top)+len(parts) {
		t.Errorf("%d stages, want %d", len(rows), len(top)+len(parts))
	}
	if d := topMeans - b.EndToEnd.MeanUs; d < -1 || d > 1 {
		t.Errorf("top-level stages' means add up to %.1f us, the end to end's mean is %.1f us", topMeans,
			b.EndToEnd.MeanUs)
	}
	mean := func(names ...string) float64 {
		var sum float64
		for _, n := range names {
			sum += rows[n].MeanUs
		}
		return sum
	}
	replicate := rows[bench.StageReplicate].MeanUs
	if owner := mean(bench.StageOwnerQueue, bench.StageOwnerSync, bench.StageConfirm); owner > replicate+noiseUs {
		t.Errorf("the owner's commit and confirm take %.1f us on average, more than replicate and confirm (%.1f us)",
			owner, replicate)
	}
	follower := mean(bench.StagePrepare, bench.StageFollowQueue, bench.StageFollowSync, bench.StageFollowAnswer,
		bench.StageAnswer, bench.StageConfirm)
	if follower > replicate+noiseUs {
		t.Errorf("the quorum follower's path and the confirm take %.1f us on average, more than replicate and "+
			"confirm (%.1f us)", follower, replicate)
	}
	if b.EndToEnd.P50Us <= 0 || b.EndToEnd.ShareOfP50 != 1 {
		t.Errorf("end to end %+v", b.EndToEnd)
	}
}

// --trace-stages reads the nodes' traces from their admin listeners: with --cluster it needs --admin.
func TestBenchTraceStagesOnClusterNeedsAdmin(t *testing.T) {
	if _, err := resolveBench(t, "--cluster", "127.0.0.1:1", "--trace-stages"); err == nil ||
		!strings.Contains(err.Error(), "--trace-stages") {
		t.Fatalf("--cluster --trace-stages without --admin: %v, want a refusal naming --trace-stages", err)
	}
	if c, err := resolveBench(t, "--cluster", "127.0.0.1:1", "--admin", "127.0.0.1:2", "--trace-stages"); err != nil ||
		!c.TraceStages {
		t.Fatalf("--cluster --admin --trace-stages: %v (trace %v)", err, c.TraceStages)
	}
}
