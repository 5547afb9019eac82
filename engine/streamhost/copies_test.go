package streamhost_test

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/engine/stream"
	"github.com/ringstream/ringstream/engine/streamhost"
	"github.com/ringstream/ringstream/shard"
	"github.com/ringstream/ringstream/wire"
)

// soloSpec is a 1-copy stream on node 1 at epoch 1.
func soloSpec(id uint64) streamhost.Spec {
	return streamhost.Spec{Stream: id, Incarnation: 1,
		Assignment: meta.Assignment{Epoch: 1, Owner: 1, Policy: meta.Policy{Kind: meta.PolicyMajorityDurable}}}
}

// nextEpoch is specs at the next epoch: an owner reopened in its own epoch waits for a new
// assignment (engine/stream), which the controller gives it after a restart.
func nextEpoch(specs []streamhost.Spec) []streamhost.Spec {
	out := make([]streamhost.Spec, len(specs))
	for i, sp := range specs {
		sp.Assignment.Epoch++
		out[i] = sp
	}
	return out
}

// startSolo starts n alone (no peers).
func startSolo(t testing.TB, n *testNode) {
	t.Helper()
	if err := n.node.Start(nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.node.Stop() })
}

// openAll opens specs on n and waits for every open to end; it returns the errors seen.
func openAll(t testing.TB, n *testNode, specs []streamhost.Spec) (time.Duration, []error) {
	t.Helper()
	start := time.Now()
	if err := n.host.Open(specs...); err != nil {
		t.Fatal(err)
	}
	var errs []error
	for range specs {
		select {
		case err := <-n.sink.opened:
			if err != nil {
				errs = append(errs, err)
			}
		case <-time.After(60 * time.Second):
			t.Fatal("opens never ended")
		}
	}
	return time.Since(start), errs
}

// produceOne produces one batch to stream id on n and waits for its answer.
func produceOne(t testing.TB, n *testNode, id uint64, seq uint64) stream.Reply {
	t.Helper()
	done := make(chan struct{})
	err := n.node.Run(shard.ShardOf(id, n.shards), func(s *shard.Shard) {
		defer close(done)
		m := stream.Message{Kind: stream.KindProduce, Client: 1}
		m.Produce = wire.Produce{RequestID: seq, Stream: id, Incarnation: 1, Count: recordsPerBatch, Batch: recordBatch(seq, nil)}
		if err := n.host.Step(s, id, &m); err != nil {
			t.Error(err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	<-done
	select {
	case r := <-n.sink.acks:
		return r
	case <-time.After(30 * time.Second):
		t.Fatal("produce never answered")
	}
	return stream.Reply{}
}

func soloNode(t testing.TB, dir string, tune ...func(*streamhost.Config)) *testNode {
	n := newTestNode(t, 1, dir, netip.MustParseAddrPort("127.0.0.1:0"), tune...)
	startSolo(t, n)
	return n
}

// TestCopies_OpenManyAtBoot: copies (1,000 with -streamhost.full) are created on one node, then opened again at the boot of
// a new node on the same directory, all at once on the shard's ring; each serves afterwards.
func TestCopies_OpenManyAtBoot(t *testing.T) {
	copies := 200 // 1,000 with -streamhost.full
	if *fullCount {
		copies = 1000
	}
	if testing.Short() {
		copies = 50
	}
	dir := t.TempDir()
	specs := make([]streamhost.Spec, copies)
	for i := range specs {
		specs[i] = soloSpec(uint64(100 + i))
	}
	n := soloNode(t, dir)
	created, errs := openAll(t, n, specs)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if r := produceOne(t, n, 100, 0); r.Kind != stream.ReplyProduce {
		t.Fatalf("produce answered %+v", r)
	}
	if err := n.node.Stop(); err != nil {
		t.Fatal(err)
	}
	n = soloNode(t, dir)
	opened, errs := openAll(t, n, nextEpoch(specs))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	t.Logf("%d copies: created in %v, opened at boot in %v", copies, created, opened)
	if r := produceOne(t, n, 100, 1); r.Kind != stream.ReplyProduce || r.Produce.BaseOffset != recordsPerBatch {
		t.Fatalf("produce after reopen answered %+v", r)
	}
	if r := produceOne(t, n, uint64(100+copies-1), 0); r.Kind != stream.ReplyProduce || r.Produce.BaseOffset != 0 {
		t.Fatalf("produce to the last copy answered %+v", r)
	}
}

// TestCopies_DamagedDirectoryReported: a copy whose directory does not open is reported (Status,
// Opened) and left closed, and the other copies serve.
func TestCopies_DamagedDirectoryReported(t *testing.T) {
	dir := t.TempDir()
	specs := []streamhost.Spec{soloSpec(11), soloSpec(12), soloSpec(13)}
	n := soloNode(t, dir)
	if _, errs := openAll(t, n, specs); len(errs) > 0 {
		t.Fatal(errs)
	}
	for i := range 3 {
		if r := produceOne(t, n, 12, uint64(i)); r.Kind != stream.ReplyProduce {
			t.Fatalf("produce answered %+v", r)
		}
	}
	if err := n.node.Stop(); err != nil {
		t.Fatal(err)
	}
	// Stream 12's epochs file loses its magic: its directory no longer opens.
	epochs := filepath.Join(n.host.Dir(12, 1), "epochs")
	if err := os.WriteFile(epochs, []byte("not an epochs file, not at all"), 0o644); err != nil {
		t.Fatal(err)
	}
	n = soloNode(t, dir)
	_, errs := openAll(t, n, nextEpoch(specs))
	if len(errs) != 1 {
		t.Fatalf("open errors %v, want stream 12's alone", errs)
	}
	st := n.host.Status()
	if len(st) != 1 || st[0].Stream != 12 || !errors.Is(st[0].Err, streamhost.ErrDamaged) {
		t.Fatalf("status %+v", st)
	}
	t.Logf("reported: %v", st[0].Err)
	for _, id := range []uint64{11, 13} {
		if r := produceOne(t, n, id, 0); r.Kind != stream.ReplyProduce {
			t.Fatalf("stream %d: produce answered %+v", id, r)
		}
	}
	done := make(chan error, 1)
	if err := n.node.Run(0, func(s *shard.Shard) {
		m := stream.Message{Kind: stream.KindProduce, Client: 1}
		m.Produce = wire.Produce{Stream: 12, Incarnation: 1, Count: 1, Batch: []byte("x")}
		done <- n.host.Step(s, 12, &m)
	}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, streamhost.ErrUnknownStream) {
		t.Fatalf("the damaged copy took a produce: %v", err)
	}
}

// TestCopies_Delete: a deleted copy's directory is gone and its stream is no longer served.
func TestCopies_Delete(t *testing.T) {
	n := soloNode(t, t.TempDir())
	if _, errs := openAll(t, n, []streamhost.Spec{soloSpec(21), soloSpec(22)}); len(errs) > 0 {
		t.Fatal(errs)
	}
	if r := produceOne(t, n, 21, 0); r.Kind != stream.ReplyProduce {
		t.Fatalf("produce answered %+v", r)
	}
	done := make(chan error, 1)
	if err := n.host.Delete(21, func(err error) { done <- err }); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("delete never ended")
	}
	for _, p := range []string{n.host.Dir(21, 1), n.host.Dir(21, 1) + ".deleted"} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s after delete: %v", p, err)
		}
	}
	if _, err := os.Stat(n.host.Dir(22, 1)); err != nil {
		t.Fatalf("the other copy's directory: %v", err)
	}
	if r := produceOne(t, n, 22, 0); r.Kind != stream.ReplyProduce {
		t.Fatalf("produce to the other copy answered %+v", r)
	}
}

// TestCopies_RetentionByBytes: a copy over its byte limit drops its oldest closed segments on the
// ring, at most to its confirmed tail; a fetch below the new head is refused, one above it served.
func TestCopies_RetentionByBytes(t *testing.T) {
	n := soloNode(t, t.TempDir(), func(c *streamhost.Config) {
		c.Segment.SegmentBytes = 64 << 10
		c.RetainEveryTicks = 5
	})
	sp := soloSpec(31)
	sp.RetainBytes = 128 << 10
	if _, errs := openAll(t, n, []streamhost.Spec{sp}); len(errs) > 0 {
		t.Fatal(errs)
	}
	const batches = 100 // 100 x 8 KiB: about 13 segments of 64 KiB
	for i := range batches {
		if r := produceOne(t, n, 31, uint64(i)); r.Kind != stream.ReplyProduce {
			t.Fatalf("produce answered %+v", r)
		}
	}
	// The log keeps at most 128 KiB plus the segment a batch rolled into: 30 batches (246 KiB) back
	// from the tail is below the head once retention caught up.
	for deadline := time.Now().Add(20 * time.Second); ; {
		r := fetchAt(t, n, 31, (batches-30)*recordsPerBatch)
		if r.Kind == stream.ReplyError {
			if string(r.Error.Message) != "offset below the retained head" {
				t.Fatalf("fetch below the head refused with %q", r.Error.Message)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("retention never moved the head past 128 KiB")
		}
		time.Sleep(10 * time.Millisecond) // retention runs every 5 ticks of the shard's clock
	}
	if r := fetchAt(t, n, 31, (batches-1)*recordsPerBatch); r.Kind != stream.ReplyFetch || r.Fetch.Count != recordsPerBatch {
		t.Fatalf("fetch of the last batch answered %+v", r)
	}
}

// fetchAt fetches from stream id at off (no wait) and returns the reply.
func fetchAt(t testing.TB, n *testNode, id uint64, off uint64) stream.Reply {
	t.Helper()
	if err := n.node.Run(shard.ShardOf(id, n.shards), func(s *shard.Shard) {
		m := stream.Message{Kind: stream.KindFetch, Client: 2}
		m.Fetch = wire.Fetch{RequestID: off, Stream: id, Incarnation: 1, Offset: off, BytesMax: 64 << 10}
		if err := n.host.Step(s, id, &m); err != nil {
			t.Error(err)
		}
	}); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-n.sink.fetches:
		return r
	case r := <-n.sink.acks:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("fetch never answered")
	}
	return stream.Reply{}
}

// cursorOp commits (commit true) or reads consumer's cursor on stream id and returns the reply.
func cursorOp(t testing.TB, n *testNode, id uint64, kind stream.Kind, consumer string, off uint64) stream.Reply {
	t.Helper()
	if err := n.node.Run(shard.ShardOf(id, n.shards), func(s *shard.Shard) {
		m := stream.Message{Kind: kind, Client: 3}
		m.Cursor = wire.CursorRequest{RequestID: off, Stream: id, Incarnation: 1, Consumer: []byte(consumer), Offset: off}
		if err := n.host.Step(s, id, &m); err != nil {
			t.Error(err)
		}
	}); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-n.sink.acks:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("cursor request never answered")
	}
	return stream.Reply{}
}

// TestCopies_CursorsSurviveReopen: committed cursors are fed back to the copy when its storage opens
// again, so a reopened owner answers them.
func TestCopies_CursorsSurviveReopen(t *testing.T) {
	dir := t.TempDir()
	n := soloNode(t, dir)
	if _, errs := openAll(t, n, []streamhost.Spec{soloSpec(41)}); len(errs) > 0 {
		t.Fatal(errs)
	}
	for i := range 3 {
		if r := produceOne(t, n, 41, uint64(i)); r.Kind != stream.ReplyProduce {
			t.Fatalf("produce answered %+v", r)
		}
	}
	for _, c := range []struct {
		name string
		off  uint64
	}{{"zed", 8}, {"alpha", 16}, {"zed", 24}} {
		if r := cursorOp(t, n, 41, stream.KindCommitCursor, c.name, c.off); r.Kind != stream.ReplyCommitCursor {
			t.Fatalf("cursor commit answered %+v (%s)", r, r.Error.Message)
		}
	}
	if err := n.node.Stop(); err != nil { // a clean close commits the queued cursor events
		t.Fatal(err)
	}
	n = soloNode(t, dir)
	if _, errs := openAll(t, n, nextEpoch([]streamhost.Spec{soloSpec(41)})); len(errs) > 0 {
		t.Fatal(errs)
	}
	for name, want := range map[string]uint64{"zed": 24, "alpha": 16} {
		r := cursorOp(t, n, 41, stream.KindGetCursor, name, 0)
		if r.Kind != stream.ReplyGetCursor || !r.Cursor.Found || r.Cursor.Offset != want {
			t.Fatalf("cursor %s after reopen: %+v, want %d", name, r.Cursor, want)
		}
	}
}
