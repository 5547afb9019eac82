package stream_test

import (
	"testing"

	"github.com/ringstream/ringstream/engine/stream"
	"github.com/ringstream/ringstream/wire"
)

// probeOf is the empty prepare a new owner at epoch sends to ask where a follower's log agrees.
func probeOf(from uint16, epoch uint32, base uint64, prev uint32) stream.Message {
	m := stream.Message{Kind: stream.KindPrepare, From: from}
	m.Prepare = wire.StreamPrepare{Stream: testStream, Incarnation: testIncarnation, Epoch: epoch, PrevEpoch: prev,
		Log: wire.LogRecords, BaseOffset: base}
	return m
}

// answers are the record-log answers of fx to node to.
func answers(fx *stream.Effects, to uint16) []wire.StreamPrepareOK {
	var out []wire.StreamPrepareOK
	for _, ok := range fx.PrepareOKs {
		if ok.To == to && ok.Msg.Log == wire.LogRecords {
			out = append(out, ok.Msg)
		}
	}
	return out
}

// A new owner probes its followers as soon as its own log-epoch entry is durable, which races with
// theirs. A follower whose entry is not durable yet ignores the probe, and answers it the moment the
// entry is: the owner does not wait ResendTicks to probe again before its first confirm.
func TestFollower_AnswersTheProbeItIgnoredOnceItsEpochIsDurable(t *testing.T) {
	c, err := stream.New(testConfig(2), assignment(2, 1, 2, 3), nil)
	if err != nil {
		t.Fatal(err)
	}
	c.OpenDone(stream.OpenState{LogEpochs: []wire.LogEpoch{{Epoch: 1}}})
	if fx := c.Ready(); len(fx.Epochs) != 1 || fx.Epochs[0].Epoch != 2 {
		t.Fatalf("epoch entries asked %+v, want epoch 2", fx.Epochs)
	}
	probe := probeOf(1, 2, 0, 0)
	c.Step(&probe)
	if got := answers(c.Ready(), 1); len(got) != 0 {
		t.Fatalf("answered %+v before its epoch entry was durable", got)
	}
	if c.Stats().Ignored[stream.IgnoreEpochPending] != 1 {
		t.Fatalf("ignored %v", c.Stats().Ignored)
	}
	c.EpochDone(2, nil)
	got := answers(c.Ready(), 1)
	if len(got) != 1 || got[0].Epoch != 2 || got[0].Status != wire.PrepareAppended || got[0].BaseOffset != 0 {
		t.Fatalf("answers once durable %+v, want one at epoch 2 for the probe at 0", got)
	}
	if got := answers(c.Ready(), 1); len(got) != 0 {
		t.Fatalf("the owed probe answered twice: %+v", got)
	}
}

// A probe of an epoch the follower has not been assigned yet (the new owner's metadata applied
// first) is answered once the follower takes that assignment and its epoch entry is durable; one of
// an epoch that never comes is forgotten when an even newer one is taken.
func TestFollower_AnswersTheProbeOfAnEpochItTakesLater(t *testing.T) {
	f := followerAt(t) // node 2 following node 1 at epoch 2, tail 10
	probe := probeOf(3, 3, 10, 2)
	f.c.Step(&probe)
	f.ready(t)
	if n := len(f.sent); n != 0 {
		t.Fatalf("answered a probe of epoch 3 while at epoch 2: %d frames", n)
	}
	f.reassign(t, assignment(3, 3, 1, 2))
	var found bool
	for _, e := range f.sent {
		found = found || e.to == 3
	}
	if !found {
		t.Fatal("the probe of epoch 3 was not answered once the follower took epoch 3")
	}

	g := followerAt(t)
	stale := probeOf(3, 3, 10, 2)
	g.c.Step(&stale)
	g.ready(t)
	g.reassign(t, assignment(4, 1, 2, 3))
	for _, e := range g.sent {
		if e.to == 3 {
			t.Fatal("a probe of epoch 3 was answered at epoch 4")
		}
	}
}

// What a follower owes is a probe of the record log: a probe that arrives while the copy reopens for
// its epoch is answered, an older epoch's prepare arriving late does not replace a newer one owed,
// and a cursor prepare is never taken for a record probe.
func TestFollower_OwedProbeIsTheNewestEpochsRecordProbe(t *testing.T) {
	f := followerAt(t)
	f.sync(t)
	f.ready(t)
	if err := f.c.Reassign(assignment(3, 3, 1, 2), nil); err != nil {
		t.Fatal(err)
	}
	newer, older := probeOf(3, 3, 10, 2), probeOf(1, 2, 10, 2)
	f.c.Step(&newer) // while the copy reopens
	f.c.Step(&older)
	f.c.OpenDone(stream.OpenState{RecordTail: f.recTail(), CursorTail: f.curTail(), LogEpochs: f.epochs})
	if fx := f.c.Ready(); len(answers(fx, 3)) != 0 || len(fx.Epochs) != 1 {
		t.Fatalf("answers %+v, epoch entries %+v: want none and one", fx.PrepareOKs, fx.Epochs)
	}
	f.c.EpochDone(3, nil)
	if got := answers(f.c.Ready(), 3); len(got) != 1 || got[0].Epoch != 3 || got[0].BaseOffset != 10 {
		t.Fatalf("answers to the owner of epoch 3: %+v, want the probe at 10", got)
	}

	// At epoch 2: a prepare of epoch 4, then a late one of epoch 3, then a second prepare of epoch 4
	// past the first: the first of epoch 4 is what is owed.
	h := followerAt(t)
	first, late, second := probeOf(1, 4, 10, 2), probeOf(3, 3, 9, 2), probeOf(1, 4, 12, 4)
	h.c.Step(&first)
	h.c.Step(&late)
	h.c.Step(&second)
	h.ready(t)
	h.reassign(t, assignment(4, 1, 2, 3))
	var owed []uint64
	for _, e := range h.sent {
		if e.to == 1 {
			hdr, body, err := wire.ParseFrame(e.frame)
			if err != nil || hdr.Command != wire.CommandStreamPrepareOK {
				continue
			}
			if ok, _, err := wire.DecodeStreamPrepareOK(&hdr, body); err == nil && ok.Epoch == 4 {
				owed = append(owed, ok.BaseOffset)
			}
		}
	}
	if len(owed) != 1 || owed[0] != 10 {
		t.Fatalf("answers at epoch 4 for bases %v, want the first prepare's, 10", owed)
	}

	g := followerAt(t)
	cursors := probeOf(3, 3, 0, 0)
	cursors.Prepare.Log = wire.LogCursors
	g.c.Step(&cursors)
	g.reassign(t, assignment(3, 3, 1, 2))
	for _, e := range g.sent {
		if e.to == 3 {
			t.Fatal("a cursor prepare was answered as a record probe")
		}
	}
}

// OwedProbe hands over what it kept once, as a probe (no records), and nothing when it kept nothing.
func TestOwedProbe_TakeOnce(t *testing.T) {
	var o stream.OwedProbe
	if _, ok := o.Take(); ok {
		t.Fatal("an empty OwedProbe handed something over")
	}
	p := prepareMsg(10, 2, 2, batch(10, 2, 2, 30))
	o.Offer(1, &p.Prepare)
	m, ok := o.Take()
	if !ok || m.Kind != stream.KindPrepare || m.From != 1 || m.Prepare.Epoch != 2 || m.Prepare.BaseOffset != 10 ||
		m.Prepare.Count != 0 || len(m.Prepare.Batches) != 0 {
		t.Fatalf("taken %+v, %v: want the prepare at 10 from node 1 without its records", m, ok)
	}
	if _, ok := o.Take(); ok {
		t.Fatal("the kept probe was handed over twice")
	}
}

// An owner whose link to a follower's node came up again probes that follower at once when it owes an
// answer (here the probe of the owner's start), and leaves a follower that owes nothing alone.
func TestOwner_PeerUpProbesAFollowerThatOwesAnAnswer(t *testing.T) {
	c, err := stream.New(testConfig(1), assignment(2, 1, 2, 3), nil)
	if err != nil {
		t.Fatal(err)
	}
	c.OpenDone(stream.OpenState{LogEpochs: []wire.LogEpoch{{Epoch: 1}}})
	c.Ready()
	probes := func(fx *stream.Effects, to uint16) int {
		n := 0
		for _, p := range fx.Prepares {
			if p.To == to && p.Msg.Count == 0 {
				n++
			}
		}
		return n
	}
	c.PeerUp(2) // its epoch entry is not durable yet: nothing goes out before it is
	if fx := c.Ready(); len(fx.Prepares) != 0 {
		t.Fatalf("prepares before the epoch entry: %+v", fx.Prepares)
	}
	c.EpochDone(2, nil)
	if fx := c.Ready(); probes(fx, 2) != 1 || probes(fx, 3) != 1 {
		t.Fatalf("probes at the start: %+v", fx.Prepares)
	}
	ok := okMsg(3, 0, 0)
	ok.PrepareOK.Epoch = 2
	c.Step(&ok) // node 3 answered the probe at 0: it owes nothing
	c.Ready()
	c.PeerUp(3)
	c.PeerUp(2)
	fx := c.Ready()
	if probes(fx, 2) != 1 || probes(fx, 3) != 0 {
		t.Fatalf("probes after the links came up: to 2 %d, to 3 %d; want 1 and 0", probes(fx, 2), probes(fx, 3))
	}
	if c.Stats().Resets != 1 {
		t.Fatalf("resets %d, want 1", c.Stats().Resets)
	}
	// Node 3 is live: a produce goes to it at once. Its link comes up again before it answered: it is
	// probed from what it acknowledged, not past the prepare that was lost.
	m := heldProduceMsg(1, 0, []byte("batch"))
	c.Step(&m)
	c.Ready()
	c.PeerUp(3)
	fx = c.Ready()
	if probes(fx, 3) != 1 {
		t.Fatalf("no probe to node 3 with a prepare unanswered: %+v", fx.Prepares)
	}
	for _, p := range fx.Prepares {
		if p.To == 3 && p.Msg.BaseOffset != 0 {
			t.Fatalf("probe to node 3 at %d, want at its acknowledged tail 0", p.Msg.BaseOffset)
		}
	}
}

// An owner that reopened in its own epoch (it waits for a new assignment), one whose log failed and
// one sealed at a newer epoch probe nobody when a link comes up.
func TestOwner_PeerUpProbesNothingRestartedOrFailed(t *testing.T) {
	restarted, err := stream.New(testConfig(1), assignment(1, 1, 2, 3), nil)
	if err != nil {
		t.Fatal(err)
	}
	restarted.OpenDone(stream.OpenState{LogEpochs: []wire.LogEpoch{{Epoch: 1}}})
	restarted.Ready()
	if !restarted.Restarted() {
		t.Fatal("an owner reopened in its own epoch is not restarted")
	}
	failed, err := stream.New(testConfig(1), assignment(2, 1, 2, 3), nil)
	if err != nil {
		t.Fatal(err)
	}
	failed.OpenDone(stream.OpenState{LogEpochs: []wire.LogEpoch{{Epoch: 1}}})
	failed.EpochDone(2, nil)
	failed.Ready()
	failed.LogFailed(wire.LogRecords)
	failed.Ready()
	sealed, err := stream.New(testConfig(1), assignment(2, 1, 2, 3), nil)
	if err != nil {
		t.Fatal(err)
	}
	sealed.OpenDone(stream.OpenState{LogEpochs: []wire.LogEpoch{{Epoch: 1}}})
	sealed.EpochDone(2, nil)
	sealed.Ready()
	sealed.Sealed(3)
	sealed.Ready()
	for name, c := range map[string]*stream.Copy{"restarted": restarted, "failed": failed, "sealed": sealed} {
		c.PeerUp(2)
		if fx := c.Ready(); len(fx.Prepares) != 0 {
			t.Fatalf("%s owner probed on a link up: %+v", name, fx.Prepares)
		}
	}
}

// A follower's answer sent while its link to the owner was down is lost (links are one per
// direction: the owner's link up lets its probe in, the follower's may still be connecting). When
// the follower's link to its owner comes up it sends its last answer of the epoch again, once; a
// link to another node, or an answer of an older epoch, sends nothing.
func TestFollower_PeerUpSendsTheLastAnswerToTheOwnerAgain(t *testing.T) {
	c, err := stream.New(testConfig(2), assignment(2, 1, 2, 3), nil)
	if err != nil {
		t.Fatal(err)
	}
	c.OpenDone(stream.OpenState{LogEpochs: []wire.LogEpoch{{Epoch: 1}}})
	c.Ready()
	c.EpochDone(2, nil)
	c.Ready()
	c.PeerUp(1)
	if got := answers(c.Ready(), 1); len(got) != 0 {
		t.Fatalf("sent %+v before answering anything", got)
	}
	probe := probeOf(1, 2, 0, 0)
	c.Step(&probe)
	first := answers(c.Ready(), 1)
	if len(first) != 1 {
		t.Fatalf("answers to the probe %+v, want one", first)
	}
	c.PeerUp(3)
	if got := answers(c.Ready(), 3); len(got) != 0 {
		t.Fatalf("sent %+v to node 3, which is not the owner", got)
	}
	c.PeerUp(1)
	again := answers(c.Ready(), 1)
	if len(again) != 1 || again[0] != first[0] {
		t.Fatalf("after the link to the owner came up: %+v, want the last answer %+v again", again, first[0])
	}
	if c.Stats().Resent != 1 {
		t.Fatalf("resent %d, want 1", c.Stats().Resent)
	}
	c.Reassign(assignment(3, 3, 1, 2), nil)
	c.Ready()
	c.PeerUp(3)
	if got := answers(c.Ready(), 3); len(got) != 0 {
		t.Fatalf("the answer of epoch 2 was sent to the owner of epoch 3: %+v", got)
	}
}
