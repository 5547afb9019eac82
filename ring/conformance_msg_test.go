package ring

import (
	"errors"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// testMsgRingBetweenRings runs two rings on two locked threads. Each sends the other a message; the
// receiver's MsgHandler sees the tag and result, and each sender sees its MsgRing complete.
func testMsgRingBetweenRings(t *testing.T, newRing newRingFunc) {
	const rounds, window = 200, 8
	a := testRing(t, newRing, 16)
	type peer struct {
		ring Ring
		err  error
	}
	ready := make(chan peer)
	finish := make(chan Ring)
	done := make(chan error)
	go func() {
		runtime.LockOSThread()
		b, err := newRing(16)
		ready <- peer{b, err}
		if err != nil {
			return
		}
		done <- echoMessages(b, <-finish, rounds)
		b.Close()
	}()
	p := <-ready
	if p.err != nil {
		t.Fatal(p.err)
	}
	b := p.ring
	finish <- a
	inbox := &recorder{}
	a.SetMsgHandler(inbox)
	sent := &recorder{}
	for i := 0; i < rounds; i++ {
		// Keep at most window messages unanswered, so no inbox or CQ ever overflows.
		for i-len(inbox.got) >= window {
			if err := a.Wait(1); err != nil {
				t.Fatal(err)
			}
			a.Dispatch()
		}
		for {
			err := a.MsgRing(sent, uint64(i), b, int32(i*3), uint64(1000+i), 0)
			if err == nil {
				break
			}
			if !errors.Is(err, ErrQueueFull) {
				t.Fatal(err)
			}
			a.Wait(1)
			a.Dispatch()
		}
		if err := a.Wait(0); err != nil {
			t.Fatal(err)
		}
		a.Dispatch()
	}
	for len(inbox.got) < rounds || len(sent.got) < rounds {
		if err := a.Wait(1); err != nil {
			t.Fatal(err)
		}
		a.Dispatch()
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for i, c := range sent.got {
		mustOK(t, c)
		if c.Op != OpMsgRing {
			t.Fatalf("sender completion %d: %+v", i, c)
		}
	}
	for i, c := range inbox.got {
		if c.Tag != uint64(2000+i) || c.Res != int32(i*3)+1 {
			t.Fatalf("echo %d: tag %d res %d, want tag %d res %d", i, c.Tag, c.Res, 2000+i, i*3+1)
		}
	}
}

// echoMessages receives rounds messages on b and answers each to a with tag+1000 and res+1.
func echoMessages(b, a Ring, rounds int) error {
	inbox := &recorder{}
	b.SetMsgHandler(inbox)
	sent := &recorder{}
	answered := 0
	for answered < rounds || len(sent.got) < rounds {
		if err := b.Wait(1); err != nil {
			return err
		}
		b.Dispatch()
		for answered < len(inbox.got) {
			c := inbox.got[answered]
			if c.Tag != uint64(1000+answered) {
				return errors.New("echo: message out of order")
			}
			err := b.MsgRing(sent, uint64(answered), a, c.Res+1, c.Tag+1000, 0)
			if errors.Is(err, ErrQueueFull) {
				break
			}
			if err != nil {
				return err
			}
			answered++
		}
	}
	for _, c := range sent.got {
		if err := c.Err(); err != nil {
			return err
		}
	}
	return nil
}

func testMsgRingToClosedRing(t *testing.T, newRing newRingFunc) {
	r := testRing(t, newRing, 8)
	target, err := newRing(8)
	if err != nil {
		t.Fatal(err)
	}
	if err := target.Close(); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	if err := r.MsgRing(rec, 1, target, 0, 1, 0); err != nil {
		t.Fatal(err)
	}
	drive(t, r, rec, 1)
	if err := rec.got[0].Err(); !errors.Is(err, unix.EBADFD) {
		t.Fatalf("post to a closed ring: %v, want EBADFD", err)
	}
}
