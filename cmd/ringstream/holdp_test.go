package main

import (
	"io"
	"log/slog"
	"runtime"
	"testing"

	"github.com/ringstream/ringstream/engine/config"
)

// serve hands every shard's ring the held-P wait and leaves one P more than the shards for the
// rest of the process; a GOMAXPROCS already above that is kept.
func TestHoldPs_SpareP(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := &config.Config{ShardCount: 2}
	holdPs(cfg, quiet)
	if !cfg.WaitHoldsP || !cfg.Shard().Ring.WaitHoldsP {
		t.Fatalf("WaitHoldsP %v, ring's %v: want both on", cfg.WaitHoldsP, cfg.Shard().Ring.WaitHoldsP)
	}
	if got := runtime.GOMAXPROCS(0); got != 3 {
		t.Fatalf("GOMAXPROCS %d with 2 shards, want 3", got)
	}
	runtime.GOMAXPROCS(8)
	holdPs(&config.Config{ShardCount: 2}, quiet)
	if got := runtime.GOMAXPROCS(0); got != 8 {
		t.Fatalf("GOMAXPROCS %d, want the 8 set before kept", got)
	}
}
