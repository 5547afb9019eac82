package ring

import (
	"errors"
	"io"
	"log/slog"
	"testing"
)

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newFallbackRing(entries uint32) (Ring, error) {
	return New(Config{Backend: BackendFallback, Entries: entries, Logger: quietLogger()})
}

func newIOUringRing(entries uint32) (Ring, error) {
	return New(Config{Backend: BackendIOUring, Entries: entries, Logger: quietLogger()})
}

func TestNewRejectsBadConfig(t *testing.T) {
	for _, cfg := range []Config{
		{Backend: "epoll"},
		{Entries: 100},
		{Entries: 1 << 16},
	} {
		cfg.Logger = quietLogger()
		if _, err := New(cfg); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("New(%+v): %v, want ErrInvalidConfig", cfg, err)
		}
	}
}
