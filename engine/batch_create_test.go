package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ringstream/ringstream/client"
	"github.com/ringstream/ringstream/shard"
)

// TestNode_CreateStreamsInBatches: one CreateStreams call of 1,203 names (seven requests of up to
// 200, each cut into ops of up to 100 creates) on three real nodes creates every new name once, spread over
// the nodes as one-by-one creates are, refuses the two names taken before alone (ErrStreamExists)
// and leaves those streams as they were; the streams it created take records; a DeleteStreams of
// them plus an unknown name deletes each and refuses the unknown one alone.
func TestNode_CreateStreamsInBatches(t *testing.T) {
	c := newTestCluster(t, "")
	c.waitRegistered()
	var addrs []string
	for _, id := range []uint16{2, 3, 1} { // node 2 or 3 forwards unless it is the primary
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
	taken := map[string]client.StreamInfo{}
	for _, n := range []string{"b.0007", "b.1100"} {
		info, err := cl.CreateStream(ctx, n, client.StreamOptions{Copies: 3})
		if err != nil {
			t.Fatal(err)
		}
		taken[n] = info
	}
	var names []string
	for i := 1202; i >= 0; i-- { // not sorted: the client sorts, the results keep this order
		names = append(names, fmt.Sprintf("b.%04d", i))
	}
	results, err := cl.CreateStreams(ctx, names, client.StreamOptions{Copies: 3})
	if err != nil {
		t.Fatal(err)
	}
	ids := map[uint64]bool{}
	for i, r := range results {
		if r.Info.Name != names[i] {
			t.Fatalf("result %d names %q, want %q", i, r.Info.Name, names[i])
		}
		if _, was := taken[names[i]]; was {
			if !errors.Is(r.Err, client.ErrStreamExists) {
				t.Fatalf("%s was taken before: %v, want ErrStreamExists", names[i], r.Err)
			}
			continue
		}
		if r.Err != nil {
			t.Fatalf("%s: %v", names[i], r.Err)
		}
		if ids[r.Info.Stream] || r.Info.Stream == 0 || r.Info.Incarnation != 1 {
			t.Fatalf("%s: stream %d incarnation %d (a repeated id, 0, or not the first incarnation)", names[i],
				r.Info.Stream, r.Info.Incarnation)
		}
		ids[r.Info.Stream] = true
	}
	if len(ids) != len(names)-len(taken) {
		t.Fatalf("%d streams created, want %d", len(ids), len(names)-len(taken))
	}
	list, err := cl.ListStreams(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != len(names) {
		t.Fatalf("the cluster lists %d streams, want %d", len(list), len(names))
	}
	for _, s := range list {
		if old, ok := taken[s.Name]; ok && (s.Stream != old.Stream || s.Incarnation != old.Incarnation) {
			t.Fatalf("%s changed: %+v, was %+v", s.Name, s, old)
		}
	}
	for _, n := range []string{"b.0000", "b.0600", "b.1202"} {
		if err := produceRecord(ctx, cl, n, "one"); err != nil {
			t.Fatalf("produce to %s: %v", n, err)
		}
	}
	// Placement counts each pick: the owners of a batch spread as one-by-one creates do, so each
	// node owns a third (rounded up) of the 1,203 streams.
	owners := map[uint16]int{}
	n1 := c.nodes[1]
	done := make(chan struct{})
	if err := n1.Shards().Run(0, func(*shard.Shard) {
		st := n1.Meta().State()
		for _, s := range st.Streams() {
			a, _ := st.Assignment(s.ID)
			owners[a.Owner]++
		}
		close(done)
	}); err != nil {
		t.Fatal(err)
	}
	<-done
	for id, k := range owners {
		if k > (len(names)+2)/3 {
			t.Fatalf("node %d owns %d of %d streams: %v", id, k, len(names), owners)
		}
	}

	del := append(slices.Clone(names[:500]), "no-such-stream")
	results, err = cl.DeleteStreams(ctx, del)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range results {
		if i == len(del)-1 {
			if !errors.Is(r.Err, client.ErrUnknownStream) {
				t.Fatalf("the unknown name: %v, want ErrUnknownStream", r.Err)
			}
			continue
		}
		if r.Err != nil {
			t.Fatalf("delete %s: %v", del[i], r.Err)
		}
	}
	list, err = cl.ListStreams(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != len(names)-500 {
		t.Fatalf("%d streams left, want %d", len(list), len(names)-500)
	}
}
