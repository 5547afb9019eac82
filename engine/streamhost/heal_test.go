package streamhost_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/engine/stream"
	"github.com/ringstream/ringstream/engine/streamhost"
	"github.com/ringstream/ringstream/ring"
	"github.com/ringstream/ringstream/ring/powerloss"
	"github.com/ringstream/ringstream/segment"
	"github.com/ringstream/ringstream/shard"
	"github.com/ringstream/ringstream/wire"
)

// assignFrame is the frame of assignment a with starts, from node 1's controller.
func assignFrame(a meta.Assignment, starts []wire.HistoryStart) []byte {
	m := wire.StreamAssignment{Stream: testStream, Incarnation: testIncarnation, Epoch: a.Epoch, Owner: a.Owner,
		PolicyKind: uint8(a.Policy.Kind), PolicyCount: a.Policy.Count, FollowerCount: uint8(len(a.Followers))}
	copy(m.Followers[:], a.Followers)
	return wire.AppendStreamAssignment(nil, wire.From{Cluster: 42, Node: 1}, &m, starts)
}

// frameNow carries out frames on n's shard of the test stream in one shard callback, one after the
// other, as frames that arrive in one receive do.
func frameNow(t testing.TB, c *cluster, n *testNode, frames ...[]byte) {
	t.Helper()
	c.run(n.id, func(s *shard.Shard) {
		for _, f := range frames {
			hd, body, err := wire.ParseFrame(f)
			if err != nil {
				t.Error(err)
				return
			}
			n.host.OnUnroutedFrame(s, 1, &hd, body)
		}
	})
}

// tryProduce produces batch seq on n and returns its answer, or Step's refusal.
func tryProduce(t testing.TB, n *testNode, seq uint64) (stream.Reply, error) {
	t.Helper()
	var stepErr error
	done := make(chan struct{})
	if err := n.node.Run(shard.ShardOf(testStream, n.shards), func(s *shard.Shard) {
		defer close(done)
		m := stream.Message{Kind: stream.KindProduce, Client: 1}
		m.Produce = wire.Produce{RequestID: seq, Stream: testStream, Incarnation: testIncarnation, ProducerID: 3,
			Sequence: seq, Count: recordsPerBatch, Batch: recordBatch(seq, nil)}
		stepErr = n.host.Step(s, testStream, &m)
	}); err != nil {
		t.Fatal(err)
	}
	<-done
	if stepErr != nil {
		return stream.Reply{}, stepErr
	}
	select {
	case r := <-n.sink.acks:
		return r, nil
	case <-time.After(30 * time.Second):
		t.Fatalf("node %d: produce %d never answered", n.id, seq)
	}
	return stream.Reply{}, nil
}

// waitFor polls cond (state on other goroutines and nodes; no event to wait on) for up to 30 s.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 30 s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// Issue 22, finding 3: the new owner wedged for good after the old owner returned. Two assignments
// reached a copy back to back; the second one's log epoch found the first one's still being written
// (segment: operation in flight) and carryOut took the refusal for a failed log: every produce was
// then refused with log_failed, and nothing said why. A log epoch refused as busy is queued behind
// the operation running, and the copy serves at the new epoch.
func TestEpoch_RefusedAsBusyIsQueued(t *testing.T) {
	policy := meta.Policy{Kind: meta.PolicyMajorityDurable}
	c := newCluster(t, majority(1, 2, 3))
	n1 := c.nodes[1]
	at := produceConfirmed(t, n1, 0, 4, 0)
	for _, id := range []uint16{2, 3} {
		waitDurable(t, c.nodes[id], at)
	}
	e2 := meta.Assignment{Epoch: 2, Owner: 1, Followers: []uint16{2, 3}, Policy: policy}
	e3 := meta.Assignment{Epoch: 3, Owner: 1, Followers: []uint16{2, 3}, Policy: policy}
	s2 := []wire.HistoryStart{{Epoch: 2, Node: 1, RecordStart: at}}
	s3 := append(s2, wire.HistoryStart{Epoch: 3, Node: 1, RecordStart: at})
	for _, id := range []uint16{2, 3, 1} {
		frameNow(t, c, c.nodes[id], assignFrame(e2, s2), assignFrame(e3, s3))
	}
	var r stream.Reply
	waitFor(t, "the owner at epoch 3", func() bool {
		st := state(t, n1)
		return st.Open && st.Epoch == 3 && st.Role == stream.RoleOwner
	})
	for seq := uint64(4); seq < 8; seq++ {
		for {
			var err error
			if r, err = tryProduce(t, n1, seq); err != nil {
				t.Fatalf("produce %d: %v", seq, err)
			}
			if r.Kind != stream.ReplyError || r.Error.Code != wire.CodeUnavailable {
				break // unavailable: the log epoch is not durable yet
			}
			time.Sleep(time.Millisecond)
		}
		if r.Kind != stream.ReplyProduce || r.Produce.BaseOffset != at {
			t.Fatalf("produce %d at epoch 3 answered %+v (%s), want confirmed at %d", seq, r, r.Error.Message, at)
		}
		at += recordsPerBatch
	}
	queued := uint64(0)
	for _, n := range c.nodes {
		if f := n.host.Status(); len(f) != 0 {
			t.Fatalf("node %d: failures %+v after two assignments in a row", n.id, f)
		}
		if hs := n.host.HealStats(); hs.Failures != [streamhost.CauseCount]uint64{} {
			t.Fatalf("node %d: a busy log taken for a failed one: %+v", n.id, hs)
		}
		var st streamhost.Stats
		c.run(n.id, func(s *shard.Shard) { st = n.host.Stats(s) })
		queued += st.EpochsQueued
	}
	if queued == 0 {
		t.Fatal("no log epoch found another in flight: the test did not race them")
	}
	t.Logf("%d log epochs queued behind the one in flight", queued)
}

// faultyCluster is a 3-copy cluster whose node with a fault model (id) has its data directory on a
// powerloss.Disk, and whose failed copies are reopened after a few ticks.
func faultyCluster(t *testing.T, id uint16) (*cluster, *powerloss.Disk) {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, fmt.Sprint(id))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	disk := powerloss.NewDisk(dir, 1)
	heal := func(cfg *streamhost.Config) { cfg.HealBaseTicks, cfg.HealMaxTicks = 10, 80 }
	c := newClusterOn(t, root, majority(1, 2, 3), nil, map[uint16]func(ring.Ring) ring.Ring{id: disk.Wrap}, heal)
	return c, disk
}

// failureOf is n's Status entry for the test stream.
func failureOf(n *testNode) (streamhost.Failure, bool) {
	for _, f := range n.host.Status() {
		if f.Stream == testStream {
			return f, true
		}
	}
	return streamhost.Failure{}, false
}

// Issue 22, finding 1: a follower whose disk fills up is reported at once (Status with its cause, the
// role it had and that it is retried; the count by cause), the stream confirms on the other two, and
// once the file system has room again the copy reopens through recovery by itself, without a
// restart, and catches up as a returning follower. On 9ab39b2 it stayed "open, follower" with its
// tail frozen, listed nowhere, and every seal sent to it failed again.
func TestHeal_FollowerDiskFullReportedAndHealed(t *testing.T) {
	c, disk := faultyCluster(t, 3)
	n1, n3 := c.nodes[1], c.nodes[3]
	at := produceConfirmed(t, n1, 0, 4, 0)
	waitDurable(t, n3, at)
	// The file system under node 3's streams is full: every write fails until it has room again.
	disk.Inject(powerloss.Fault{Op: ring.OpWrite, Path: "streams", Errno: unix.ENOSPC, Until: true})
	at = produceConfirmed(t, n1, 4, 12, at) // node 1 and 2 confirm
	waitFor(t, "node 3's copy listed as failed", func() bool { _, ok := failureOf(n3); return ok })
	f, _ := failureOf(n3)
	if f.Cause != streamhost.CauseNoSpace || !f.Retrying || f.Role != stream.RoleFollower ||
		!errors.Is(f.Err, unix.ENOSPC) || !errors.Is(f.Err, streamhost.ErrLogFailed) {
		t.Fatalf("failure %+v (%v): want a follower's ENOSPC, retried", f, f.Err)
	}
	if hs := n3.host.HealStats(); hs.Failures[streamhost.CauseNoSpace] == 0 {
		t.Fatalf("heal stats %+v: the failure is not counted by its cause", hs)
	}
	t.Logf("reported: %v", f.Err)
	at = produceConfirmed(t, n1, 12, 16, at)
	disk.Clear()
	waitFor(t, "node 3 healed and caught up", func() bool {
		_, failed := failureOf(n3)
		st := state(t, n3)
		return !failed && st.Open && st.Role == stream.RoleFollower && st.Durable == at
	})
	hs := n3.host.HealStats()
	if hs.Healed == 0 || hs.Attempts == 0 {
		t.Fatalf("heal stats %+v: want a reopen counted and a heal", hs)
	}
	at = produceConfirmed(t, n1, 16, 20, at)
	waitDurable(t, n3, at)
	t.Logf("heal stats %+v", hs)
}

// An owner whose log fails fences itself first: what it appended after the error is never confirmed
// (its produces are refused, log_failed), it leaves the heartbeat schedule (its storage closes), it
// is reported as an owner's failure, and once its disk works again it reopens in its own epoch as a
// restarted owner, refusing everything until a recovery moves the stream on (its heartbeat flag
// asks the controller for one).
func TestHeal_FailedOwnerFencesItselfAndReturnsRestarted(t *testing.T) {
	c, disk := faultyCluster(t, 1)
	n1 := c.nodes[1]
	at := produceConfirmed(t, n1, 0, 4, 0)
	disk.Inject(powerloss.Fault{Op: ring.OpFsync, Path: "streams", Errno: unix.EIO, Until: true})
	r, err := tryProduce(t, n1, 4)
	if err != nil || r.Kind != stream.ReplyError || r.Error.Code != wire.CodeLogFailed {
		t.Fatalf("produce on the owner whose fdatasync fails: %+v (%s) %v, want log_failed", r, r.Error.Message, err)
	}
	waitFor(t, "the owner listed as failed", func() bool { _, ok := failureOf(n1); return ok })
	f, _ := failureOf(n1)
	if f.Cause != streamhost.CauseIO || f.Role != stream.RoleOwner || !f.Retrying {
		t.Fatalf("failure %+v (%v): want an owner's EIO, retried", f, f.Err)
	}
	for _, id := range []uint16{2, 3} {
		if st := state(t, c.nodes[id]); st.Durable > at+recordsPerBatch {
			t.Fatalf("node %d durable at %d", id, st.Durable)
		}
	}
	if r, err := tryProduce(t, n1, 5); err == nil && r.Kind == stream.ReplyProduce {
		t.Fatalf("the failed owner confirmed a produce: %+v", r)
	}
	// An assignment that keeps it owner without a recovery's seal is refused, as a restarted owner
	// refuses one.
	e2 := meta.Assignment{Epoch: 2, Owner: 1, Followers: []uint16{2, 3}, Policy: meta.Policy{Kind: meta.PolicyMajorityDurable}}
	frameNow(t, c, n1, assignFrame(e2, []wire.HistoryStart{{Epoch: 2, Node: 1, RecordStart: at}}))
	var hs streamhost.Stats
	c.run(1, func(s *shard.Shard) { hs = n1.host.Stats(s) })
	if hs.AssignmentsRefused != 1 {
		t.Fatalf("stats %+v: an unsealed assignment keeping the failed owner was not refused", hs)
	}
	disk.Clear()
	waitFor(t, "the owner reopened in its own epoch, flagged restarted", func() bool {
		tails := n1.host.AppendCopyTails(nil)
		return len(tails) == 1 && tails[0].Role == wire.RoleOwner && tails[0].Flags == wire.CopyOwnerRestarted
	})
	if _, failed := failureOf(n1); failed {
		t.Fatal("still listed as failed after its reopen")
	}
	if r, err := tryProduce(t, n1, 6); err != nil || r.Kind != stream.ReplyError || r.Error.Code != wire.CodeUnavailable {
		t.Fatalf("the restarted owner answered %+v %v, want unavailable until a recovery", r, err)
	}
}

// retryCopy is Host.RetryCopy waited for.
func retryCopy(t testing.TB, n *testNode, id uint64) error {
	t.Helper()
	done := make(chan error, 1)
	if err := n.host.RetryCopy(id, func(err error) { done <- err }); err != nil {
		t.Fatal(err)
	}
	return <-done
}

// A copy whose data is corrupt is reported as such and not reopened by itself (it would fail the same
// way); the operator's retry, after a repair, reopens it at once and it serves. A retry of a healthy
// copy, or of no copy, says so.
func TestHeal_CorruptWaitsForOperatorRetry(t *testing.T) {
	dir := t.TempDir()
	specs := []streamhost.Spec{soloSpec(11), soloSpec(12)}
	heal := func(cfg *streamhost.Config) { cfg.HealBaseTicks, cfg.HealMaxTicks = 5, 20 }
	n := soloNode(t, dir, heal)
	if _, errs := openAll(t, n, specs); len(errs) > 0 {
		t.Fatal(errs)
	}
	if r := produceOne(t, n, 12, 0); r.Kind != stream.ReplyProduce {
		t.Fatalf("produce answered %+v", r)
	}
	if err := n.node.Stop(); err != nil {
		t.Fatal(err)
	}
	epochs := filepath.Join(n.host.Dir(12, 1), "epochs")
	good, err := os.ReadFile(epochs)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(epochs, []byte("not an epochs file, not at all"), 0o644); err != nil {
		t.Fatal(err)
	}
	specs = nextEpoch(specs)
	n = soloNode(t, dir, heal)
	if _, errs := openAll(t, n, specs); len(errs) != 1 {
		t.Fatalf("open errors %v, want stream 12's alone", errs)
	}
	f, ok := failureOf12(n)
	if !ok || f.Cause != streamhost.CauseCorrupt || f.Retrying || !errors.Is(f.Err, streamhost.ErrDamaged) {
		t.Fatalf("failure %+v (%v): want corrupt, not retried", f, f.Err)
	}
	time.Sleep(100 * time.Millisecond) // 50 ticks: ten times the first backoff
	if hs := n.host.HealStats(); hs.Attempts != 0 {
		t.Fatalf("heal stats %+v: a corrupt copy was reopened by itself", hs)
	}
	if err := retryCopy(t, n, 11); !errors.Is(err, streamhost.ErrNotFailed) {
		t.Fatalf("retry of a healthy copy: %v, want ErrNotFailed", err)
	}
	if err := retryCopy(t, n, 99); !errors.Is(err, streamhost.ErrUnknownStream) {
		t.Fatalf("retry of no copy: %v, want ErrUnknownStream", err)
	}
	if err := os.WriteFile(epochs, good, 0o644); err != nil { // the operator's repair
		t.Fatal(err)
	}
	if err := retryCopy(t, n, 12); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-n.sink.opened:
		if err != nil {
			t.Fatalf("reopen after the repair: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the retried copy never reopened")
	}
	if _, failed := failureOf12(n); failed {
		t.Fatal("still listed as failed after the retry")
	}
	if r := produceOne(t, n, 12, 1); r.Kind != stream.ReplyProduce || r.Produce.BaseOffset != recordsPerBatch {
		t.Fatalf("produce after the retry answered %+v (%s)", r, r.Error.Message)
	}
}

func failureOf12(n *testNode) (streamhost.Failure, bool) {
	for _, f := range n.host.Status() {
		if f.Stream == 12 {
			return f, true
		}
	}
	return streamhost.Failure{}, false
}

// An assignment that reaches a failed copy waits for its reopen and is applied then (with its cut):
// the follower comes back at the new epoch and catches up with the owner there.
func TestHeal_AssignmentWhileFailedAppliedAfterReopen(t *testing.T) {
	policy := meta.Policy{Kind: meta.PolicyMajorityDurable}
	c, disk := faultyCluster(t, 3)
	n1, n3 := c.nodes[1], c.nodes[3]
	at := produceConfirmed(t, n1, 0, 4, 0)
	waitDurable(t, n3, at)
	disk.Inject(powerloss.Fault{Op: ring.OpFsync, Path: "streams", Errno: unix.EIO, Until: true})
	at = produceConfirmed(t, n1, 4, 8, at)
	waitFor(t, "node 3's copy listed as failed", func() bool { _, ok := failureOf(n3); return ok })
	e2 := meta.Assignment{Epoch: 2, Owner: 1, Followers: []uint16{2, 3}, Policy: policy}
	s2 := []wire.HistoryStart{{Epoch: 2, Node: 1, RecordStart: at}}
	for _, id := range []uint16{1, 2, 3} {
		frameNow(t, c, c.nodes[id], assignFrame(e2, s2))
	}
	waitFor(t, "the owner at epoch 2", func() bool { st := state(t, n1); return st.Epoch == 2 && st.Role == stream.RoleOwner })
	for {
		r, err := tryProduce(t, n1, 8)
		if err != nil {
			t.Fatal(err)
		}
		if r.Kind == stream.ReplyProduce {
			at += recordsPerBatch
			break
		}
		if r.Kind != stream.ReplyError || r.Error.Code != wire.CodeUnavailable {
			t.Fatalf("produce at epoch 2 answered %+v (%s)", r, r.Error.Message)
		}
		time.Sleep(time.Millisecond) // the log epoch is not durable yet
	}
	if st := state(t, n3); st.Open {
		t.Fatalf("node 3 serves %+v while its disk fails", st)
	}
	disk.Clear()
	waitFor(t, "node 3 healed at epoch 2 and caught up", func() bool {
		st := state(t, n3)
		_, failed := failureOf(n3)
		return !failed && st.Open && st.Epoch == 2 && st.Role == stream.RoleFollower && st.Durable == at
	})
}

// A read the disk fails with EIO (a fetch on the owner) refuses that fetch and fails the copy: it is
// reported with cause eio and reopened through recovery, which checks the log's tail again.
func TestHeal_ReadEIOFailsTheCopy(t *testing.T) {
	c, disk := faultyCluster(t, 1)
	n1 := c.nodes[1]
	produceConfirmed(t, n1, 0, 4, 0)
	disk.Inject(powerloss.Fault{Op: ring.OpRead, Path: "streams", Errno: unix.EIO})
	if r := fetchAt(t, n1, testStream, 0); r.Kind != stream.ReplyError || r.Error.Code != wire.CodeInternal {
		t.Fatalf("fetch whose read failed answered %+v (%s), want an internal error", r, r.Error.Message)
	}
	waitFor(t, "the copy listed as failed", func() bool { _, ok := failureOf(n1); return ok })
	if f, _ := failureOf(n1); f.Cause != streamhost.CauseIO || !errors.Is(f.Err, unix.EIO) {
		t.Fatalf("failure %+v (%v): want eio", f, f.Err)
	}
	waitFor(t, "the copy reopened", func() bool { _, failed := failureOf(n1); return !failed && state(t, n1).Open })
}

// A seal whose fence write fails on the disk is not an answer: the copy fails (reported, eio), the
// seal waits queued, and once the copy reopened it seals and answers. On 9ab39b2 the copy stayed open
// and each seal failed again.
func TestHeal_SealOnFailingDiskAnsweredAfterHeal(t *testing.T) {
	c, disk := faultyCluster(t, 3)
	n1, n3 := c.nodes[1], c.nodes[3]
	at := produceConfirmed(t, n1, 0, 4, 0)
	waitDurable(t, n3, at)
	disk.Inject(powerloss.Fault{Op: ring.OpFsync, Path: "streams", Errno: unix.EIO, Until: true})
	m := wire.StreamSeal{Stream: testStream, Incarnation: testIncarnation, FenceEpoch: 2, TransitionID: 1}
	controlFrame(t, n3, wire.AppendStreamSeal(nil, wire.From{Cluster: 42, Node: n3.id}, &m, nil))
	waitFor(t, "node 3's copy listed as failed", func() bool { _, ok := failureOf(n3); return ok })
	if f, _ := failureOf(n3); f.Cause != streamhost.CauseIO {
		t.Fatalf("failure %+v (%v): want eio", f, f.Err)
	}
	select {
	case r := <-n3.sink.sealed:
		t.Fatalf("a seal on the failing disk was answered: %+v", r)
	default:
	}
	disk.Clear()
	select {
	case r := <-n3.sink.sealed:
		if r.Status != wire.SealSealed || r.FenceEpoch != 2 || r.RecordTail != at {
			t.Fatalf("seal after the heal answered %+v, want sealed at 2 with tail %d", r, at)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the queued seal was never answered after the heal")
	}
}

// Busy is not broken for reads either: fetches that find every read slot of the log in use wait for
// a slot instead of being refused as a failed read (before, each got "reading the log failed").
func TestReads_RefusedAsBusyWaitForASlot(t *testing.T) {
	n := soloNode(t, t.TempDir(), func(cfg *streamhost.Config) { cfg.Segment.ReadsMax = 1 })
	if _, errs := openAll(t, n, []streamhost.Spec{soloSpec(11)}); len(errs) > 0 {
		t.Fatal(errs)
	}
	for seq := range uint64(4) {
		if r := produceOne(t, n, 11, seq); r.Kind != stream.ReplyProduce {
			t.Fatalf("produce answered %+v", r)
		}
	}
	const fetches = 8
	if err := n.node.Run(shard.ShardOf(11, n.shards), func(s *shard.Shard) {
		for i := range uint64(fetches) {
			m := stream.Message{Kind: stream.KindFetch, Client: 2}
			m.Fetch = wire.Fetch{RequestID: i, Stream: 11, Incarnation: 1, Offset: (i % 4) * recordsPerBatch, BytesMax: 64 << 10}
			if err := n.host.Step(s, 11, &m); err != nil {
				t.Error(err)
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	for range fetches {
		select {
		case r := <-n.sink.fetches:
			if r.Fetch.Count == 0 || r.Fetch.BaseOffset != (r.Fetch.RequestID%4)*recordsPerBatch {
				t.Fatalf("fetch %d answered %+v", r.Fetch.RequestID, r.Fetch)
			}
		case r := <-n.sink.acks:
			t.Fatalf("fetch %d refused: %+v (%s)", r.Error.RequestID, r.Error, r.Error.Message)
		case <-time.After(10 * time.Second):
			t.Fatal("fetch never answered")
		}
	}
	var hs streamhost.Stats
	done := make(chan struct{})
	if err := n.node.Run(shard.ShardOf(11, n.shards), func(s *shard.Shard) { hs = n.host.Stats(s); close(done) }); err != nil {
		t.Fatal(err)
	}
	<-done
	if hs.ReadsQueued == 0 {
		t.Fatal("no read waited for a slot: the test did not fill the read table")
	}
}

// A batch that changed on the disk under a serving copy (here a payload byte rewritten in the
// segment file) is found by the read that meets it: the fetch is refused at once, and the copy is
// reported failed as corrupt, waiting for the operator, instead of answering empty reads forever.
func TestHeal_CorruptBatchFoundByARead(t *testing.T) {
	n := soloNode(t, t.TempDir())
	if _, errs := openAll(t, n, []streamhost.Spec{soloSpec(12)}); len(errs) > 0 {
		t.Fatal(errs)
	}
	for seq := range uint64(3) {
		if r := produceOne(t, n, 12, seq); r.Kind != stream.ReplyProduce {
			t.Fatalf("produce %d answered %+v", seq, r)
		}
	}
	if r := fetchAt(t, n, 12, 0); r.Kind != stream.ReplyFetch || r.Fetch.Count == 0 {
		t.Fatalf("fetch before the damage answered kind %v (%d records)", r.Kind, r.Fetch.Count)
	}
	files, err := filepath.Glob(filepath.Join(n.host.Dir(12, 1), "records", "*.log"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no record segment in %s (%v)", n.host.Dir(12, 1), err)
	}
	f, err := os.OpenFile(files[0], os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The second batch's payload: past the first batch and the second's header.
	at := int64(2*segment.BatchHeaderSize + recordsPerBatch*recordBytes + 100)
	b := []byte{0}
	if _, err := f.ReadAt(b, at); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b, at); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()

	r := fetchAt(t, n, 12, recordsPerBatch)
	if r.Kind != stream.ReplyError {
		t.Fatalf("fetch of the damaged batch answered kind %v (%d records), want a refusal", r.Kind, r.Fetch.Count)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if f, ok := failureOf12(n); ok {
			if f.Cause != streamhost.CauseCorrupt || f.Retrying {
				t.Fatalf("failure %+v (%v): want corrupt, waiting for the operator", f, f.Err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the copy with a damaged batch is not reported failed")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
