package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestSimCommand_RunsSeedsAndReportsEach(t *testing.T) {
	cmd := newSimCommand()
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

func TestSimCommand_RefusesZeroSeeds(t *testing.T) {
	cmd := newSimCommand()
	cmd.SetOut(&bytes.Buffer{})
	cmd.SetErr(&bytes.Buffer{})
	cmd.SetArgs([]string{"--seeds", "0"})
	if err := cmd.Execute(); err == nil {
		t.Fatal("--seeds 0 accepted")
	}
}
