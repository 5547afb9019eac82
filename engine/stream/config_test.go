package stream_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/engine/stream"
)

// Every config rule and every unusable assignment is refused with ErrConfig naming the cause.
func TestConfig_Refusals(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(c *stream.Config, a *meta.Assignment)
		want string
	}{
		{"no self", func(c *stream.Config, a *meta.Assignment) { c.Self = 0 }, "Self"},
		{"stream 0", func(c *stream.Config, a *meta.Assignment) { c.Stream = 0 }, "Stream"},
		{"incarnation 0", func(c *stream.Config, a *meta.Assignment) { c.Incarnation = 0 }, "Incarnation"},
		{"no decoder", func(c *stream.Config, a *meta.Assignment) { c.Decode = nil }, "Decode"},
		{"no header size", func(c *stream.Config, a *meta.Assignment) { c.BatchHeaderBytes = 0 }, "BatchHeaderBytes"},
		{"negative bytes", func(c *stream.Config, a *meta.Assignment) { c.ReadBytes = -1 }, "negative"},
		{"negative count", func(c *stream.Config, a *meta.Assignment) { c.FetchesMax = -1 }, "negative"},
		{"pending below a batch", func(c *stream.Config, a *meta.Assignment) { c.PendingBytesMax = 1000 }, "PendingBytesMax"},
		{"in flight below a batch", func(c *stream.Config, a *meta.Assignment) { c.InflightBytesMax = 1000 }, "InflightBytesMax"},
		{"read below a batch", func(c *stream.Config, a *meta.Assignment) { c.ReadBytes = 1000 }, "ReadBytes"},
		{"epoch 0", func(c *stream.Config, a *meta.Assignment) { a.Epoch = 0 }, "epoch 0"},
		{"no owner", func(c *stream.Config, a *meta.Assignment) { a.Owner = 0 }, "owner"},
		{"not a member", func(c *stream.Config, a *meta.Assignment) { c.Self = 9 }, "holds no copy"},
		{"owner among followers", func(c *stream.Config, a *meta.Assignment) { a.Followers = []uint16{1, 2} }, "followers"},
		{"followers unsorted", func(c *stream.Config, a *meta.Assignment) { a.Followers = []uint16{3, 2} }, "followers"},
		{"bad policy", func(c *stream.Config, a *meta.Assignment) { a.Policy = meta.Policy{Kind: 9} }, "policy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, a := testConfig(1), assignment(1, 1, 2, 3)
			tc.mod(&cfg, &a)
			_, err := stream.New(cfg, a, nil)
			if !errors.Is(err, stream.ErrConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want ErrConfig naming %q", err, tc.want)
			}
		})
	}
	if err := (stream.Config{Self: 1, Stream: 1, Incarnation: 1, Decode: decode, BatchHeaderBytes: 80}).Validate(); err != nil {
		t.Fatalf("defaults refused: %v", err)
	}
}

// Retained batch headers that do not follow each other are refused on open with ErrBatchOrder.
func TestObserveBatch_Order(t *testing.T) {
	for _, tc := range []struct {
		name    string
		batches []stream.BatchHeader
	}{
		{"gap", []stream.BatchHeader{{BaseOffset: 0, Count: 2, Epoch: 1}, {BaseOffset: 3, Count: 1, Epoch: 1}}},
		{"overlap", []stream.BatchHeader{{BaseOffset: 0, Count: 2, Epoch: 1}, {BaseOffset: 1, Count: 1, Epoch: 1}}},
		{"epoch back", []stream.BatchHeader{{BaseOffset: 0, Count: 2, Epoch: 2}, {BaseOffset: 2, Count: 1, Epoch: 1}}},
		{"no records", []stream.BatchHeader{{BaseOffset: 0, Count: 0, Epoch: 1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := stream.New(testConfig(1), assignment(1, 1, 2), nil)
			if err != nil {
				t.Fatal(err)
			}
			var last error
			for _, h := range tc.batches {
				last = c.ObserveBatch(h)
			}
			if !errors.Is(last, stream.ErrBatchOrder) {
				t.Fatalf("got %v, want ErrBatchOrder", last)
			}
		})
	}
}
