package stream_test

import (
	"runtime"
	"testing"

	"github.com/ringstream/ringstream/engine/stream"
	"github.com/ringstream/ringstream/internal/allocs"
	"github.com/ringstream/ringstream/wire"
)

func okMsg(from uint16, tail, base uint64) stream.Message {
	m := stream.Message{Kind: stream.KindPrepareOK, From: from}
	m.PrepareOK = wire.StreamPrepareOK{Stream: testStream, Incarnation: testIncarnation, Epoch: 1,
		Status: wire.PrepareAppended, Log: wire.LogRecords, RecordTail: tail, BaseOffset: base}
	return m
}

// The owner's steady state allocates nothing per produce: append, send to both followers, durable
// report, acks, confirm, reply.
func TestAllocs_OwnerSteadyState(t *testing.T) {
	c, err := stream.New(testConfig(1), assignment(1, 1, 2, 3), nil)
	if err != nil {
		t.Fatal(err)
	}
	c.OpenDone(stream.OpenState{})
	c.Ready()
	c.EpochDone(1, nil)
	for _, f := range []uint16{2, 3} {
		m := okMsg(f, 0, 0)
		c.Step(&m)
	}
	c.Ready()
	prod := stream.Message{Kind: stream.KindProduce, Client: 1}
	prod.Produce = wire.Produce{Stream: testStream, ProducerID: 9, Count: 4, Batch: payload(0, 1024)}
	acks := [2]stream.Message{okMsg(2, 0, 0), okMsg(3, 0, 0)}
	var tail uint64
	step := func() {
		prod.Produce.RequestID++
		c.Step(&prod)
		fx := c.Ready()
		if len(fx.Prepares) != 2 || len(fx.Appends) != 1 {
			t.Fatalf("prepares %d appends %d", len(fx.Prepares), len(fx.Appends))
		}
		prod.Produce.Sequence++
		tail += 4
		c.AppendDone(wire.LogRecords, tail)
		for i := range acks {
			acks[i].PrepareOK.RecordTail, acks[i].PrepareOK.BaseOffset = tail, tail-4
			c.Step(&acks[i])
		}
		if fx := c.Ready(); len(fx.Replies) != 1 {
			t.Fatalf("replies %d", len(fx.Replies))
		}
		c.Tick()
	}
	for range 100 {
		step()
	}
	if got := allocs.In(t, 1000, step); got != 0 {
		t.Fatalf("%d allocations in 1000 produces on the owner, want 0", got)
	}
}

// The follower's steady state allocates nothing per prepare: check, append, durable report, ack.
func TestAllocs_FollowerSteadyState(t *testing.T) {
	c, err := stream.New(testConfig(2), assignment(1, 1, 2), nil)
	if err != nil {
		t.Fatal(err)
	}
	c.OpenDone(stream.OpenState{})
	c.Ready()
	c.EpochDone(1, nil)
	const n = 1200
	msgs := make([]stream.Message, n)
	for i := range msgs {
		b := encode(stream.BatchHeader{BaseOffset: uint64(4 * i), Count: 4, Epoch: 1, ProducerID: 9, Sequence: uint64(i)}, payload(i, 1024))
		prev := uint32(1)
		if i == 0 {
			prev = 0
		}
		msgs[i] = prepareMsg(uint64(4*i), prev, 4, b)
		msgs[i].Prepare.Epoch = 1
	}
	i := 0
	step := func() {
		c.Step(&msgs[i])
		if fx := c.Ready(); len(fx.Appends) != 1 {
			t.Fatalf("prepare %d: appends %d (refusals %v)", i, len(fx.Appends), c.Stats().Refused)
		}
		i++
		c.AppendDone(wire.LogRecords, uint64(4*i))
		if fx := c.Ready(); len(fx.PrepareOKs) != 1 {
			t.Fatalf("acks %d", len(fx.PrepareOKs))
		}
		c.Tick()
	}
	for range 100 {
		step()
	}
	if got := allocs.In(t, 500, step); got != 0 { // 100 + 2 x 500 prepares of the n made
		t.Fatalf("%d allocations in 500 prepares on the follower, want 0", got)
	}
}

// BenchmarkOwnerProduce is the owner's protocol work per produce of one 1 KiB record with two
// followers: append, two prepares, durable report, two acks, confirm, reply (no I/O).
func BenchmarkOwnerProduce(b *testing.B) {
	c, _ := stream.New(testConfig(1), assignment(1, 1, 2, 3), nil)
	c.OpenDone(stream.OpenState{})
	c.Ready()
	c.EpochDone(1, nil)
	for _, f := range []uint16{2, 3} {
		m := okMsg(f, 0, 0)
		c.Step(&m)
	}
	c.Ready()
	prod := stream.Message{Kind: stream.KindProduce, Client: 1}
	prod.Produce = wire.Produce{Stream: testStream, ProducerID: 9, Count: 1, Batch: payload(0, 1024)}
	acks := [2]stream.Message{okMsg(2, 0, 0), okMsg(3, 0, 0)}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		prod.Produce.Sequence = uint64(i)
		c.Step(&prod)
		c.Ready()
		tail := uint64(i + 1)
		c.AppendDone(wire.LogRecords, tail)
		for j := range acks {
			acks[j].PrepareOK.RecordTail = tail
			c.Step(&acks[j])
		}
		c.Ready()
	}
}

// BenchmarkFollowerPrepare is the follower's protocol work per prepare of one 1 KiB record: check
// (decode with checksum), append, durable report, ack (no I/O).
func BenchmarkFollowerPrepare(b *testing.B) {
	c, _ := stream.New(testConfig(2), assignment(1, 1, 2), nil)
	c.OpenDone(stream.OpenState{})
	c.Ready()
	c.EpochDone(1, nil)
	const n = 4096
	msgs := make([]stream.Message, n)
	for i := range msgs {
		prev := uint32(1)
		if i == 0 {
			prev = 0
		}
		msgs[i] = prepareMsg(uint64(i), prev, 1, encode(stream.BatchHeader{BaseOffset: uint64(i), Count: 1, Epoch: 1}, payload(i, 1024)))
		msgs[i].Prepare.Epoch = 1
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if i == n {
			b.StopTimer()
			c, _ = stream.New(testConfig(2), assignment(1, 1, 2), nil)
			c.OpenDone(stream.OpenState{})
			c.Ready()
			c.EpochDone(1, nil)
			i = 0
			b.StartTimer()
		}
		c.Step(&msgs[i])
		c.Ready()
		c.AppendDone(wire.LogRecords, uint64(i+1))
		c.Ready()
	}
}

// TestIdleCopyMemory measures the heap an idle owner copy of a 3-copy stream takes once open (the
// protocol state only; the host's logs and buffers are not in it), over 10,000 copies.
func TestIdleCopyMemory(t *testing.T) {
	const copies = 10000
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	keep := make([]*stream.Copy, copies)
	for i := range keep {
		cfg := testConfig(1)
		cfg.Stream = uint64(i + 1)
		c, err := stream.New(cfg, assignment(1, 1, 2, 3), nil)
		if err != nil {
			t.Fatal(err)
		}
		c.OpenDone(stream.OpenState{})
		c.Ready()
		c.EpochDone(1, nil)
		c.Ready()
		c.Tick()
		c.Ready()
		keep[i] = c
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := (after.HeapAlloc - before.HeapAlloc) / copies
	t.Logf("%d bytes of heap per idle copy", per)
	if per > 8<<10 {
		t.Fatalf("%d bytes per idle copy, want at most 8 KiB of the 64 KiB budget", per)
	}
	runtime.KeepAlive(keep)
}
