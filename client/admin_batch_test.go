package client

import (
	"errors"
	"sync/atomic"
	"testing"

	"github.com/ringstream/ringstream/wire"
)

// A batched create sends the names sorted, answers each name in the caller's order, asks again
// (after a backoff) only the names refused with a code that clears by itself, and keeps a final
// refusal as that name's result; names given twice are refused before anything is sent.
func TestCreateStreams_RetriesOnlyTheRetryableNames(t *testing.T) {
	var calls atomic.Int32
	var n *fakeNode
	n = startFake(t, 1, func(h *wire.Header, body []byte) ([]byte, bool) {
		if h.Command != wire.CommandCreateStreams {
			return n.refuse(h, wire.CodeInvalidRequest, "?"), false
		}
		req, err := wire.DecodeCreateStreams(h, body)
		if err != nil {
			return n.refuse(h, wire.CodeOf(err), err.Error()), false
		}
		call := calls.Add(1)
		var out []wire.StreamOutcome
		for name := range req.Names.All {
			switch {
			case string(name) == "b" && call == 1:
				out = append(out, wire.StreamOutcome{Code: wire.CodeOverloaded, Message: []byte("pipeline full")})
			case string(name) == "c":
				out = append(out, wire.StreamOutcome{Code: wire.CodeStreamExists, Stream: 3, Incarnation: 1})
			default:
				out = append(out, wire.StreamOutcome{Stream: uint64(name[0]), Incarnation: 1})
			}
		}
		return wire.AppendCreateStreamsReply(nil, n.from(), &wire.StreamsReply{RequestID: req.RequestID}, out), false
	})
	c := dialTest(t, testConfig(n.addr))
	ctx := testCtx(t)
	results, err := c.CreateStreams(ctx, []string{"c", "a", "b"}, StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := calls.Load(); got != 2 {
		t.Fatalf("%d requests, want 2 (the second for b alone)", got)
	}
	if results[0].Info.Name != "c" || !errors.Is(results[0].Err, ErrStreamExists) {
		t.Fatalf("c: %+v, want ErrStreamExists", results[0])
	}
	if results[1].Err != nil || results[1].Info.Stream != 'a' || results[2].Err != nil || results[2].Info.Stream != 'b' {
		t.Fatalf("a and b: %+v %+v", results[1], results[2])
	}
	if err := results.Err(); !errors.Is(err, ErrStreamExists) {
		t.Fatalf("Err: %v, want the first refusal", err)
	}
	if _, err := c.CreateStreams(ctx, []string{"x", "y", "x"}, StreamOptions{}); !errors.Is(err, ErrInvalidName) {
		t.Fatalf("a name twice: %v, want ErrInvalidName", err)
	}
	if got := calls.Load(); got != 2 {
		t.Fatalf("a request was sent for a list with a name twice (%d requests)", got)
	}
}
