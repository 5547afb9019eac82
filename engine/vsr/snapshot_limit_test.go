package vsr

import (
	"errors"
	"testing"

	"github.com/ringstream/ringstream/wire"
)

// A checkpoint past SnapshotBytesMax is not sent (a frame cannot carry it): the replica counts it
// and goes on; one at the bound is sent.
func TestSnapshot_PastTheFrameLimitIsNotSent(t *testing.T) {
	c := newCluster(t, 3)
	for req := uint64(1); req <= 9; req++ {
		if err := c.propose(1, req, req, 1); err != nil {
			t.Fatal(err)
		}
	}
	r := c.replicas[c.primary()]
	if r.SnapshotOp() == 0 || r.CheckpointBytes() == 0 {
		t.Fatalf("no checkpoint after 9 ops (checkpoint op %d)", r.SnapshotOp())
	}
	to := uint8((c.primary() + 1) % 3)
	snapshots := func() int {
		n := 0
		for _, env := range r.Ready().Messages {
			if env.Msg.Command == wire.CommandVSRSnapshot {
				n++
			}
		}
		return n
	}
	snapshots()
	r.cfg.SnapshotBytesMax = r.CheckpointBytes() - 1
	r.sendSnapshot(to)
	if n, st := snapshots(), r.Stats(); n != 0 || st.SnapshotsTooLarge != 1 || st.SnapshotsSent != 0 {
		t.Fatalf("snapshot past the limit: %d sent, stats %+v", n, *st)
	}
	r.cfg.SnapshotBytesMax = r.CheckpointBytes()
	r.sendSnapshot(to)
	if n, st := snapshots(), r.Stats(); n != 1 || st.SnapshotsSent != 1 {
		t.Fatalf("snapshot at the limit: %d sent, stats %+v", n, *st)
	}
	for _, bad := range []int{0, wire.VSRPayloadMax + 1} {
		cfg := testConfig(3, 0)
		cfg.SnapshotBytesMax = bad
		if err := cfg.Validate(); !errors.Is(err, ErrConfig) {
			t.Fatalf("snapshot_bytes_max %d: %v, want ErrConfig", bad, err)
		}
	}
}
