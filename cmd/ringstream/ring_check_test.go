package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func runRoot(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := newRootCommand()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	err := root.Execute()
	return out.String() + errOut.String(), err
}

func TestRingCheckPassesOnBothBackends(t *testing.T) {
	for _, backend := range []string{"fallback", "auto"} {
		out, err := runRoot(t, "ring", "check", "--backend", backend, "--dir", t.TempDir())
		if err != nil {
			t.Fatalf("--backend %s: %v\n%s", backend, err, out)
		}
		for _, want := range []string{"kernel:", "backend:", "setup accepted:", "ops supported:",
			"write + fdatasync + read-back:   ok", "mkdir + rename + stat + unlink:  ok",
			"msg_ring between two rings:      ok", "self-test: ok"} {
			if !strings.Contains(out, want) {
				t.Fatalf("--backend %s: output lacks %q:\n%s", backend, want, out)
			}
		}
	}
	out, _ := runRoot(t, "ring", "check", "--backend", "fallback", "--dir", t.TempDir())
	if !strings.Contains(out, "backend:        fallback") || !strings.Contains(out, "ops missing:    send_zc") {
		t.Fatalf("fallback report:\n%s", out)
	}
}

func TestRingCheckFailsWhenSelfTestFails(t *testing.T) {
	out, err := runRoot(t, "ring", "check", "--dir", "/nonexistent/ringstream-check")
	if !errors.Is(err, errSelfTest) {
		t.Fatalf("self-test in a missing dir: %v, want errSelfTest\n%s", err, out)
	}
	if !strings.Contains(out, "self-test: FAILED") {
		t.Fatalf("output does not say the self-test failed:\n%s", out)
	}
}

func TestRingCheckRejectsBadFlags(t *testing.T) {
	out, err := runRoot(t, "ring", "check", "--backend", "epoll")
	if err == nil || !strings.Contains(err.Error(), `invalid --backend "epoll"`) {
		t.Fatalf("bad backend: %v\n%s", err, out)
	}
	if out, err := runRoot(t, "ring", "check", "--task-run", "eager"); err == nil || !strings.Contains(err.Error(), `invalid --task-run "eager"`) {
		t.Fatalf("bad task run mode: %v\n%s", err, out)
	}
	if _, err := runRoot(t, "ring", "check", "--no-such-flag"); err == nil {
		t.Fatalf("unknown flag accepted")
	}
	if _, err := runRoot(t, "--log-level", "loud", "ring", "check"); err == nil || !strings.Contains(err.Error(), "invalid --log-level") {
		t.Fatalf("bad log level: %v", err)
	}
}
