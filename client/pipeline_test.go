package client

import (
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringstream/ringstream/wire"
)

// readAll fetches every record of the fake stream and checks they are want's, in order, once each.
func checkLog(t *testing.T, c *Client, st *fakeStream, want []string) {
	t.Helper()
	cs, err := c.Consumer("orders", 0, FetchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for {
		recs, err := cs.Poll(testCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		k := 0
		for recs.Next() {
			got = append(got, string(recs.Value()))
			k++
		}
		if recs.Err() != nil {
			t.Fatal(recs.Err())
		}
		if k == 0 {
			break
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("log holds %d records %v..., want %d in order", len(got), got[:min(len(got), 8)], len(want))
	}
}

// pipelinedRun appends n records through a producer with InFlight 4 and small batches, closes it and
// returns the records and the producer.
func pipelinedRun(t *testing.T, c *Client, n int) ([]string, *Producer, []Confirmed) {
	t.Helper()
	var confirms []Confirmed
	p, err := c.Producer(ProducerConfig{Stream: "orders", InFlight: 4, BatchBytes: 64, Linger: time.Hour,
		OnConfirm: func(cf Confirmed) { confirms = append(confirms, cf) }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	var want []string
	for i := range n {
		rec := fmt.Sprintf("rec-%04d", i)
		want = append(want, rec)
		if err := p.Append(ctx, []byte(rec)); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	next := uint64(0)
	for _, cf := range confirms {
		if cf.BaseOffset != next {
			t.Fatalf("confirm at %d, want the next at %d (confirms out of order)", cf.BaseOffset, next)
		}
		next += uint64(cf.Count)
	}
	if next != uint64(n) {
		t.Fatalf("confirms cover %d records, want %d", next, n)
	}
	return want, p, confirms
}

// With InFlight 4 more than one batch is in flight, and the log holds every record once, in order.
func TestPipelinedProducerKeepsOrder(t *testing.T) {
	n, st := ownerCluster(t)
	c := dialTest(t, testConfig(n.addr))
	want, p, _ := pipelinedRun(t, c, 300)
	if p.windowMax < 2 {
		t.Fatalf("at most %d batch in flight, want a pipeline", p.windowMax)
	}
	checkLog(t, c, st, want)
}

// The owner's connection drops after it appended a batch: the window is resent oldest first, the
// batches it held are answered from its table, and nothing is appended twice or out of order.
func TestPipelinedProducerResendsWindowAfterDrop(t *testing.T) {
	n, st := ownerCluster(t)
	st.dropAfterAppend = 3
	c := dialTest(t, testConfig(n.addr))
	want, _, confirms := pipelinedRun(t, c, 300)
	dups := 0
	for _, cf := range confirms {
		if cf.Duplicate {
			dups++
		}
	}
	if dups == 0 {
		t.Fatal("no batch was answered as a duplicate: the drops did not test the resend")
	}
	checkLog(t, c, st, want)
}

// A batch refused in the middle of the window (overloaded) makes the later ones a gap at the owner;
// the window is resent in order and every record lands once.
func TestPipelinedProducerResendsWindowAfterRefusal(t *testing.T) {
	n, st := ownerCluster(t)
	st.overloadAt = 3
	c := dialTest(t, testConfig(n.addr))
	want, _, _ := pipelinedRun(t, c, 300)
	checkLog(t, c, st, want)
	if n.count(wire.CommandProduce) <= len(st.bases) {
		t.Fatalf("%d produces for %d batches: nothing was resent", n.count(wire.CommandProduce), len(st.bases))
	}
}

// The first owner the producer is sent to cannot be reached: a later batch must not go out to the
// next owner before the one that failed (a new owner takes any first sequence, so it would be
// appended first and the older one refused as old).
func TestPipelinedProducerNeverOvertakes(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	_ = ln.Close()
	owner, st := ownerCluster(t)
	var lookups atomic.Int32
	var seed *fakeNode
	seed = startFake(t, 2, func(h *wire.Header, body []byte) ([]byte, bool) {
		if lookups.Add(1) == 1 {
			return seed.lookupReply(h, 3, dead), false
		}
		return seed.lookupReply(h, 1, owner.addr), false
	})
	c := dialTest(t, testConfig(seed.addr))
	var want []string
	p, err := c.Producer(ProducerConfig{Stream: "orders", InFlight: 4, BatchBytes: 64, Linger: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	for i := range 200 {
		rec := fmt.Sprintf("rec-%04d", i)
		want = append(want, rec)
		if err := p.Append(ctx, []byte(rec)); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	checkLog(t, c, st, want)
}
