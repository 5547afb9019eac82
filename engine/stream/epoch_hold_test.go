package stream_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/ringstream/ringstream/engine/stream"
	"github.com/ringstream/ringstream/wire"
)

// ownerWaitingForEpoch is a one-copy owner at epoch 2 whose log-epoch entry is not durable yet.
func ownerWaitingForEpoch(t *testing.T, tune func(*stream.Config)) *stream.Copy {
	t.Helper()
	cfg := testConfig(1)
	if tune != nil {
		tune(&cfg)
	}
	c, err := stream.New(cfg, assignment(2, 1), nil)
	if err != nil {
		t.Fatal(err)
	}
	c.OpenDone(stream.OpenState{LogEpochs: []wire.LogEpoch{{Epoch: 1}}})
	if fx := c.Ready(); len(fx.Epochs) != 1 {
		t.Fatalf("epoch entries asked %+v", fx.Epochs)
	}
	return c
}

func heldProduceMsg(client, seq uint64, payload []byte) stream.Message {
	m := stream.Message{Kind: stream.KindProduce, Client: client}
	m.Produce = wire.Produce{RequestID: seq, Stream: testStream, Incarnation: testIncarnation, ProducerID: 9,
		Sequence: seq, Count: 1, Batch: payload}
	return m
}

// A produce that reaches a new owner while its epoch entry is being made durable waits for it instead
// of being refused: nothing is appended or answered before, and it is appended, in arrival order,
// from its own copy of the batch, once the entry is durable.
func TestOwner_HoldsProducesUntilItsEpochIsDurable(t *testing.T) {
	c := ownerWaitingForEpoch(t, nil)
	first, second := []byte("first batch"), []byte("second batch")
	for i, p := range [][]byte{first, second} {
		m := heldProduceMsg(uint64(i+1), uint64(i), p)
		c.Step(&m)
	}
	first[0] = 'X' // the receive buffer is reused: the held produce must not see it
	c.CheckInvariants()
	if fx := c.Ready(); len(fx.Replies) != 0 || len(fx.Appends) != 0 {
		t.Fatalf("before the epoch entry: replies %+v, appends %d", fx.Replies, len(fx.Appends))
	}
	c.EpochDone(2, nil)
	c.CheckInvariants()
	fx := c.Ready()
	if len(fx.Replies) != 0 || len(fx.Appends) != 2 {
		t.Fatalf("once durable: replies %+v, appends %d: want the two produces appended", fx.Replies, len(fx.Appends))
	}
	if !bytes.Equal(fx.Appends[0].Payload, []byte("first batch")) || !bytes.Equal(fx.Appends[1].Payload, second) ||
		fx.Appends[0].Header.BaseOffset != 0 || fx.Appends[1].Header.BaseOffset != 1 {
		t.Fatalf("appends %q at %d, %q at %d", fx.Appends[0].Payload, fx.Appends[0].Header.BaseOffset,
			fx.Appends[1].Payload, fx.Appends[1].Header.BaseOffset)
	}
	c.AppendDone(wire.LogRecords, 2)
	if fx := c.Ready(); len(fx.Replies) != 2 || fx.Replies[0].Kind != stream.ReplyProduce || fx.Replies[0].Client != 1 {
		t.Fatalf("replies once durable %+v", fx.Replies)
	}
}

// What is held is bounded (ProducesMax, PendingBytesMax: past them a produce is refused as before),
// and refused with what waits when the copy is sealed, or when the epoch entry fails.
func TestOwner_HeldProducesBoundedAndRefusedWhenTheEpochGoes(t *testing.T) {
	refusals := func(fx *stream.Effects) []wire.ErrorCode {
		var codes []wire.ErrorCode
		for _, r := range fx.Replies {
			if r.Kind == stream.ReplyError {
				codes = append(codes, r.Error.Code)
			}
		}
		return codes
	}
	c := ownerWaitingForEpoch(t, func(cfg *stream.Config) { cfg.ProducesMax = 2 })
	for i := range 3 {
		m := heldProduceMsg(uint64(i+1), uint64(i), []byte("batch"))
		c.Step(&m)
	}
	if got := refusals(c.Ready()); len(got) != 1 || got[0] != wire.CodeUnavailable {
		t.Fatalf("refusals past ProducesMax %v, want one unavailable", got)
	}
	c.Sealed(3)
	c.CheckInvariants()
	if got := refusals(c.Ready()); len(got) != 2 || got[0] != wire.CodeFenced || got[1] != wire.CodeFenced {
		t.Fatalf("held produces when sealed: %v, want two fenced", got)
	}

	c = ownerWaitingForEpoch(t, func(cfg *stream.Config) { cfg.BatchBytesMax, cfg.PendingBytesMax = 40, 120 })
	for i, size := range []int{40, 40, 40, 40} {
		m := heldProduceMsg(uint64(i+1), uint64(i), make([]byte, size))
		c.Step(&m)
	}
	if got := refusals(c.Ready()); len(got) != 1 || got[0] != wire.CodeUnavailable {
		t.Fatalf("refusals past PendingBytesMax %v, want one unavailable", got)
	}
	c.EpochDone(2, errors.New("epoch entry write failed"))
	c.CheckInvariants()
	if got := refusals(c.Ready()); len(got) != 3 || got[0] != wire.CodeLogFailed || got[2] != wire.CodeLogFailed {
		t.Fatalf("held produces when the epoch entry failed: %v, want three log failed", got)
	}

	// Only a produce whose one refusal is the epoch entry waits: one for a newer incarnation is
	// refused at once, and so is one that reaches a follower waiting for its own entry.
	c = ownerWaitingForEpoch(t, nil)
	m := heldProduceMsg(1, 0, []byte("batch"))
	m.Produce.Incarnation = testIncarnation + 1
	c.Step(&m)
	c.CheckInvariants()
	if got := refusals(c.Ready()); len(got) != 1 || got[0] != wire.CodeUnknownStream {
		t.Fatalf("a produce for a newer incarnation while waiting: %v, want unknown stream", got)
	}
	f, err := stream.New(testConfig(2), assignment(2, 1, 2), nil)
	if err != nil {
		t.Fatal(err)
	}
	f.OpenDone(stream.OpenState{LogEpochs: []wire.LogEpoch{{Epoch: 1}}})
	f.Ready()
	m = heldProduceMsg(1, 0, []byte("batch"))
	f.Step(&m)
	f.CheckInvariants()
	if got := refusals(f.Ready()); len(got) != 1 || got[0] != wire.CodeNotOwner {
		t.Fatalf("a produce to a follower waiting for its epoch entry: %v, want not owner", got)
	}
}
