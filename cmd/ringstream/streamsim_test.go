package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestStreamSimCommand_RunsSeedsAndReportsEach(t *testing.T) {
	cmd := newStreamSimCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--seed", "3", "--seeds", "2"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "seed=3 ") || !strings.HasPrefix(lines[1], "seed=4 ") {
		t.Fatalf("output %q, want one ok line for seeds 3 and 4", out.String())
	}
	for _, l := range lines {
		if !strings.HasSuffix(l, ": ok") {
			t.Fatalf("line %q does not end in ok", l)
		}
	}
}

func TestStreamSimCommand_BrokenVariantFailsWithReplay(t *testing.T) {
	cmd := newStreamSimCommand()
	cmd.SetOut(&bytes.Buffer{})
	cmd.SetErr(&bytes.Buffer{})
	cmd.SetArgs([]string{"--seed", "1", "--seeds", "5", "--variant", "ack before fsync"})
	err := cmd.Execute()
	if err == nil || !strings.Contains(err.Error(), "replay: ringstream streamsim --seed 1") {
		t.Fatalf("want a violation with its replay line, got %v", err)
	}
}

func TestStreamSimCommand_RefusesBadFlags(t *testing.T) {
	for _, args := range [][]string{{"--seeds", "0"}, {"--variant", "no such"}} {
		cmd := newStreamSimCommand()
		cmd.SetOut(&bytes.Buffer{})
		cmd.SetErr(&bytes.Buffer{})
		cmd.SetArgs(args)
		if err := cmd.Execute(); err == nil {
			t.Fatalf("%v accepted", args)
		}
	}
}
