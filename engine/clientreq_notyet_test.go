package engine

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ringstream/ringstream/client"
)

// TestNode_DeleteCreateProduceSucceeds20Of20 is issue 21's finding 2: `stream delete dd; stream
// create dd; produce dd` failed 7 times in 8 with CodeUnknownStream, because the owner still held the
// old incarnation's copy (or none yet) when the produce for the new one arrived, and the client took
// that passing state for a final one. Now the node answers CodeNotYet and the Go client retries it:
// the produce right after each create is confirmed, 20 times in 20, on real nodes and the real client.
func TestNode_DeleteCreateProduceSucceeds20Of20(t *testing.T) {
	c := newTestCluster(t, "")
	c.waitRegistered()
	var addrs []string
	for _, id := range []uint16{1, 2, 3} {
		addrs = append(addrs, c.nodes[id].ClientAddr().String())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, err := client.Dial(ctx, client.Config{Addrs: addrs, Cluster: nodeTestCluster, BackoffMin: 5 * time.Millisecond,
		BackoffMax: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := cl.CreateStream(ctx, "dd", client.StreamOptions{Copies: 3}); err != nil {
		t.Fatal(err)
	}
	failed := 0
	for i := range 20 {
		if err := cl.DeleteStream(ctx, "dd"); err != nil {
			t.Fatalf("round %d: delete: %v", i, err)
		}
		info, err := cl.CreateStream(ctx, "dd", client.StreamOptions{Copies: 3})
		if err != nil {
			t.Fatalf("round %d: create: %v", i, err)
		}
		if info.Incarnation != uint32(i+2) {
			t.Fatalf("round %d: incarnation %d, want %d", i, info.Incarnation, i+2)
		}
		if err := produceRecord(ctx, cl, "dd", fmt.Sprintf("record %d", i)); err != nil {
			failed++
			t.Errorf("round %d: produce right after the create: %v", i, err)
		}
	}
	if failed > 0 {
		t.Fatalf("delete-create-produce failed %d times in 20", failed)
	}
}

// produceRecord produces one record to stream and waits for its confirmation.
func produceRecord(ctx context.Context, cl *client.Client, stream, rec string) error {
	p, err := cl.Producer(client.ProducerConfig{Stream: stream, Linger: -1})
	if err != nil {
		return err
	}
	if err := p.Append(ctx, []byte(rec)); err != nil {
		_ = p.Close(ctx)
		return err
	}
	return p.Close(ctx)
}
