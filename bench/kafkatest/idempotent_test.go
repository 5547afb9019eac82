package kafkatest

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestKcat_Idempotent: librdkafka's idempotent producer (kcat -X enable.idempotence=true) gets a
// producer id from InitProducerId (without it librdkafka refuses to produce) and writes 5,000
// records, which kcat -C reads back exactly once, in order, at offsets 0..4999.
func TestKcat_Idempotent(t *testing.T) {
	path := requireKcat(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	lc := startCluster(t, ctx)
	broker := lc.Nodes()[0].KafkaAddr
	const n = 5000
	var in bytes.Buffer
	for i := range n {
		fmt.Fprintf(&in, "value-%d\n", i)
	}
	auth := saslArgs(lc)
	cmd := exec.CommandContext(ctx, path, append(auth, "-P", "-b", broker, "-t", "idem", "-X", "enable.idempotence=true",
		"-X", "debug=eos")...)
	var errOut bytes.Buffer
	cmd.Stdin, cmd.Stderr = &in, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("kcat -P: %v\n%s", err, errOut.String())
	}
	if m := regexp.MustCompile(`Acquired PID\{Id:(\d+),Epoch:0\}`).FindStringSubmatch(errOut.String()); m == nil || m[1] == "-1" {
		t.Fatalf("kcat did not acquire a producer id:\n%s", errOut.String())
	} else {
		t.Logf("kcat's producer id: %s", m[1])
	}
	out := kcat(t, ctx, path, nil, append(auth, "-C", "-b", broker, "-t", "idem", "-e", "-q", "-f", "%s\t%o\n")...)
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(lines) != n {
		t.Fatalf("read %d records back, want %d", len(lines), n)
	}
	for i, line := range lines {
		if want := fmt.Sprintf("value-%d\t%d", i, i); line != want {
			t.Fatalf("record %d: %q, want %q", i, line, want)
		}
	}
}
