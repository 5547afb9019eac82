package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ringstream/ringstream/localcluster"
)

// TestMain runs the package's tests with no profile and no RINGSTREAM_* variable of the machine's
// user: XDG_CONFIG_HOME points at an empty directory of its own (GOENV keeps the go command's file).
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "ringstream-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// The go command's settings file lives under the user's config directory too: keep it for the
	// tests that build the binary.
	if os.Getenv("GOENV") == "" {
		if cfg, err := os.UserConfigDir(); err == nil {
			os.Setenv("GOENV", filepath.Join(cfg, "go", "env"))
		}
	}
	os.Setenv("XDG_CONFIG_HOME", dir)
	for _, v := range []string{envAddr, envAdmin, envCluster, envSecret, envProfile} {
		os.Unsetenv(v)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// syncBuffer is a bytes.Buffer safe for one writer and one reader at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// runCLIErr is runCLI with stderr returned too.
func runCLIErr(t *testing.T, stdin io.Reader, ctx context.Context, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	root := newRootCommand()
	var out, errOut bytes.Buffer
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(&out)
	root.SetErr(&errOut)
	code = exitCode(root.ExecuteContext(ctx))
	return out.String(), errOut.String(), code
}

// clusterUp runs `ringstream cluster up` in this process until the returned stop is called, which
// returns its exit status; it waits until the profile it writes names the cluster in dir.
func clusterUp(ctx context.Context, t *testing.T, bin, dir string) (out *syncBuffer, stop func() int) {
	t.Helper()
	out = &syncBuffer{}
	upCtx, cancel := context.WithCancel(ctx)
	root := newRootCommand()
	root.SetArgs([]string{"cluster", "up", "--binary", bin, "--dir", dir})
	root.SetOut(out)
	root.SetErr(out)
	done := make(chan int, 1)
	go func() { done <- exitCode(root.ExecuteContext(upCtx)) }()
	deadline := time.Now().Add(90 * time.Second)
	for !strings.Contains(out.String(), "Ctrl-C stops the cluster") {
		select {
		case code := <-done:
			cancel()
			t.Fatalf("cluster up exited %d: %s", code, out.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("cluster up not ready after 90 s: %s", out.String())
		}
	}
	var once sync.Once
	code := 0
	stop = func() int {
		once.Do(func() {
			cancel()
			code = <-done
		})
		return code
	}
	t.Cleanup(func() { stop() })
	return out, stop
}

// nodePIDs reads the node table `cluster up` prints: node id -> pid.
func nodePIDs(t *testing.T, out string) map[uint16]int {
	t.Helper()
	pids := map[uint16]int{}
	for _, m := range regexp.MustCompile(`(?m)^(\d+)\s+(\d+)\s+127\.0\.0\.1:`).FindAllStringSubmatch(out, -1) {
		id, _ := strconv.Atoi(m[1])
		pid, _ := strconv.Atoi(m[2])
		pids[uint16(id)] = pid
	}
	if len(pids) != 3 {
		t.Fatalf("node table of cluster up: %v from %q", pids, out)
	}
	return pids
}

// TestNewUserSession is README's session on real processes with nothing exported: `cluster up`
// writes the profile, and status, stream create, produce, consume --last 2, stream describe and
// cluster health read everything from it and print what README shows. Then a follower's node is
// SIGKILLed: cluster up reports the exit with its log, and cluster health and attention name the node
// and the under-replicated stream; after `cluster up --dir` starts the kept cluster again, both are
// clear and the records are still there. Along the way: a recovery action follows a backup's
// refusal to the primary's admin address, a produce interrupted reports what was confirmed, and a
// consume past the tail says so, and a consume --consumer commits a cursor that cursor list, reset,
// describe and delete show and act on, and stream describe lists.
func TestNewUserSession(t *testing.T) {
	bin := buildBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir := filepath.Join(t.TempDir(), "cluster")
	upOut, stop := clusterUp(ctx, t, bin, dir)
	cli := func(stdin string, args ...string) (string, int) { return runCLI(t, stdin, args...) }

	if out, code := cli("", "profile", "list"); code != 0 || out != "* local\n" {
		t.Fatalf("profile list: %d %q", code, out)
	}
	if out, code := cli("", "status"); code != 0 || !strings.HasPrefix(out, readmeStatus) {
		t.Fatalf("status: %d %q", code, out)
	}
	if out, code := cli("", "stream", "create", "demo"); code != 0 || out != readmeCreate {
		t.Fatalf("stream create: %d %q", code, out)
	}
	if out, code := cli("hello\nworld\nthird line\n", "produce", "demo"); code != 0 ||
		!sameButBatches(out, readmeProduce) {
		t.Fatalf("produce: %d %q", code, out)
	}
	if out, code := cli("", "consume", "demo", "--last", "2"); code != 0 || "$ ringstream consume demo --last 2\n"+out != readmeLast2 {
		t.Fatalf("consume --last 2: %d %q", code, out)
	}
	if _, errOut, code := runCLIErr(t, strings.NewReader(""), ctx, "consume", "demo", "--from", "100"); code != 0 ||
		!strings.Contains(errOut, `offset 100 is past the confirmed tail of "demo" (3)`) {
		t.Fatalf("consume --from 100: %d %q, want a word that it starts past the tail", code, errOut)
	}

	// A consume with --consumer commits its cursor: cursor list shows it, then a reset, a describe and a
	// delete act on it.
	if out, code := cli("", "consume", "demo", "--consumer", "reader"); code != 0 || out != "hello\nworld\nthird line\n" {
		t.Fatalf("consume --consumer reader: %d %q", code, out)
	}
	if out, code := cli("", "cursor", "list", "demo"); code != 0 || out != readmeCursorList {
		t.Fatalf("cursor list: %d %q", code, out)
	}
	if out, code := cli("", "cursor", "reset", "demo", "reader", "--shift-by", "-2"); code != 0 || out != readmeCursorReset {
		t.Fatalf("cursor reset: %d %q", code, out)
	}
	if out, code := cli("", "cursor", "describe", "demo", "reader"); code != 0 || out != readmeCursorDescribe {
		t.Fatalf("cursor describe: %d %q", code, out)
	}
	if out, code := cli("", "consume", "demo", "--consumer", "reader"); code != 0 || out != "world\nthird line\n" {
		t.Fatalf("consume --consumer reader after the reset: %d %q", code, out)
	}
	if out, code := cli("", "cursor", "reset", "demo", "audit", "--to-offset", "1"); code != 0 ||
		out != "reset consumer \"audit\" on stream \"demo\": cursor none -> 1, lag 2\n" {
		t.Fatalf("cursor reset of a new consumer: %d %q", code, out)
	}
	if out, code := cli("", "cursor", "delete", "demo", "audit"); code != 0 || out != readmeCursorDelete {
		t.Fatalf("cursor delete: %d %q", code, out)
	}
	if out, code := cli("", "cursor", "reset", "demo", "audit", "--to-offset", "99"); code != 0 ||
		out != "reset consumer \"audit\" on stream \"demo\": cursor none -> 3, lag 0\n" {
		t.Fatalf("cursor reset past the tail: %d %q, want it lowered to the tail", code, out)
	}
	if _, code := cli("", "cursor", "delete", "demo", "audit"); code != 0 {
		t.Fatalf("delete of the cursor a reset made: exit %d", code)
	}
	if _, code := cli("", "cursor", "delete", "demo", "audit"); code != exitNotFound {
		t.Fatalf("a second cursor delete: exit %d, want %d", code, exitNotFound)
	}
	if _, code := cli("", "cursor", "describe", "demo", "bad/name"); code != exitInvalid {
		t.Fatalf("cursor describe of a bad consumer name: exit %d, want %d", code, exitInvalid)
	}
	if _, code := cli("", "cursor", "reset", "demo", "reader"); code != exitUsage {
		t.Fatalf("cursor reset without a target: exit %d, want %d", code, exitUsage)
	}
	if out, code := cli("", "cursor", "list", "demo", "--json"); code != 0 || !strings.Contains(out, `"consumer": "reader"`) {
		t.Fatalf("cursor list --json: %d %q", code, out)
	}

	doc := describeUntil(ctx, t, func(d *describeDoc) bool { return copiesServingAt(d, 3) })
	if len(doc.Consumers) != 1 || doc.Consumers[0] != (cursorJSON{Consumer: "reader", Cursor: 3, Lag: 0}) || doc.ConsumersError != "" {
		t.Fatalf("describe's consumers: %+v %q", doc.Consumers, doc.ConsumersError)
	}
	if len(doc.Followers) != 2 || doc.Owner == 0 || doc.Epoch == 0 || doc.Retention == nil {
		t.Fatalf("describe: %+v", doc)
	}
	for _, c := range doc.Copies {
		if c.BytesRetained <= 0 || c.Head != 0 {
			t.Fatalf("describe: copy on node %d retains %d bytes from head %d; want the 3 records' bytes from 0", c.Node,
				c.BytesRetained, c.Head)
		}
	}
	out, code := cli("", "stream", "describe", "demo")
	if code != 0 || !strings.HasPrefix(out, fmt.Sprintf("stream \"demo\": id 1, incarnation 1, 3 copies, majority_durable, epoch %d, owner node %d, followers %v\nconfirmed tail 3\n", doc.Epoch, doc.Owner, doc.Followers)) {
		t.Fatalf("stream describe: %d %q", code, out)
	}
	if !strings.Contains(out, readmeDescribeConsumers) {
		t.Fatalf("stream describe without its consumers: %q", out)
	}
	if !strings.Contains(out, "retention (owner's node): size kept, age kept\n") {
		t.Fatalf("stream describe without the retention settings: %q", out)
	}
	h := healthUntil(ctx, t, func(h *healthDoc) bool { return h.Healthy })
	if len(h.Nodes) != 3 || h.Metadata.Primary == 0 {
		t.Fatalf("health: %+v", h)
	}
	if out, code := cli("", "cluster", "health"); code != 0 ||
		!strings.HasPrefix(out, readmeHealth) {
		t.Fatalf("cluster health: %d %q", code, out)
	}

	// A recovery action given a backup first follows its refusal to the primary (which has no pending
	// recovery: 3); given the backup alone it exits 8, naming the primary.
	admins := profileAdmins(t)
	primary := admins[h.Metadata.Primary-1]
	backup := admins[h.Metadata.Primary%3]
	otherBackup := admins[(h.Metadata.Primary+1)%3]
	_, errOut, code := runCLIErr(t, strings.NewReader(""), ctx, "recovery", "withdraw", "demo", "--admin",
		backup+","+otherBackup+","+primary)
	if code != exitNotFound || strings.Count(errOut, "asking ") != 1 || !strings.Contains(errOut, "asking "+primary+"\n") {
		t.Fatalf("withdraw via a backup: %d %q, want it to follow straight to %s and exit %d", code, errOut, primary, exitNotFound)
	}
	_, errOut, code = runCLIErr(t, strings.NewReader(""), ctx, "recovery", "withdraw", "demo", "--admin", backup)
	if code != exitNotPrimary || !strings.Contains(errOut, fmt.Sprintf("node %d is the metadata primary", h.Metadata.Primary)) {
		t.Fatalf("withdraw asked of a backup alone: %d %q", code, errOut)
	}

	// Records with keys and headers, printed by a template, as README shows.
	if out, code := cli("user-1:signed up\nuser-2:logged in\n", "produce", "demo", "--key-separator", ":", "--header",
		"src=web"); code != 0 || !sameButBatches(out, readmeProducedKeyed) {
		t.Fatalf("produce --key-separator: %d %q", code, out)
	}
	if out, code := cli("", "consume", "demo", "--last", "2", "--format", `%o %k=%v (%h)\n`); code != 0 ||
		readmeFormatCmd+out != readmeFormat {
		t.Fatalf("consume --last 2 --format: %d %q", code, out)
	}

	// A produce interrupted while it waits on stdin reports the records confirmed and exits 1.
	pr, pw := io.Pipe()
	prodCtx, interrupt := context.WithCancel(ctx)
	type result struct {
		errOut string
		code   int
	}
	res := make(chan result, 1)
	go func() {
		_, e, c := runCLIErr(t, pr, prodCtx, "produce", "demo")
		res <- result{e, c}
	}()
	if _, err := pw.Write([]byte("four\nfive\n")); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, "the produce's records to be confirmed", func() bool {
		out, _ := runCLI(t, "", "consume", "demo", "--from", "5")
		return out == "four\nfive\n"
	})
	interrupt()
	r := <-res
	if r.code != exitFailure || !strings.Contains(r.errOut, `produce to "demo" stopped early (interrupted): 2 records confirmed at offsets 5..6, the last confirmed offset 6`) {
		t.Fatalf("interrupted produce: %d %q", r.code, r.errOut)
	}

	// A follower's node dies.
	follower := doc.Followers[0]
	if err := syscall.Kill(nodePIDs(t, upOut.String())[follower], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	h = healthUntil(ctx, t, func(h *healthDoc) bool { return !h.Healthy })
	if len(h.UnderReplicated) != 1 || h.UnderReplicated[0].Name != "demo" || h.nodeState(follower) != "down" {
		t.Fatalf("health with node %d killed: %+v", follower, h)
	}
	out, code = cli("", "cluster", "health")
	if code != 0 || !strings.Contains(out, fmt.Sprintf("stream \"demo\" (id 1) under-replicated: owner %d, followers %v: node %d is down", doc.Owner, doc.Followers, follower)) ||
		!regexp.MustCompile(fmt.Sprintf(`(?m)^%d\s+down\s`, follower)).MatchString(out) {
		t.Fatalf("cluster health with node %d killed: %d %q", follower, code, out)
	}
	out, code = cli("", "attention")
	if code != 0 || !strings.Contains(out, fmt.Sprintf("node %d is down (client ", follower)) ||
		!strings.Contains(out, `stream "demo" (id 1) under-replicated`) || strings.Contains(out, "nothing needs attention") {
		t.Fatalf("attention with node %d killed: %d %q", follower, code, out)
	}
	waitFor(ctx, t, "cluster up to report the exit", func() bool {
		return strings.Contains(upOut.String(), fmt.Sprintf("node %d exited (signal: killed) while the cluster ran; the end of", follower))
	})

	// Ctrl-C: exit 1 (a node died while it ran); then the kept directory starts again, healthy.
	if code := stop(); code != exitFailure {
		t.Fatalf("cluster up after a node died: exit %d, want 1: %s", code, upOut.String())
	}
	_, stop = clusterUp(ctx, t, bin, dir)
	healthUntil(ctx, t, func(h *healthDoc) bool { return h.Healthy })
	attentionUntil(ctx, t, strings.TrimPrefix(readmeClear, "node 1 ")) // the primary may have moved
	if out, code := cli("", "consume", "demo", "--last", "2"); code != 0 || out != "four\nfive\n" {
		t.Fatalf("consume after the restart: %d %q", code, out)
	}
	if code := stop(); code != 0 {
		t.Fatalf("clean stop: exit %d", code)
	}
}

// profileAdmins is the current profile's admin list.
func profileAdmins(t *testing.T) []string {
	t.Helper()
	root, err := profileRoot()
	if err != nil {
		t.Fatal(err)
	}
	p, err := readProfile(root, defaultLocalProfile)
	if err != nil {
		t.Fatal(err)
	}
	return p.Admin
}

func copiesServingAt(d *describeDoc, tail uint64) bool {
	if d.ConfirmedTail != tail || len(d.Copies) != 3 {
		return false
	}
	for _, c := range d.Copies {
		if c.State != "serving" || c.Durable != tail || c.Lag != 0 {
			return false
		}
	}
	return true
}

// waitFor polls cond every 100 ms, for at most 60 s.
func waitFor(ctx context.Context, t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func describeUntil(ctx context.Context, t *testing.T, cond func(*describeDoc) bool) *describeDoc {
	t.Helper()
	var d describeDoc
	var last string
	waitFor(ctx, t, "stream describe", func() bool {
		out, code := runCLI(t, "", "stream", "describe", "demo", "--json")
		last = out
		d = describeDoc{}
		return code == 0 && json.Unmarshal([]byte(out), &d) == nil && cond(&d)
	})
	if t.Failed() {
		t.Log(last)
	}
	return &d
}

func healthUntil(ctx context.Context, t *testing.T, cond func(*healthDoc) bool) *healthDoc {
	t.Helper()
	var h *healthDoc
	var last string
	waitFor(ctx, t, "cluster health", func() bool {
		out, code := runCLI(t, "", "cluster", "health", "--json")
		last = out
		// The document's unexported views are not in the JSON: rebuild them by reading the nodes.
		var f adminFlags
		f.timeout = 5 * time.Second
		h = buildHealth(f.statuses(ctx, profileAdmins(t)))
		var doc struct {
			Healthy bool `json:"healthy"`
		}
		return code == 0 && json.Unmarshal([]byte(out), &doc) == nil && doc.Healthy == h.Healthy && cond(h)
	})
	if t.Failed() {
		t.Log(last)
	}
	return h
}

func attentionUntil(ctx context.Context, t *testing.T, want string) {
	t.Helper()
	var last string
	waitFor(ctx, t, "attention: "+want, func() bool {
		out, code := runCLI(t, "", "attention")
		last = out
		return code == 0 && strings.Contains(out, want)
	})
	if t.Failed() {
		t.Log(last)
	}
}

// TestAttention_NoQuorumSaysWhy: with two of three nodes SIGKILLed, the metadata group has no quorum;
// attention and cluster health say that no controller runs and why (the survivor's view change, the
// replicas it has no link to), and name the nodes down and the stream left short (issue 24: attention said only
// {"active":false,"entries":[]}).
func TestAttention_NoQuorumSaysWhy(t *testing.T) {
	bin := buildBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	lc, err := localcluster.Start(ctx, localcluster.Options{Binary: bin, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	if _, err := writeClusterProfile(lc, "quorum"); err != nil {
		t.Fatal(err)
	}
	if err := waitRegistered(ctx, lc); err != nil {
		t.Fatal(err)
	}
	if _, code := runCLI(t, "", "stream", "create", "demo"); code != 0 {
		t.Fatalf("stream create: exit %d", code)
	}
	waitFor(ctx, t, "node 3's metadata replica to hold the stream", func() bool {
		_, code := runCLI(t, "", "stream", "describe", "demo", "--admin", lc.Node(3).AdminAddr)
		return code == 0
	})
	for _, id := range []uint16{1, 2} {
		if err := lc.Kill(id); err != nil {
			t.Fatal(err)
		}
	}
	attentionUntil(ctx, t, "no link to nodes [1 2]") // the survivor's links go down after the kill
	out, code := runCLI(t, "", "attention")
	if code != 0 || !strings.Contains(out, "answering: node 3 (") || !strings.Contains(out, "no link to nodes [1 2]") ||
		!strings.Contains(out, "node 1 is down") || !strings.Contains(out, "node 2 is down") ||
		!strings.Contains(out, "no controller runs: no replica answers as the primary of a normal view") ||
		!strings.Contains(out, `stream "demo" (id 1) under-replicated`) {
		t.Fatalf("attention without a quorum: %d %q", code, out)
	}
	out, code = runCLI(t, "", "cluster", "health")
	if code != 0 || !strings.HasPrefix(out, "cluster: NOT healthy; 1 of 3 nodes up") || !strings.Contains(out, "metadata: NO PRIMARY: ") {
		t.Fatalf("cluster health without a quorum: %d %q", code, out)
	}
}

// batchCount is the "(N batch(es)" of produce's summary.
var batchCount = regexp.MustCompile(`\(\d+ batch\(es\)`)

// sameButBatches compares two produce summaries but for their batch counts: the first record goes
// out alone when nothing is in flight and the rest gather behind it, so how many batches a few lines
// of stdin take depends on when its confirm comes back.
func sameButBatches(got, want string) bool {
	return batchCount.ReplaceAllString(got, "(N batch(es)") == batchCount.ReplaceAllString(want, "(N batch(es)")
}
