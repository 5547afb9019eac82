package config_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/ringstream/ringstream/engine/config"
)

// FuzzParse: the loader never panics, and every refusal wraps ErrConfig. The seed corpus is in
// testdata/fuzz/FuzzParse.
func FuzzParse(f *testing.F) {
	var b bytes.Buffer
	if err := config.WriteDefaults(&b); err != nil {
		f.Fatal(err)
	}
	f.Add(b.String())
	f.Add("[cluster]\npeers = { 1 = \"127.0.0.1:1\", 2 = \"[::1]:2\" }\n[metadata]\nreplicas = [1, 2, 1]")
	f.Add("[cluster]\nnode_liveness_timeout = \"1h\"\nassignment_policy = \"count_durable(3)\"")
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, text string) {
		c, err := config.Parse([]byte(text), dir)
		if err != nil {
			if !errors.Is(err, config.ErrConfig) {
				t.Fatalf("error %v does not wrap ErrConfig", err)
			}
			return
		}
		if c.ShardCount < 1 || len(c.Nodes) == 0 || c.Schedule.BroadcastIntervalTicks == 0 {
			t.Fatalf("accepted config without its resolved values: %+v", c)
		}
	})
}
