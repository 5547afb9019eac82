package shard_test

import (
	"testing"

	"github.com/ringstream/ringstream/ring"
)

// forEachBackend runs f once per ring backend.
func forEachBackend(t *testing.T, f func(t *testing.T, b ring.Backend)) {
	for _, b := range []ring.Backend{ring.BackendIOUring, ring.BackendFallback} {
		t.Run(string(b), func(t *testing.T) { f(t, b) })
	}
}
