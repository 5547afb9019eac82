package kafkatest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// requireKafkaJS is the node binary and a directory whose node_modules holds KafkaJS 2, installed
// there with npm the first time (in the user's cache directory, so later runs reuse it); or it
// skips naming what is missing (a failure with RINGSTREAM_REQUIRE_KAFKAJS=1 or CI=true).
func requireKafkaJS(t *testing.T, ctx context.Context) (node, modules string) {
	t.Helper()
	missing := func(why string) {
		if os.Getenv("CI") == "true" || os.Getenv("RINGSTREAM_REQUIRE_KAFKAJS") == "1" {
			t.Fatalf("%s (CI=true or RINGSTREAM_REQUIRE_KAFKAJS=1: this test must run)", why)
		}
		t.Skipf("%s; set RINGSTREAM_REQUIRE_KAFKAJS=1 to make this a failure", why)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		missing("node is not on PATH (node 20 and npm run the KafkaJS test)")
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "ringstream-kafkajs")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "kafkajs", "package.json")); err == nil {
		return node, filepath.Join(dir, "node_modules")
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		missing("npm is not on PATH (it installs kafkajs@2)")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, npm, "install", "--no-save", "--no-audit", "--no-fund", "--prefix", dir, "kafkajs@2")
	if out, err := cmd.CombinedOutput(); err != nil {
		missing(fmt.Sprintf("npm install kafkajs@2: %v\n%s", err, out))
	}
	return node, filepath.Join(dir, "node_modules")
}

// jsEvent is one line testdata/groups.js prints.
type jsEvent struct {
	Ev         string  `json:"ev"`
	C          string  `json:"c"`
	P          int32   `json:"p"`
	O          int64   `json:"o"`
	K          string  `json:"k"`
	V          string  `json:"v"`
	Partitions []int32 `json:"partitions"`
	// AfterLeaveMs is when a join came after B began to leave (-1: before).
	AfterLeaveMs int64 `json:"afterLeaveMs"`
}

// TestKafkaJS_ConsumerGroup: two KafkaJS consumers of one group split a 4-partition topic between
// them and read the 2,000 records a KafkaJS producer writes, each record exactly once across the
// group. Then one consumer disconnects (it commits its offsets and leaves the group): the other is
// given all 4 partitions in the rebalance the leave starts (well within the leaver's session
// timeout) and reads the next 2,000 records from the committed offsets, again each exactly once
// and none of the first 2,000 a second time. At the end OffsetFetch (franz-go, on another
// connection) gives the group's committed offsets: every partition's record count.
func TestKafkaJS_ConsumerGroup(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	node, modules := requireKafkaJS(t, ctx)
	lc := startGroupCluster(t, ctx)
	cl := franzClient(t, lc)
	const topic, group, n = "jsgroup", "js-consumers", 2000
	createTopic(t, ctx, cl, topic, 4)
	partitions(t, ctx, cl, topic, 4)

	cmd := exec.CommandContext(ctx, node, filepath.Join("testdata", "groups.js"))
	cmd.Env = append(os.Environ(), "NODE_PATH="+modules, "BROKERS="+strings.Join(lc.KafkaAddrs(), ","),
		"PASSWORD="+password(lc), "TOPIC="+topic, "GROUP="+group, fmt.Sprintf("N=%d", n))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	ran := time.Since(start)
	t.Logf("groups.js ran %v", ran.Round(time.Millisecond))
	if ran > 6*time.Second { // slower than usual (about 3 s): the coordinator's log says why
		for _, nd := range lc.Nodes() {
			log, _ := os.ReadFile(nd.LogPath())
			for _, line := range strings.Split(string(log), "\n") {
				if strings.Contains(line, "kafka: group") {
					t.Logf("node %d: %s", nd.ID, line)
				}
			}
		}
		t.Logf("groups.js stderr:\n%s", stderr.String())
	}
	if err != nil {
		t.Fatalf("groups.js: %v\nstderr:\n%s\nstdout (tail):\n%s", err, stderr.String(), tail(stdout.String(), 20))
	}

	type key struct {
		p int32
		o int64
	}
	seen := make(map[key]jsEvent)
	values := make(map[string]bool)
	left, done := false, false
	var joinsA [][]int32
	var lastA jsEvent
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		var e jsEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("groups.js printed %q: %v", sc.Text(), err)
		}
		switch e.Ev {
		case "msg":
			k := key{e.P, e.O}
			if prev, dup := seen[k]; dup {
				t.Errorf("partition %d offset %d read twice: by %s (%s), then by %s (%s)", e.P, e.O, prev.C, prev.V, e.C, e.V)
			}
			seen[k] = e
			if values[e.V] {
				t.Errorf("value %s read at two offsets", e.V)
			}
			values[e.V] = true
			if left && e.C == "B" {
				t.Errorf("B read partition %d offset %d after it left", e.P, e.O)
			}
		case "join":
			if e.C == "A" {
				joinsA = append(joinsA, e.Partitions)
				lastA = e
			}
		case "left":
			left = true
		case "done":
			done = true
		}
	}
	if !done {
		t.Fatalf("groups.js did not finish; stderr:\n%s", stderr.String())
	}
	for i := range 2 * n {
		if !values[fmt.Sprintf("v%d", i)] {
			t.Errorf("record v%d never read", i)
		}
	}
	if len(lastA.Partitions) != 4 {
		t.Errorf("A's last assignment: partitions %v, want all 4", lastA.Partitions)
	}
	// B's LeaveGroup rebalances the group at once, not after B's 10 s session timeout.
	if lastA.AfterLeaveMs < 0 || lastA.AfterLeaveMs > 5000 {
		t.Errorf("A was given every partition %d ms after B began to leave, want within 5 s (B's session is 10 s)",
			lastA.AfterLeaveMs)
	}
	var byB int
	for _, e := range seen {
		if e.C == "B" {
			byB++
		}
	}
	if byB == 0 {
		t.Errorf("B read nothing: the group never split the partitions")
	}
	t.Logf("%d records read, %d by B; A's assignments %v, the last %d ms after B began to leave", len(seen), byB, joinsA,
		lastA.AfterLeaveMs)

	// The committed offsets, asked of the coordinator by franz-go: each partition's end.
	ends := listLatest(t, ctx, cl, topic, 4)
	committed := offsetFetch(t, ctx, cl, group, topic, 4)
	for p, e := range ends {
		if committed[p] != e {
			t.Errorf("partition %d: committed offset %d, want its end %d", p, committed[p], e)
		}
	}
}

func tail(s string, lines int) string {
	ls := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(ls) > lines {
		ls = ls[len(ls)-lines:]
	}
	return strings.Join(ls, "\n")
}
