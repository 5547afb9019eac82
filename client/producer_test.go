package client

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/ringstream/ringstream/wire"
)

// heldProduce is one produce a holdingOwner received: it is answered (confirmed) when release is
// closed.
type heldProduce struct {
	seq     uint64
	count   uint32
	release chan struct{}
}

// holdingOwner is a fake owner of stream 7 that hands every produce it receives to the test on seen,
// in arrival order, and confirms each only when the test releases it: the test decides when a batch
// is in flight, and sees each batch the producer sends, without a clock.
type holdingOwner struct {
	n    *fakeNode
	seen chan heldProduce
}

func startHoldingOwner(t *testing.T) *holdingOwner {
	t.Helper()
	o := &holdingOwner{n: startFake(t, 1, nil), seen: make(chan heldProduce, 64)}
	o.n.raw = o.serve
	return o
}

func (o *holdingOwner) serve(c net.Conn) {
	var wmu sync.Mutex
	write := func(b []byte) {
		wmu.Lock()
		defer wmu.Unlock()
		_, _ = c.Write(b)
	}
	for {
		h, body, err := readFrame(c)
		if err != nil {
			return
		}
		switch h.Command {
		case wire.CommandLookupStream:
			write(o.n.lookupReply(&h, 1, o.n.addr))
		case wire.CommandProduce:
			m, err := wire.DecodeProduce(&h, body)
			if err != nil {
				write(o.n.refuse(&h, wire.CodeInvalidRequest, err.Error()))
				continue
			}
			hp := heldProduce{seq: m.Sequence, count: m.Count, release: make(chan struct{})}
			reply := wire.AppendProduceReply(nil, o.n.from(), &wire.ProduceReply{RequestID: m.RequestID, Stream: 7,
				Incarnation: 1, Epoch: 1, Count: m.Count, BaseOffset: 1000 * m.Sequence})
			o.seen <- hp
			go func() {
				select {
				case <-hp.release:
					write(reply)
				case <-o.n.quit:
				}
			}()
		default:
			write(o.n.refuse(&h, wire.CodeInvalidRequest, "holding owner: unexpected "+h.Command.String()))
		}
	}
}

// next returns the next produce the owner received, failing the test if none comes before its
// context ends.
func (o *holdingOwner) next(t *testing.T) heldProduce {
	t.Helper()
	select {
	case hp := <-o.seen:
		return hp
	case <-testCtx(t).Done():
		t.Fatal("no produce reached the owner")
		return heldProduce{}
	}
}

// releaseAll confirms every produce received from now on, at once (for the end of a test).
func (o *holdingOwner) releaseAll() {
	go func() {
		for {
			select {
			case hp := <-o.seen:
				close(hp.release)
			case <-o.n.quit:
				return
			}
		}
	}()
}

// confirmsOf collects a producer's confirms on a channel.
func confirmsOf(cfg *ProducerConfig) <-chan Confirmed {
	ch := make(chan Confirmed, 64)
	cfg.OnConfirm = func(c Confirmed) { ch <- c }
	return ch
}

func nextConfirm(t *testing.T, ch <-chan Confirmed) Confirmed {
	t.Helper()
	select {
	case c := <-ch:
		return c
	case <-testCtx(t).Done():
		t.Fatal("no confirm")
		return Confirmed{}
	}
}

// A record appended with nothing in flight is sent at once, though the linger is an hour and the
// batch is far from full: the owner sees it and confirms it long before any linger could end.
func TestLoneRecordIsSentWithoutLinger(t *testing.T) {
	for _, inFlight := range []int{1, 4} {
		t.Run(fmt.Sprintf("inflight%d", inFlight), func(t *testing.T) {
			o := startHoldingOwner(t)
			c := dialTest(t, testConfig(o.n.addr))
			cfg := ProducerConfig{Stream: "orders", Linger: time.Hour, InFlight: inFlight}
			confirms := confirmsOf(&cfg)
			p, err := c.Producer(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close(testCtx(t))
			defer o.releaseAll()
			if err := p.Append(testCtx(t), []byte("alone")); err != nil {
				t.Fatal(err)
			}
			hp := o.next(t)
			if hp.count != 1 || hp.seq != 1 {
				t.Fatalf("owner got sequence %d of %d records, want sequence 1 of 1", hp.seq, hp.count)
			}
			close(hp.release)
			if cf := nextConfirm(t, confirms); cf.Count != 1 || cf.Sequence != 1 {
				t.Fatalf("confirm %+v, want sequence 1 of 1 record", cf)
			}
		})
	}
}

// With a batch in flight and room for more (InFlight 4), records wait for the linger or for the batch
// to be full: a batch goes out as soon as it holds BatchRecords records though the one before is
// still held; a record appended while a batch is in flight is not taken while one still is (the
// sender's state read at the next confirm, on its own goroutine, so no clock decides it); and once
// the window is empty it goes out at once, alone, though its linger is an hour.
func TestRecordWhileInFlightWaitsForFullnessOrIdle(t *testing.T) {
	o := startHoldingOwner(t)
	c := dialTest(t, testConfig(o.n.addr))
	ctx := testCtx(t)
	var p *Producer
	takenAtSecond := make(chan uint64, 1)
	cfg := ProducerConfig{Stream: "orders", Linger: time.Hour, InFlight: 4, BatchRecords: 3,
		OnConfirm: func(cf Confirmed) {
			switch cf.Sequence {
			case 1: // the second batch is still in flight when "b" is appended
				if err := p.Append(ctx, []byte("b")); err != nil {
					t.Error(err)
				}
			case 2:
				p.mu.Lock()
				takenAtSecond <- p.taken
				p.mu.Unlock()
			}
		}}
	p, err := c.Producer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(testCtx(t))
	defer o.releaseAll()
	if err := p.Append(ctx, []byte("a")); err != nil {
		t.Fatal(err)
	}
	first := o.next(t)
	for _, r := range []string{"x", "y", "z"} {
		if err := p.Append(ctx, []byte(r)); err != nil {
			t.Fatal(err)
		}
	}
	second := o.next(t) // full at "z", while the first is held
	if first.count != 1 || second.count != 3 || second.seq != 2 {
		t.Fatalf("owner got batches of %d then %d records (sequence %d), want 1 then a full batch of 3 (sequence 2)",
			first.count, second.count, second.seq)
	}
	close(first.release)
	close(second.release)
	var taken uint64
	select {
	case taken = <-takenAtSecond:
	case <-ctx.Done():
		t.Fatal("the second batch was never confirmed")
	}
	if taken != 4 {
		t.Fatalf("%d records taken into batches when the second was confirmed, want 4: \"b\" went out alone "+
			"while a batch was in flight", taken)
	}
	third := o.next(t) // the window emptied: "b" goes out without its linger
	if third.count != 1 || third.seq != 3 {
		t.Fatalf("owner got sequence %d of %d records, want sequence 3 of 1", third.seq, third.count)
	}
	close(third.release)
}

// With InFlight 1 the records appended while a batch is in flight gather into the next batch, which
// goes out at the first one's confirm, not at the end of a linger.
func TestRecordsGatherWhileOneBatchIsInFlight(t *testing.T) {
	o := startHoldingOwner(t)
	c := dialTest(t, testConfig(o.n.addr))
	p, err := c.Producer(ProducerConfig{Stream: "orders", Linger: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(testCtx(t))
	defer o.releaseAll()
	ctx := testCtx(t)
	appendAll := func(recs ...string) {
		t.Helper()
		for _, r := range recs {
			if err := p.Append(ctx, []byte(r)); err != nil {
				t.Fatal(err)
			}
		}
	}
	appendAll("a")
	first := o.next(t)  // "a" went out alone
	appendAll("b", "c") // they wait behind it
	close(first.release)
	second := o.next(t)
	close(second.release)
	if first.count != 1 || second.count != 2 || second.seq != 2 {
		t.Fatalf("owner got batches of %d then %d records (sequence %d), want 1 then 2 (sequence 2)",
			first.count, second.count, second.seq)
	}
}

// BatchRecords below 0 is refused.
func TestBatchRecordsChecked(t *testing.T) {
	o := startHoldingOwner(t)
	c := dialTest(t, testConfig(o.n.addr))
	if _, err := c.Producer(ProducerConfig{Stream: "orders", BatchRecords: -1}); err == nil {
		t.Fatal("BatchRecords -1 accepted")
	}
}

// OnTrace hears each confirmed batch, before its OnConfirm, with its producer id, sequence and count
// and the client's marks in path order: appended, taken, write started, reply read, woken; the reply
// is read only after the owner was let answer, so it cannot be marked before the owner saw the batch.
func TestOnTraceMarksEachBatchInOrder(t *testing.T) {
	for _, inFlight := range []int{1, 4} {
		t.Run(fmt.Sprintf("inflight%d", inFlight), func(t *testing.T) {
			o := startHoldingOwner(t)
			c := dialTest(t, testConfig(o.n.addr))
			traces := make(chan BatchTrace, 4)
			cfg := ProducerConfig{Stream: "orders", InFlight: inFlight, ProducerID: 77,
				OnTrace: func(bt BatchTrace) { traces <- bt }}
			confirms := confirmsOf(&cfg)
			p, err := c.Producer(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close(testCtx(t))
			defer o.releaseAll()
			before := time.Now()
			if err := p.Append(testCtx(t), []byte("one")); err != nil {
				t.Fatal(err)
			}
			hp := o.next(t)
			released := time.Now()
			close(hp.release)
			cf := nextConfirm(t, confirms)
			var bt BatchTrace
			select {
			case bt = <-traces:
			default:
				t.Fatal("no trace by the batch's confirm")
			}
			if bt.ProducerID != 77 || bt.Sequence != cf.Sequence || bt.Count != 1 {
				t.Fatalf("trace %+v of confirm %+v", bt, cf)
			}
			marks := []time.Time{before, bt.Appended, bt.Taken, bt.Sent, released, bt.ReplyRead, bt.Woken}
			for i := 1; i < len(marks); i++ {
				if marks[i].Before(marks[i-1]) {
					t.Fatalf("mark %d (%v) before mark %d (%v): trace %+v", i, marks[i], i-1, marks[i-1], bt)
				}
			}
		})
	}
}

// A Flush sleeps once per batch it waits for: it is woken when a batch is confirmed, not also when
// the batch is taken for sending (each wakeup is a goroutine handoff, issue 26). On a busy machine the
// sender may take a batch before all 16 records are in, so sleeps are counted against confirms.
func TestFlushWakesOncePerBatch(t *testing.T) {
	n, _ := ownerCluster(t)
	c := dialTest(t, testConfig(n.addr))
	var confirms int
	p, err := c.Producer(ProducerConfig{Stream: "orders", BatchBytes: BatchBytesFor(16, 1024), BatchRecords: 16,
		OnConfirm: func(Confirmed) { confirms++ }}) // called on the sender goroutine only
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rec := make([]byte, 1024)
	const batches = 200
	for range batches {
		for range 16 {
			if err := p.Append(ctx, rec); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	waits := p.confWaits
	p.mu.Unlock()
	if waits > confirms {
		t.Fatalf("Flush slept %d times for %d confirms (%d batches of 16 flushed), want at most one sleep a confirm",
			waits, confirms, batches)
	}
}
