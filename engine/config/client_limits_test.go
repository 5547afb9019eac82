package config_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/ringstream/ringstream/engine/config"
	"github.com/ringstream/ringstream/shard"
)

// TestClientLimits: the [client] limits and timeouts reach the shard in ticks, 0 turns a timeout off,
// and each refusal names its option.
func TestClientLimits(t *testing.T) {
	c, err := config.Parse([]byte("[cluster]\ntick_ms = 5\n[client]\nconnections_max = 2000\nidle_timeout = \"1m\"\n"+
		"frame_timeout = 0\nhandshake_timeout = 250\npending_bytes_max = 33554432"), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cl := c.Shard().Client
	if cl.ConnectionsMax != 2000 || cl.IdleTimeoutTicks != 12000 || cl.FrameTimeoutTicks != shard.TimeoutNever ||
		cl.HandshakeTimeoutTicks != 50 || cl.PendingBytesMax != 32<<20 {
		t.Fatalf("client config %+v", cl)
	}
	d, err := config.Parse(nil, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if cl := d.Shard().Client; cl.ConnectionsMax != d.ShardCount*512 || cl.IdleTimeoutTicks != 30000 || cl.FrameTimeoutTicks != 3000 ||
		cl.HandshakeTimeoutTicks != 500 || cl.PendingBytesMax != 16<<20 {
		t.Fatalf("default client config %+v", cl)
	}
	for _, tc := range []struct{ toml, want string }{
		{"[client]\nidle_timeout = 1005", "client.idle_timeout: 1005 ms is not a whole multiple of tick_ms (10 ms)"},
		{"[client]\nframe_timeout = 15", "client.frame_timeout: 15 ms is not a whole multiple"},
		{"[client]\nhandshake_timeout = 0", "client.handshake_timeout: must be at least one tick"},
		{"[client]\nidle_timeout = 1000", "client.idle_timeout: 1000 ms is below client.handshake_timeout (5000 ms)"},
		{"[client]\nconnections_max = -1", "client.connections_max: is -1; must be 0 (what the shards hold) or more"},
		{"[client]\npending_bytes_max = 1048576", "client.pending_bytes_max: 1048576 is below client.frame_bytes_max"},
	} {
		_, err := config.Parse([]byte(tc.toml), t.TempDir())
		if !errors.Is(err, config.ErrConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: want an error naming %q, got %v", tc.toml, tc.want, err)
		}
	}
	if _, err := config.Parse([]byte("[client]\nidle_timeout = 0"), t.TempDir()); err != nil {
		t.Errorf("idle timeout off refused: %v", err)
	}
	if len(d.Warnings) != 1 { // the defaults warn only of the empty secret
		t.Errorf("defaults warn: %q", d.Warnings)
	}
	big, err := config.Parse([]byte("[shards]\ncount = 2\n[client]\nconnections_max = 5000"), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if w := strings.Join(big.Warnings, "\n"); !strings.Contains(w, "client.connections_max is 5000, but 2 shards with ring_entries 1024 hold 1024") {
		t.Errorf("no warning of connections past the shards' rings: %q", big.Warnings)
	}
}
