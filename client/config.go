package client

import (
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/ringstream/ringstream/wire"
)

// Config says how a Client reaches a cluster. Zero durations and counts take the defaults.
type Config struct {
	// Addrs are client addresses (host:port) of some of the cluster's nodes; the client connects to any
	// of them and finds the rest from the cluster's metadata. At least one.
	Addrs []string
	// Cluster is the cluster id every node checks in the handshake (engine/config's cluster.id).
	Cluster uint64
	// Secret is the cluster secret (empty when the cluster runs without one). It never crosses the wire:
	// the handshake proves it with an HMAC over both sides' nonces.
	Secret []byte
	// DialTimeout bounds a TCP connect and the handshake after it (default 5 s).
	DialTimeout time.Duration
	// RequestTimeout bounds one attempt of a request beyond its long-poll wait (default 10 s): a node
	// that answers nothing within it is treated as gone, and the request is retried elsewhere.
	RequestTimeout time.Duration
	// Retries is how many times a request is retried after a refusal that may clear (not the owner, a
	// failover, a lost connection, an overloaded node) before its error is returned (default 20: about
	// 13 s of backoff with the default bounds, longer than a failover takes).
	Retries int
	// BackoffMin and BackoffMax bound the wait between retries: it doubles from BackoffMin up to
	// BackoffMax, with jitter (defaults 20 ms and 1 s).
	BackoffMin time.Duration
	BackoffMax time.Duration
	// Logger receives the client's debug and warning records (default slog.Default()).
	Logger *slog.Logger
}

const (
	defaultDialTimeout    = 5 * time.Second
	defaultRequestTimeout = 10 * time.Second
	defaultRetries        = 20
	defaultBackoffMin     = 20 * time.Millisecond
	defaultBackoffMax     = time.Second
)

func (c Config) withDefaults() Config {
	if c.DialTimeout == 0 {
		c.DialTimeout = defaultDialTimeout
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = defaultRequestTimeout
	}
	if c.Retries == 0 {
		c.Retries = defaultRetries
	}
	if c.BackoffMin == 0 {
		c.BackoffMin = defaultBackoffMin
	}
	if c.BackoffMax == 0 {
		c.BackoffMax = max(defaultBackoffMax, c.BackoffMin)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func (c Config) validate() error {
	if len(c.Addrs) == 0 {
		return fmt.Errorf("%w: Addrs is empty: give at least one node's client address", ErrConfig)
	}
	for _, a := range c.Addrs {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return fmt.Errorf("%w: address %q: %v", ErrConfig, a, err)
		}
	}
	switch {
	case c.Cluster == 0:
		return fmt.Errorf("%w: Cluster is 0: set the cluster id of the nodes' configuration", ErrConfig)
	case c.DialTimeout < 0 || c.RequestTimeout < 0:
		return fmt.Errorf("%w: DialTimeout and RequestTimeout must not be negative", ErrConfig)
	case c.Retries < 0:
		return fmt.Errorf("%w: Retries %d is negative", ErrConfig, c.Retries)
	case c.BackoffMin < 0 || c.BackoffMax < c.BackoffMin:
		return fmt.Errorf("%w: backoff %v..%v: want 0 <= BackoffMin <= BackoffMax", ErrConfig, c.BackoffMin, c.BackoffMax)
	}
	return nil
}

// checkName checks a stream or consumer name (what) against wire's rule before anything is sent.
func checkName(what, s string) error {
	check := wire.ValidateStreamName
	if what == "consumer" {
		check = wire.ValidateConsumerName
	}
	if err := check(s); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidName, err)
	}
	return nil
}
