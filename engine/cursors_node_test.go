package engine

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ringstream/ringstream/client"
)

// TestNode_CursorListDeleteSurvivesOwnerKill: three real nodes and the real client. Cursors committed
// after a produce are listed with their lag; a delete is answered once on W copies; the owner's node
// is then killed, and the new owner lists the deleted cursor as gone and the other one where it was.
// A reset moves the remaining cursor backwards to the head, and a commit of the deleted name makes it
// again.
func TestNode_CursorListDeleteSurvivesOwnerKill(t *testing.T) {
	c := newFailoverCluster(t, 50)
	c.createStream("orders")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var addrs []string
	for _, id := range []uint16{1, 2, 3} {
		addrs = append(addrs, c.client[id].String())
	}
	cl, err := client.Dial(ctx, client.Config{Addrs: addrs, Cluster: nodeTestCluster, BackoffMin: 5 * time.Millisecond,
		BackoffMax: 100 * time.Millisecond, Retries: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i := range 10 {
		if err := produceRecord(ctx, cl, "orders", fmt.Sprint("record ", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := cl.CommitCursor(ctx, "orders", "billing", 9); err != nil {
		t.Fatal(err)
	}
	if err := cl.CommitCursor(ctx, "orders", "audit", 4); err != nil {
		t.Fatal(err)
	}
	list, err := cl.ListCursors(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(list.Cursors); got != "[{audit 4 6} {billing 9 1}]" || list.ConfirmedTail != 10 {
		t.Fatalf("list: %s, confirmed tail %d", got, list.ConfirmedTail)
	}
	off, found, err := cl.DeleteCursor(ctx, "orders", "billing")
	if err != nil || !found || off != 9 {
		t.Fatalf("delete: %d %v %v", off, found, err)
	}
	if _, found, err := cl.DeleteCursor(ctx, "orders", "billing"); err != nil || found {
		t.Fatalf("a second delete: found %v, %v", found, err)
	}

	r, err := cl.Lookup(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	c.nodes[r.Owner].Kill()
	waitForTB(t, "a new owner", func() bool {
		nr, err := cl.Lookup(ctx, "orders")
		return err == nil && nr.Owner != r.Owner && nr.Epoch > r.Epoch
	})
	list, err = cl.ListCursors(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(list.Cursors); got != "[{audit 4 6}]" {
		t.Fatalf("the new owner lists %s, want audit alone at 4", got)
	}
	zero := uint64(0)
	if res, err := cl.ResetCursor(ctx, "orders", "audit", client.CursorReset{ToOffset: &zero}); err != nil ||
		!res.Found || res.Before != 4 || res.After != 0 || res.ConfirmedTail != 10 {
		t.Fatalf("reset: %+v %v", res, err)
	}
	if err := cl.CommitCursor(ctx, "orders", "billing", 2); err != nil {
		t.Fatal(err)
	}
	info, _, found, err := cl.DescribeCursor(ctx, "orders", "audit")
	if err != nil || !found || info.Offset != 0 || info.Lag != 10 {
		t.Fatalf("describe after the reset: %+v %v %v", info, found, err)
	}
	if info, _, found, err := cl.DescribeCursor(ctx, "orders", "billing"); err != nil || !found || info.Offset != 2 {
		t.Fatalf("describe the recreated cursor: %+v %v %v", info, found, err)
	}
}
