package ring

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"
)

// TestIOUringCQOverflowFlushed sends more messages into a ring than its CQ holds, without the target
// reaping in between. The kernel keeps the extra CQEs aside and flags the overflow; Dispatch must
// flush them and deliver every message, in order, exactly once.
func TestIOUringCQOverflowFlushed(t *testing.T) {
	lockThread(t)
	sender := iouringOrSkip(t, 64)
	target := iouringOrSkip(t, 2) // CQ of 4 entries
	inbox := &recorder{}
	target.SetMsgHandler(inbox)
	const msgs = 40
	sent := &countHandler{}
	for i := 0; i < msgs; i++ {
		if err := sender.MsgRing(sent, uint64(i), target, int32(i), uint64(i), 0); err != nil {
			t.Fatal(err)
		}
	}
	driveCount(t, sender, sent, msgs)
	if sent.failed != 0 {
		t.Fatalf("%d posts failed", sent.failed)
	}
	for len(inbox.got) < msgs {
		if err := target.Wait(0); err != nil {
			t.Fatal(err)
		}
		if target.Dispatch() == 0 {
			t.Fatalf("dispatch found nothing with %d of %d messages delivered", len(inbox.got), msgs)
		}
	}
	for i, c := range inbox.got {
		if c.Tag != uint64(i) || c.Res != int32(i) || c.Op != OpMsgRing {
			t.Fatalf("message %d: %+v", i, c)
		}
	}
	if target.CQOverflows() == 0 {
		t.Fatalf("the CQ never overflowed: the test did not test the flush")
	}
}

// TestFallbackInboxFullIsEOVERFLOW: a fallback inbox holds as many messages as the target has slots;
// one more completes the sender's MsgRing with EOVERFLOW and loses nothing already posted.
func TestFallbackInboxFullIsEOVERFLOW(t *testing.T) {
	lockThread(t)
	sender := testRing(t, newFallbackRing, 64)
	target := testRing(t, newFallbackRing, 2) // inbox of 4
	inbox := &recorder{}
	target.SetMsgHandler(inbox)
	rec := &recorder{}
	for i := 0; i < 5; i++ {
		if err := sender.MsgRing(rec, uint64(i), target, 0, uint64(i), 0); err != nil {
			t.Fatal(err)
		}
	}
	drive(t, sender, rec, 5)
	for i := 0; i < 4; i++ {
		mustOK(t, rec.got[i])
	}
	if err := rec.got[4].Err(); !errors.Is(err, unix.EOVERFLOW) {
		t.Fatalf("post into a full inbox: %v, want EOVERFLOW", err)
	}
	target.Dispatch()
	if len(inbox.got) != 4 {
		t.Fatalf("target got %d messages, want 4", len(inbox.got))
	}
}

// TestMsgRingAcrossBackendsUnsupported: a ring can only post to a ring of its own backend.
func TestMsgRingAcrossBackendsUnsupported(t *testing.T) {
	lockThread(t)
	fb := testRing(t, newFallbackRing, 8)
	ur := iouringOrSkip(t, 8)
	if err := fb.MsgRing(&recorder{}, 1, ur, 0, 1, 0); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("fallback to io_uring: %v, want ErrUnsupported", err)
	}
	if err := ur.MsgRing(&recorder{}, 1, fb, 0, 1, 0); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("io_uring to fallback: %v, want ErrUnsupported", err)
	}
}
