package engine

import (
	"testing"
	"time"
)

// waitBound only guards a test from hanging when the cluster never gets there; nothing is timed.
const waitBound = 60 * time.Second

// waitFor polls until cond holds (the bound only guards against a hang).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitBound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never reached: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
