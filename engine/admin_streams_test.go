package engine

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/ringstream/ringstream/wire"
)

// scrape is n's /metrics text.
func scrape(t *testing.T, n *Node) string {
	t.Helper()
	resp, err := http.Get("http://" + n.AdminAddr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// sample is the value of the sample line of text that starts with prefix ("" when absent).
func sample(text, prefix string) string {
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, prefix) {
			return line[strings.LastIndexByte(line, ' ')+1:]
		}
	}
	return ""
}

// requireTool is the path of tool, or skips the test naming why: unless CI=true or env=1 asks
// for the test to run, which fails it instead.
func requireTool(t *testing.T, tool, env string) string {
	t.Helper()
	path, err := exec.LookPath(tool)
	if err == nil {
		return path
	}
	if os.Getenv("CI") == "true" || os.Getenv(env) == "1" {
		t.Fatalf("%s is not on PATH (CI=true or %s=1: this test must run)", tool, env)
	}
	t.Skipf("%s is not on PATH; set %s=1 to make this a failure", tool, env)
	return ""
}

// TestNode_MetricsOfTheDataPathAndTheProcess: after two produces of three records (one retried) and
// a fetch of them, the owner's /metrics counts 3 records appended and the fetch's records and bytes,
// shows its copy's per-stream series, the Go and process collectors and the build info; with
// metrics.per_stream_max = 1 a node holding two copies shows series for the lower stream id only and
// counts one omitted. The whole text passes `promtool check metrics` without a word.
func TestNode_MetricsOfTheDataPathAndTheProcess(t *testing.T) {
	c := newTestClusterGrace(t, "", 50, "[metrics]", "per_stream_max = 1")
	c.waitRegistered()
	tc := dialNode(t, c.nodes[1].ClientAddr(), "")
	created, look := tc.createLooked("counted")
	owner := c.nodes[look.Owner]
	oc := dialNode(t, netip.MustParseAddrPort(string(look.OwnerAddr)), "")
	var e *wire.ErrorReply
	waitForTB(t, "the owner's copy serving", func() bool {
		_, e = oc.produce(created.Stream, 7, 1, 2, []byte("first-second"))
		return e == nil
	})
	if _, e = oc.produce(created.Stream, 7, 2, 1, []byte("third")); e != nil {
		t.Fatalf("produce: %+v", e)
	}
	if r, e := oc.produce(created.Stream, 7, 2, 1, []byte("third")); e != nil || !r.Duplicate {
		t.Fatalf("retried produce: %+v %+v", r, e)
	}
	rid := oc.next()
	oc.write(wire.AppendFetch(nil, wire.From{Cluster: nodeTestCluster}, &wire.Fetch{RequestID: rid, Stream: created.Stream,
		BytesMax: 1 << 20}))
	h, body := oc.read()
	fr, err := wire.DecodeFetchReply(&h, body)
	if err != nil || fr.Count != 3 {
		t.Fatalf("fetch reply %+v: %v", fr, err)
	}
	second, _ := tc.createLooked("counted-too")
	node := fmt.Sprintf(`node="%d"`, owner.ID())
	waitForTB(t, "the owner's series of its copy", func() bool {
		text := scrape(t, owner)
		return sample(text, fmt.Sprintf(`ringstream_stream_confirmed_offset{%s,stream="%d"}`, node, created.Stream)) == "3" &&
			sample(text, fmt.Sprintf(`ringstream_stream_copies_in_sync{%s,stream="%d"}`, node, created.Stream)) == "3" &&
			sample(text, fmt.Sprintf(`ringstream_stream_series_omitted{%s}`, node)) == "1"
	})
	text := scrape(t, owner)
	want := map[string]string{
		fmt.Sprintf(`ringstream_records_appended_total{%s}`, node):                        "3",
		fmt.Sprintf(`ringstream_records_fetched_total{%s}`, node):                         "3",
		fmt.Sprintf(`ringstream_bytes_appended_total{%s}`, node):                          fmt.Sprint(len(fr.Batches)),
		fmt.Sprintf(`ringstream_bytes_fetched_total{%s}`, node):                           fmt.Sprint(len(fr.Batches)),
		fmt.Sprintf(`ringstream_stream_end_offset{%s,stream="%d"}`, node, created.Stream): "3",
		fmt.Sprintf(`ringstream_stream_owner{%s,stream="%d"}`, node, created.Stream):      "1",
		fmt.Sprintf(`ringstream_stream_end_offset{%s,stream="%d"}`, node, second.Stream):  "",
		fmt.Sprintf(`ringstream_build_info{commit="`):                                     "1",
		`go_goroutines `:    "",
		`process_open_fds `: "",
	}
	for prefix, v := range want {
		got := sample(text, prefix)
		switch {
		case v == "" && strings.HasSuffix(prefix, " ") && got == "":
			t.Errorf("%s missing", prefix)
		case v == "" && !strings.HasSuffix(prefix, " ") && got != "":
			t.Errorf("%s = %s; want no such series", prefix, got)
		case v != "" && got != v:
			t.Errorf("%s = %q; want %s", prefix, got, v)
		}
	}
	if !strings.Contains(text, fmt.Sprintf(`,goversion="go`)) || !strings.Contains(text, `,version="`) {
		t.Errorf("ringstream_build_info without goversion or version: %q", sample(text, "ringstream_build_info"))
	}
	if t.Failed() {
		return
	}
	promtool := requireTool(t, "promtool", "RINGSTREAM_REQUIRE_PROMTOOL")
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(text)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil || strings.TrimSpace(out.String()) != "" {
		t.Fatalf("promtool check metrics: %v\n%s", err, out.String())
	}
}

// Status carries the node's [storage] retention, which `stream describe` prints beside each copy's
// retained head and bytes.
func TestNode_StatusCarriesTheRetentionSettings(t *testing.T) {
	dir := t.TempDir()
	cfg := nodeTestConfigN(t, 4, 4, dir, "", 50) // node 4 holds no metadata replica: nothing to format
	cfg.File.Storage.RetentionBytes, cfg.File.Storage.RetentionAge = 1<<20, 3_600_000
	n, err := NewNodeWithOptions(cfg, quietLogger(), NodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Kill()
	if got := n.Status().Retention; got.Bytes != 1<<20 || got.AgeMs != 3_600_000 {
		t.Fatalf("status retention %+v, want 1048576 bytes and 3600000 ms", got)
	}
}
