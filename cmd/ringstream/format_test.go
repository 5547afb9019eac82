package main

import (
	"bytes"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ringstream/ringstream/engine"
)

func runFormat(args ...string) (string, error) {
	cmd := newFormatCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&bytes.Buffer{})
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

func TestFormatCommand_FormatsOnceAndNeedsAMode(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "meta")
	base := []string{"--dir", dir, "--cluster", "42", "--node", "3", "--replica", "2"}
	if _, err := runFormat(base...); err == nil || !strings.Contains(err.Error(), "--new-cluster") {
		t.Fatalf("no mode: %v, want an error naming the two modes", err)
	}
	if _, err := runFormat(append(base, "--new-cluster", "--recover")...); err == nil {
		t.Fatal("both modes accepted")
	}
	out, err := runFormat(append(base, "--recover")...)
	if err != nil || !strings.Contains(out, "recovery") {
		t.Fatalf("format --recover: %q %v", out, err)
	}
	if _, err := runFormat(append(base, "--new-cluster")...); !errors.Is(err, engine.ErrMetaFormatted) {
		t.Fatalf("format again: %v, want ErrMetaFormatted", err)
	}
	if _, err := runFormat("--dir", dir+"2", "--cluster", "42", "--node", "0", "--replica", "1", "--new-cluster"); err == nil {
		t.Fatal("node 0 accepted")
	}
}
