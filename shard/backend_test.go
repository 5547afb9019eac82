package shard_test

import (
	"testing"

	"github.com/ringstream/ringstream/ring"
	"github.com/ringstream/ringstream/ring/ringtest"
)

// forEachBackend runs f once per ring backend (ringtest.ForEachBackend: the io_uring subtest skips
// with the reason where io_uring is refused, and fails then when RINGSTREAM_REQUIRE_IOURING=1).
func forEachBackend(t *testing.T, f func(t *testing.T, b ring.Backend)) {
	ringtest.ForEachBackend(t, f)
}
