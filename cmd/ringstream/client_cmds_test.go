package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringstream/ringstream/client"
	"github.com/ringstream/ringstream/engine/adminapi"
	"github.com/ringstream/ringstream/localcluster"
	"github.com/ringstream/ringstream/wire"
)

// runCLI runs `ringstream args...` in this process with stdin and returns stdout and the exit status.
func runCLI(t *testing.T, stdin string, args ...string) (string, int) {
	t.Helper()
	root := newRootCommand()
	var out, errOut bytes.Buffer
	root.SetArgs(args)
	root.SetIn(strings.NewReader(stdin))
	root.SetOut(&out)
	root.SetErr(&errOut)
	code := exitCode(root.Execute())
	if code != 0 {
		t.Logf("ringstream %s: exit %d: %s", strings.Join(args, " "), code, errOut.String())
	}
	return out.String(), code
}

// TestClientCommands_AgainstRealCluster: three `ringstream serve` processes; the Go client creates a
// stream, produces with confirm (zstd), fetches the records back and commits and reads a cursor; then the
// commands do the same by hand (stream create|list|lookup|delete, produce from stdin, consume to stdout
// with a consumer's cursor, status, attention) and their exit statuses are the documented ones.
func TestClientCommands_AgainstRealCluster(t *testing.T) {
	bin := buildBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	lc, err := localcluster.Start(ctx, localcluster.Options{Binary: bin, Dir: t.TempDir(), ClusterID: 7})
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()

	c, err := client.Dial(ctx, client.Config{Addrs: lc.ClientAddrs(), Cluster: 7, Secret: []byte(lc.Secret())})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.CreateStream(ctx, "orders", client.StreamOptions{Copies: 3}); err != nil {
		t.Fatal(err)
	}
	var confirmed []client.Confirmed
	p, err := c.Producer(client.ProducerConfig{Stream: "orders", Codec: client.CodecZstd, BatchBytes: 4096, InFlight: 4,
		OnConfirm: func(cf client.Confirmed) { confirmed = append(confirmed, cf) }})
	if err != nil {
		t.Fatal(err)
	}
	const n = 500
	for i := range n {
		if err := p.Append(ctx, fmt.Appendf(nil, "order-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if len(confirmed) < 2 || confirmed[len(confirmed)-1].BaseOffset+uint64(confirmed[len(confirmed)-1].Count) != n {
		t.Fatalf("confirms %+v, want batches covering 0..%d", confirmed, n)
	}
	cs, err := c.Consumer("orders", 0, client.FetchOptions{BytesMax: 2048})
	if err != nil {
		t.Fatal(err)
	}
	for want := uint64(0); want < n; {
		recs, err := cs.Poll(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for recs.Next() {
			if recs.Offset() != want || string(recs.Value()) != fmt.Sprintf("order-%d", want) {
				t.Fatalf("record %d %q, want %d", recs.Offset(), recs.Value(), want)
			}
			want++
		}
		if recs.Err() != nil {
			t.Fatal(recs.Err())
		}
	}
	if err := c.CommitCursor(ctx, "orders", "billing", 123); err != nil {
		t.Fatal(err)
	}
	if off, found, err := c.Cursor(ctx, "orders", "billing"); err != nil || !found || off != 123 {
		t.Fatalf("cursor %d %v %v, want 123", off, found, err)
	}
	if _, err := c.CreateStream(ctx, "orders", client.StreamOptions{}); !errors.Is(err, client.ErrStreamExists) {
		t.Fatalf("second create: %v, want ErrStreamExists", err)
	}

	addr := lc.Node(2).ClientAddr
	flags := []string{"--addr", addr, "--cluster", "7", "--secret", lc.Secret()}
	cli := func(stdin string, args ...string) (string, int) { return runCLI(t, stdin, append(args, flags...)...) }
	if out, code := cli("", "stream", "create", "demo", "--copies", "3"); code != 0 || !strings.Contains(out, `created stream "demo"`) {
		t.Fatalf("stream create: %d %q", code, out)
	}
	if _, code := cli("", "stream", "create", "demo"); code != exitExists {
		t.Fatalf("stream create of a taken name: exit %d, want %d", code, exitExists)
	}
	// Several names: one batched create, one line per name; the taken one does not stop the others
	// and gives the exit status.
	if out, code := cli("", "stream", "create", "m2", "demo", "m1"); code != exitExists ||
		!strings.Contains(out, `created stream "m1"`) || !strings.Contains(out, `created stream "m2"`) {
		t.Fatalf("stream create of three names, one taken: %d %q", code, out)
	}
	if out, code := cli("", "stream", "delete", "m1", "nope", "m2"); code != exitNotFound ||
		!strings.Contains(out, `deleted stream "m1"`) || !strings.Contains(out, `deleted stream "m2"`) {
		t.Fatalf("stream delete of three names, one unknown: %d %q", code, out)
	}
	if out, code := cli("", "stream", "create", "m3", "m4"); code != 0 || strings.Count(out, "created stream") != 2 {
		t.Fatalf("stream create of two names: %d %q", code, out)
	}
	if _, code := cli("", "stream", "create", "m5", "bad name"); code != exitInvalid {
		t.Fatalf("stream create with a name outside the rule: exit %d, want %d", code, exitInvalid)
	}
	if out, code := cli("", "stream", "delete", "m4", "m3"); code != 0 || strings.Count(out, "deleted stream") != 2 {
		t.Fatalf("stream delete of two names: %d %q", code, out)
	}
	out, code := cli("hello\nworld\n\nlast", "produce", "demo")
	if code != 0 || !sameButBatches(out, "produced 4 records to \"demo\" at offsets 0..3 (1 batch(es), all confirmed)\n") {
		t.Fatalf("produce: %d %q", code, out)
	}
	if out, code := cli("", "consume", "demo"); code != 0 || out != "hello\nworld\n\nlast\n" {
		t.Fatalf("consume: %d %q", code, out)
	}
	if out, code := cli("", "consume", "demo", "--consumer", "c1", "--count", "2"); code != 0 || out != "hello\nworld\n" {
		t.Fatalf("consume --consumer: %d %q", code, out)
	}
	if out, code := cli("", "consume", "demo", "--consumer", "c1", "--json"); code != 0 ||
		!regexp.MustCompile(`^\{"offset":2,"timestamp":\d+,"value":""\}\n\{"offset":3,"timestamp":\d+,"value":"last"\}\n$`).MatchString(out) {
		t.Fatalf("consume from the cursor: %d %q", code, out)
	}
	// consume --follow prints records as they are confirmed, and an interrupt ends it with status 0.
	followCtx, stopFollow := context.WithCancel(ctx)
	pr, pw := io.Pipe()
	root := newRootCommand()
	root.SetArgs(append([]string{"consume", "demo", "--from", "4", "--follow", "--wait", "200ms"}, flags...))
	root.SetOut(pw)
	root.SetErr(io.Discard)
	followed := make(chan int, 1)
	go func() {
		followed <- exitCode(root.ExecuteContext(followCtx))
		_ = pw.Close()
	}()
	if _, code := cli("late\n", "produce", "demo"); code != 0 {
		t.Fatalf("produce while following: exit %d", code)
	}
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil || line != "late\n" {
		t.Fatalf("consume --follow printed %q (%v), want the record produced while it waited", line, err)
	}
	stopFollow()
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	if code := <-followed; code != 0 {
		t.Fatalf("consume --follow interrupted: exit %d, want 0", code)
	}

	checkRecordCommands(t, ctx, c, cli, flags)

	out, code = cli("", "stream", "list", "--json")
	var list []streamJSON
	if code != 0 || json.Unmarshal([]byte(out), &list) != nil || len(list) != 2 || list[1].Name != "demo" {
		t.Fatalf("stream list: %d %q", code, out)
	}
	if _, code := cli("", "consume", "nosuch"); code != exitNotFound {
		t.Fatalf("consume of an unknown stream: exit %d, want %d", code, exitNotFound)
	}
	if _, code := runCLI(t, "", "stream", "list", "--addr", addr, "--cluster", "7", "--secret", "not-the-secret-0123"); code != exitAuth {
		t.Fatalf("wrong secret: exit %d, want %d", code, exitAuth)
	}
	if _, code := cli("", "stream", "create", "x", "--policy", "most"); code != exitUsage {
		t.Fatalf("bad policy: exit %d, want %d", code, exitUsage)
	}

	admin := lc.Node(1).AdminAddr
	out, code = runCLI(t, "", "status", "--admin", admin, "--json")
	var st adminapi.Status
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil || st.Node != 1 {
		t.Fatalf("status --json: %d %q", code, out)
	}
	if out, code := runCLI(t, "", "status", "--admin", admin); code != 0 || !strings.Contains(out, "demo") {
		t.Fatalf("status: %d %q", code, out)
	}
	if _, code := runCLI(t, "", "attention", "--admin", admin); code != 0 {
		t.Fatalf("attention: exit %d", code)
	}
	if _, code := runCLI(t, "", "recovery", "withdraw", "demo", "--admin", admin); code != exitNotFound {
		t.Fatalf("withdraw without a pending recovery: exit %d, want %d", code, exitNotFound)
	}
	if _, code := runCLI(t, "", "recovery", "accept-loss", "demo", "--admin", admin); code != exitUsage {
		t.Fatalf("accept-loss without --yes: exit %d, want %d", code, exitUsage)
	}
	// Issue 21 finding 3: an invalid request exited 6 ("wrong secret or cluster id") because the node's
	// message mentioned the cluster; a recovery action asked of a backup exited 5.
	if _, code := cli("", "stream", "create", "x2", "--copies", "5"); code != exitInvalid {
		t.Fatalf("stream create x2 --copies 5 on 3 nodes: exit %d, want %d", code, exitInvalid)
	}
	if st.Meta == nil || st.Meta.PrimaryID == 0 {
		t.Fatalf("status names no metadata primary: %+v", st.Meta)
	}
	backup := lc.Node(uint16(st.Meta.PrimaryID%3 + 1)).AdminAddr
	for _, name := range []string{"nosuch", "demo"} {
		if _, code := runCLI(t, "", "recovery", "withdraw", name, "--admin", backup); code != exitNotPrimary {
			t.Fatalf("withdraw %s asked of a backup: exit %d, want %d", name, code, exitNotPrimary)
		}
	}
	if out, code := cli("", "stream", "delete", "demo"); code != 0 || out != "deleted stream \"demo\"\n" {
		t.Fatalf("stream delete: %d %q", code, out)
	}
	if _, code := cli("", "stream", "delete", "demo"); code != exitNotFound {
		t.Fatalf("delete of a deleted stream: exit %d, want %d", code, exitNotFound)
	}
}

// TestClient_FollowsOwnerAcrossSIGKILL: a producer keeps producing while the stream's owner process is
// SIGKILLed; it finds the new owner by itself, and every confirmed record is read back exactly once, at
// the offset its confirm named.
func TestClient_FollowsOwnerAcrossSIGKILL(t *testing.T) {
	bin := buildBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	lc, err := localcluster.Start(ctx, localcluster.Options{Binary: bin, Dir: t.TempDir(), ClusterID: 7})
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	c, err := client.Dial(ctx, client.Config{Addrs: lc.ClientAddrs(), Cluster: 7, Secret: []byte(lc.Secret()),
		Retries: 30})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.CreateStream(ctx, "orders", client.StreamOptions{Copies: 3}); err != nil {
		t.Fatal(err)
	}
	want := map[uint64]string{} // offset -> record, from the confirms
	var pending []string
	var mu sync.Mutex // pending is appended to by produce and taken from by OnConfirm
	p, err := c.Producer(client.ProducerConfig{Stream: "orders", BatchBytes: 512, Linger: -1, InFlight: 4,
		OnConfirm: func(cf client.Confirmed) {
			mu.Lock()
			defer mu.Unlock()
			for i := range cf.Count {
				want[cf.BaseOffset+uint64(i)] = pending[i]
			}
			pending = pending[cf.Count:]
		}})
	if err != nil {
		t.Fatal(err)
	}
	produce := func(from, to int) {
		for i := from; i < to; i++ {
			rec := fmt.Sprintf("r%04d", i)
			mu.Lock()
			pending = append(pending, rec) // appended in order, confirmed in order
			mu.Unlock()
			if err := p.Append(ctx, []byte(rec)); err != nil {
				t.Fatal(err)
			}
		}
	}
	produce(0, 100)
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	before, err := c.Lookup(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	solo := soloStreamOn(ctx, t, c, before.Owner) // one copy, on the node about to die
	produce(100, 150)                             // batches in flight (up to 4) meet the kill
	if err := lc.Kill(before.Owner); err != nil {
		t.Fatal(err)
	}
	produce(150, 300) // resent and produced to the new owner

	// The one-copy stream has no other copy to promote: the metadata keeps its dead owner, and the
	// client says, after its retries, that the owner cannot be reached, naming the stream and the node;
	// the command exits "unavailable".
	r, err := c.Lookup(ctx, solo)
	if err != nil || r.Owner != before.Owner {
		t.Fatalf("lookup of %s: %+v %v, want its dead owner %d", solo, r, err, before.Owner)
	}
	short, err := client.Dial(ctx, client.Config{Addrs: lc.ClientAddrs(), Cluster: 7, Secret: []byte(lc.Secret()),
		Retries: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer short.Close()
	err = short.CommitCursor(ctx, solo, "c", 1)
	if !errors.Is(err, client.ErrOwnerUnreachable) || !strings.Contains(err.Error(), solo) ||
		!strings.Contains(err.Error(), fmt.Sprintf("node %d", before.Owner)) {
		t.Fatalf("cursor commit on %s after its only copy died: %v, want ErrOwnerUnreachable naming it", solo, err)
	}
	var alive string
	for _, nd := range lc.Nodes() {
		if nd.ID != before.Owner {
			alive = nd.ClientAddr
		}
	}
	if _, code := runCLI(t, "x\n", "produce", solo, "--addr", alive, "--cluster", "7", "--secret", lc.Secret()); code != exitUnavailable {
		t.Fatalf("produce to a stream without an owner: exit %d, want %d", code, exitUnavailable)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	after, err := c.Lookup(ctx, "orders")
	if err != nil || after.Owner == before.Owner || after.Epoch <= before.Epoch {
		t.Fatalf("after the kill: %+v %v (before %+v)", after, err, before)
	}
	got := map[uint64]string{}
	cs, err := c.Consumer("orders", 0, client.FetchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for {
		recs, err := cs.Poll(ctx)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for recs.Next() {
			if _, dup := got[recs.Offset()]; dup {
				t.Fatalf("offset %d read twice", recs.Offset())
			}
			got[recs.Offset()] = string(recs.Value())
			n++
		}
		if n == 0 {
			break
		}
	}
	if len(want) != 300 {
		t.Fatalf("%d records confirmed, want 300", len(want))
	}
	seen := map[string]uint64{}
	for off, rec := range got {
		if prev, ok := seen[rec]; ok {
			t.Fatalf("record %s at offsets %d and %d", rec, prev, off)
		}
		seen[rec] = off
	}
	for off, rec := range want {
		if got[off] != rec {
			t.Fatalf("offset %d holds %q, its confirm said %q", off, got[off], rec)
		}
	}
}

// soloStreamOn creates one-copy streams until one is placed on node, and returns its name.
func soloStreamOn(ctx context.Context, t *testing.T, c *client.Client, node uint16) string {
	t.Helper()
	for i := range 20 {
		name := fmt.Sprintf("solo-%d", i)
		if _, err := c.CreateStream(ctx, name, client.StreamOptions{Copies: 1, Policy: client.Policy{Kind: wire.PolicyAll}}); err != nil {
			t.Fatal(err)
		}
		r, err := c.Lookup(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if r.Owner == node {
			return name
		}
	}
	t.Fatalf("no one-copy stream of 20 was placed on node %d", node)
	return ""
}

// checkRecordCommands runs the record options of produce and consume against stream "demo", which
// holds 5 records (offsets 0..4, the last "late"): produce --key-separator and --header, consume
// --format, --json with keys and headers, --from-time, --record-format values, and their refusals.
func checkRecordCommands(t *testing.T, ctx context.Context, c *client.Client, cli func(string, ...string) (string, int),
	flags []string) {
	t.Helper()
	time.Sleep(5 * time.Millisecond)
	mark := time.Now()
	time.Sleep(5 * time.Millisecond)
	out, code := cli("user-1:signed up\nuser-2:a:b\n", "produce", "demo", "--key-separator", ":", "--header", "src=web",
		"--header", "v=2=3")
	if code != 0 || !sameButBatches(out, "produced 2 records to \"demo\" at offsets 5..6 (1 batch(es), all confirmed)\n") {
		t.Fatalf("produce --key-separator --header: %d %q", code, out)
	}
	end := time.Now()
	if out, code := cli("", "consume", "demo", "--from", "4", "--format", `%o|%k|%K|%v|%s|%S|%h|%%\t.\n`); code != 0 ||
		out != "4||-1|late|late|4||%\t.\n5|user-1|6|signed up|signed up|9|src=web,v=2=3|%\t.\n6|user-2|6|a:b|a:b|3|src=web,v=2=3|%\t.\n" {
		t.Fatalf("consume --format: %d %q", code, out)
	}
	out, code = cli("", "consume", "demo", "--from", "5", "--format", `%T\n`)
	for _, line := range strings.Fields(out) {
		ms, err := strconv.ParseInt(line, 10, 64)
		if code != 0 || err != nil || ms < mark.UnixMilli() || ms > end.UnixMilli() {
			t.Fatalf("consume --format %%T: %d %q, want times between %d and %d", code, out, mark.UnixMilli(), end.UnixMilli())
		}
	}
	out, code = cli("", "consume", "demo", "--from", "5", "--count", "1", "--json")
	var doc recordJSON
	if code != 0 || json.Unmarshal([]byte(out), &doc) != nil || doc.Key == nil || *doc.Key != "user-1" ||
		doc.Value == nil || *doc.Value != "signed up" || len(doc.Headers) != 2 || *doc.Headers[1].Key != "v" ||
		*doc.Headers[1].Value != "2=3" || doc.Timestamp < mark.UnixMilli() {
		t.Fatalf("consume --json of a keyed record: %d %q", code, out)
	}
	for _, from := range []string{strconv.FormatInt(mark.UnixMilli(), 10), mark.Format(time.RFC3339Nano)} {
		if out, code := cli("", "consume", "demo", "--from-time", from, "--format", `%o %k\n`); code != 0 ||
			out != "5 user-1\n6 user-2\n" {
			t.Fatalf("consume --from-time %s: %d %q", from, code, out)
		}
	}
	if out, code := cli("", "consume", "demo", "--from-time", "2100-01-01T00:00:00Z"); code != 0 || out != "" {
		t.Fatalf("consume --from-time in the future: %d %q, want nothing", code, out)
	}
	if out, code := cli("plain\n", "produce", "demo", "--record-format", "values"); code != 0 || !strings.Contains(out, "offsets 7..7") {
		t.Fatalf("produce --record-format values: %d %q", code, out)
	}
	if out, code := cli("", "consume", "demo", "--from", "7", "--format", `%K %v %T\n`); code != 0 ||
		!regexp.MustCompile(`^-1 plain \d{13}\n$`).MatchString(out) {
		t.Fatalf("consume of a format 1 record: %d %q", code, out)
	}
	// Null values (the value, a header's) from the Go client: %S is -1, %h prints a null header's key alone.
	p, err := c.Producer(client.ProducerConfig{Stream: "demo"})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendRecord(ctx, client.Record{Key: []byte("k"), Headers: []client.Header{{Key: []byte("a")},
		{Key: []byte("b"), Value: []byte{}}}}); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if out, code := cli("", "consume", "demo", "--from", "8", "--format", `%h|%K|%S|%v\n`); code != 0 || out != "a,b=|1|-1|\n" {
		t.Fatalf("consume --format of null values: %d %q", code, out)
	}
	for _, c := range []struct {
		stdin string
		args  []string
		code  int
		say   string
	}{
		{"", []string{"consume", "demo", "--format", "%x"}, exitUsage, "--format \"%x\": unknown token %x"},
		{"", []string{"consume", "demo", "--format", `a\q`}, exitUsage, "unknown escape"},
		{"", []string{"consume", "demo", "--format", "%"}, exitUsage, "--format"},
		{"", []string{"consume", "demo", "--format", "%v", "--json"}, exitUsage, "--format and --json"},
		{"", []string{"consume", "demo", "--from-time", "yesterday"}, exitUsage, "--from-time \"yesterday\""},
		{"", []string{"consume", "demo", "--from-time", "5", "--from", "1"}, exitUsage, "--from-time"},
		{"", []string{"produce", "demo", "--header", "novalue"}, exitUsage, "--header \"novalue\": want KEY=VALUE"},
		{"", []string{"produce", "demo", "--header", "=v"}, exitUsage, "--header \"=v\": an empty key"},
		{"", []string{"produce", "demo", "--key-separator", ""}, exitUsage, "--key-separator"},
		{"", []string{"produce", "demo", "--record-format", "values", "--header", "a=b"}, exitUsage, "--record-format values"},
		{"", []string{"produce", "demo", "--record-format", "json"}, exitUsage, "--record-format \"json\""},
		{"a:b\nno separator\n", []string{"produce", "demo", "--key-separator", ":"}, exitFailure,
			`line 2 has no key separator ":" (--key-separator)`},
	} {
		_, errOut, code := runCLIErr(t, strings.NewReader(c.stdin), ctx, append(c.args, flags...)...)
		if code != c.code || !strings.Contains(errOut, c.say) {
			t.Errorf("ringstream %s: exit %d %q, want %d saying %q", strings.Join(c.args, " "), code, errOut, c.code, c.say)
		}
	}
}
