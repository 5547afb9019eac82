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
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "seed=3 ") || !strings.HasPrefix(lines[1], "seed=4 ") {
		t.Fatalf("output %q, want one ok line for seeds 3 and 4 and a summary", out.String())
	}
	for _, l := range lines[:2] {
		if !strings.HasSuffix(l, ": ok") {
			t.Fatalf("line %q does not end in ok", l)
		}
	}
	if lines[2] != "seeds 3..4: 0 failed" {
		t.Fatalf("summary %q", lines[2])
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

func TestSimCommand_KeepGoingRunsEverySeed(t *testing.T) {
	cmd := newSimCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--keep-going", "--seed", "5", "--seeds", "1"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(strings.TrimSpace(out.String()), "seeds 5..5: 0 failed") {
		t.Fatalf("output %q, want the summary line last", out.String())
	}
}
