package ringtest

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/ringstream/ringstream/ring"
)

// helperEnv marks the child process in which TestHelperRefusedProbe really runs.
const helperEnv = "RINGTEST_HELPER_REFUSED_PROBE"

// refusedReason is what the refusing probe says; the child's output must carry it.
const refusedReason = "io_uring_setup: operation not permitted (refused by the test probe)"

// TestHelperRefusedProbe is not a test on its own: TestRefusedIOUring runs it in a child process, where
// a skip or a failure of its subtests is the outcome under test rather than this package's.
func TestHelperRefusedProbe(t *testing.T) {
	if os.Getenv(helperEnv) != "1" {
		t.Skip("runs only as the child of TestRefusedIOUring")
	}
	refuse := func() (bool, string) { return false, refusedReason }
	forEachBackend(t, refuse, os.Getenv(RequireEnv), func(t *testing.T, b ring.Backend) {
		r := New(t, b, 4)
		t.Logf("ran backend=%s info=%s", b, r.Info().Backend)
	})
}

// TestRefusedIOUring plays a machine that refuses io_uring: the io_uring subtest is skipped with the
// reason, the fallback still runs, and with RINGSTREAM_REQUIRE_IOURING=1 the skip becomes a failure.
func TestRefusedIOUring(t *testing.T) {
	cases := []struct {
		require   string
		wantFail  bool
		wantLines []string
	}{
		{"0", false, []string{"--- SKIP: TestHelperRefusedProbe/io_uring", refusedReason, "ran backend=fallback info=fallback"}},
		{"", false, []string{"--- SKIP: TestHelperRefusedProbe/io_uring", refusedReason, "ran backend=fallback info=fallback"}},
		{"1", true, []string{"--- FAIL: TestHelperRefusedProbe/io_uring", RequireEnv + "=1: " + refusedReason, "--- PASS: TestHelperRefusedProbe/fallback"}},
		{"yes", true, []string{`RINGSTREAM_REQUIRE_IOURING="yes", want 1`}},
	}
	for _, c := range cases {
		t.Run("require="+c.require, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestHelperRefusedProbe$", "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), helperEnv+"=1", RequireEnv+"="+c.require)
			out, err := cmd.CombinedOutput()
			if failed := err != nil; failed != c.wantFail {
				t.Fatalf("child failed=%v (%v), want %v; output:\n%s", failed, err, c.wantFail, out)
			}
			for _, line := range c.wantLines {
				if !strings.Contains(string(out), line) {
					t.Errorf("child output lacks %q; output:\n%s", line, out)
				}
			}
			if strings.Contains(string(out), "ran backend=io_uring") {
				t.Errorf("the io_uring subtest ran although the probe refused it; output:\n%s", out)
			}
		})
	}
}

// TestForEachBackendRunsBoth: on this machine, each subtest gets a ring of its own backend, io_uring
// first. Where io_uring is refused, the io_uring subtest skips (or fails under CI's variable).
func TestForEachBackendRunsBoth(t *testing.T) {
	var ran []ring.Backend
	ForEachBackend(t, func(t *testing.T, b ring.Backend) {
		r := New(t, b, 8)
		if got := r.Info().Backend; got != b {
			t.Fatalf("ring backend %q, want %q", got, b)
		}
		ran = append(ran, b)
	})
	if len(ran) == 0 || ran[len(ran)-1] != ring.BackendFallback {
		t.Fatalf("ran %v, want the fallback last", ran)
	}
	if ok, reason := Available(); ok && len(ran) != 2 {
		t.Fatalf("io_uring available, yet ran %v", ran)
	} else if !ok {
		t.Logf("io_uring unavailable here: %s", reason)
	}
}
