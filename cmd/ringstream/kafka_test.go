package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestClusterUp_KcatLinesWorkAsPrinted runs the kcat lines `cluster up` prints, as printed, in a
// shell: the produce of two keyed records, the consume that prints them with their offsets, and the
// listing of the three brokers and the topic.
func TestClusterUp_KcatLinesWorkAsPrinted(t *testing.T) {
	if _, err := exec.LookPath("kcat"); err != nil {
		if os.Getenv("CI") == "true" || os.Getenv("RINGSTREAM_REQUIRE_KCAT") == "1" {
			t.Fatal("kcat is not on PATH (CI=true or RINGSTREAM_REQUIRE_KCAT=1: this test must run)")
		}
		t.Skip("kcat is not on PATH (apt-get install kcat); set RINGSTREAM_REQUIRE_KCAT=1 to make this a failure")
	}
	bin := buildBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	upOut, _ := clusterUp(ctx, t, bin, filepath.Join(t.TempDir(), "cluster"))
	lines := regexp.MustCompile(`(?m)^  ((?:printf .*\| )?kcat .*)$`).FindAllStringSubmatch(upOut.String(), -1)
	if len(lines) != 3 {
		t.Fatalf("cluster up printed %d kcat lines, want 3:\n%s", len(lines), upOut.String())
	}
	var outs []string
	for _, l := range lines {
		out, err := exec.CommandContext(ctx, "bash", "-c", l[1]).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", l[1], err, out)
		}
		outs = append(outs, string(out))
	}
	if !strings.Contains(outs[1], "k1: hello (offset 0)\nk2: world (offset 1)\n") {
		t.Fatalf("consume printed %q", outs[1])
	}
	if !strings.Contains(outs[2], " 3 brokers:") || !strings.Contains(outs[2], `topic "events" with 1 partitions:`) {
		t.Fatalf("kcat -L printed %q", outs[2])
	}
}
