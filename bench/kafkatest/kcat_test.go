package kafkatest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ringstream/ringstream/client"
	"github.com/ringstream/ringstream/engine/kafka"
	"github.com/ringstream/ringstream/localcluster"
)

// requireKcat is kcat's path, or skips the test naming why (a failure with RINGSTREAM_REQUIRE_KCAT=1
// or CI=true).
func requireKcat(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("kcat")
	if err == nil {
		return path
	}
	if os.Getenv("CI") == "true" || os.Getenv("RINGSTREAM_REQUIRE_KCAT") == "1" {
		t.Fatal("kcat is not on PATH (CI=true or RINGSTREAM_REQUIRE_KCAT=1: this test must run)")
	}
	t.Skip("kcat is not on PATH (apt-get install kcat); set RINGSTREAM_REQUIRE_KCAT=1 to make this a failure")
	return ""
}

func startCluster(t *testing.T, ctx context.Context) *localcluster.Cluster {
	t.Helper()
	lc, err := localcluster.Start(ctx, localcluster.Options{Binary: ringstreamBin, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range lc.Nodes() {
				t.Logf("node %d log:\n%s", n.ID, n.LogTail())
			}
		}
		lc.Close()
	})
	return lc
}

// saslArgs are kcat's options to authenticate to lc: SASL PLAIN with the Kafka password.
func saslArgs(lc *localcluster.Cluster) []string {
	return []string{"-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanisms=PLAIN", "-X",
		"sasl.username=ringstream", "-X", "sasl.password=" + password(lc)}
}

// password is lc's Kafka password (SASL PLAIN), derived from its secret.
func password(lc *localcluster.Cluster) string { return kafka.Password([]byte(lc.Secret())) }

// kcat runs kcat with args (stdin from in, when set) and returns its standard output.
func kcat(t *testing.T, ctx context.Context, path string, in []byte, args ...string) []byte {
	t.Helper()
	cmd := exec.CommandContext(ctx, path, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if in != nil {
		cmd.Stdin = bytes.NewReader(in)
	}
	if err := cmd.Run(); err != nil {
		t.Fatalf("kcat %s: %v\n%s", strings.Join(args, " "), err, errOut.String())
	}
	return out.Bytes()
}

// TestKcat_ListProduceConsume: kcat -P writes 10,000 keyed records with headers to a topic it
// auto-creates, kcat -C -e reads them all back in order with their keys, headers and offsets 0..9999,
// and kcat -L lists the three brokers at their Kafka addresses and the topic's partition with its
// leader (the stream's owner, as the Go client looks it up) and its three replicas.
func TestKcat_ListProduceConsume(t *testing.T) {
	path := requireKcat(t)
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	lc := startCluster(t, ctx)
	broker := lc.Nodes()[0].KafkaAddr
	const n = 10000
	var in bytes.Buffer
	for i := range n {
		fmt.Fprintf(&in, "key-%d\tvalue-%d\n", i, i)
	}
	auth := saslArgs(lc)
	kcat(t, ctx, path, in.Bytes(), append(auth, "-P", "-b", broker, "-t", "orders", "-K", "\t", "-H", "app=kcat",
		"-H", "run=1")...)
	out := kcat(t, ctx, path, nil, append(auth, "-C", "-b", broker, "-t", "orders", "-e", "-q", "-f",
		"%k\t%s\t%h\t%o\n")...)
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(lines) != n {
		t.Fatalf("read %d records back, want %d", len(lines), n)
	}
	for i, line := range lines {
		if want := fmt.Sprintf("key-%d\tvalue-%d\tapp=kcat,run=1\t%d", i, i, i); line != want {
			t.Fatalf("record %d: %q, want %q", i, line, want)
		}
	}

	list := string(kcat(t, ctx, path, nil, append(auth, "-L", "-b", broker, "-t", "orders")...))
	for _, node := range lc.Nodes() {
		if want := fmt.Sprintf("broker %d at %s", node.ID, node.KafkaAddr); !strings.Contains(list, want) {
			t.Fatalf("kcat -L does not list %q:\n%s", want, list)
		}
	}
	m := regexp.MustCompile(`partition 0, leader (\d+), replicas: (\d+),(\d+),(\d+), isrs:`).FindStringSubmatch(list)
	if m == nil {
		t.Fatalf("kcat -L lists no partition 0 with three replicas:\n%s", list)
	}
	c, err := client.Dial(ctx, client.Config{Addrs: lc.ClientAddrs(), Cluster: 1, Secret: []byte(lc.Secret())})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	route, err := c.Lookup(ctx, "orders.0")
	if err != nil {
		t.Fatal(err)
	}
	if m[1] != strconv.Itoa(int(route.Owner)) || m[2] != m[1] || m[2] == m[3] || m[3] == m[4] || m[2] == m[4] {
		t.Fatalf("kcat -L: leader %s, replicas %s,%s,%s; the stream's owner is %d", m[1], m[2], m[3], m[4], route.Owner)
	}
	t.Logf("kcat -L:\n%s", list)

	// A follower's node goes down: the assignment keeps it (a follower's loss needs no recovery), so
	// kcat -L still lists it among the replicas, but not among the in-sync replicas, which are the
	// replicas the broker's links reach.
	follower, _ := strconv.Atoi(m[4])
	if err := lc.Kill(uint16(follower)); err != nil {
		t.Fatal(err)
	}
	live := broker
	for _, n := range lc.Nodes() {
		if n.ID != uint16(follower) {
			live = n.KafkaAddr
			break
		}
	}
	isrRE := regexp.MustCompile(`partition 0, leader (\d+), replicas: ([\d,]+), isrs: ([\d,]+)`)
	deadline := time.Now().Add(20 * time.Second)
	for {
		list = string(kcat(t, ctx, path, nil, append(auth, "-L", "-b", live, "-t", "orders")...))
		m2 := isrRE.FindStringSubmatch(list)
		if m2 != nil && m2[2] == m[2]+","+m[3]+","+m[4] && m2[3] == m[2]+","+m[3] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("kcat -L with node %d down: want replicas %s,%s,%s and isrs %s,%s:\n%s", follower, m[2], m[3], m[4],
				m[2], m[3], list)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
