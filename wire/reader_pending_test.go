package wire_test

import (
	"testing"

	"github.com/ringstream/ringstream/wire"
)

// Pending says how many bytes finish the frame under way: 0 until its header is in, then the rest
// of its body, and 0 again once it was handed on.
func TestReaderPending(t *testing.T) {
	frame := wire.BeginFrame(nil, &wire.Header{Cluster: testCluster, Sender: 2, Command: wire.CommandStreamPrepare,
		Group: 5, Incarnation: 1})
	frame = append(frame, make([]byte, 1000)...)
	wire.EndFrame(frame, 0)
	r := wire.NewFrameReader(4096, wire.FrameSizeMax)
	var log frameLog
	feed := func(b []byte) {
		n := copy(r.Free(), b)
		if n != len(b) {
			t.Fatalf("free space %d, want %d", n, len(b))
		}
		if err := r.Commit(n, &log); err != nil {
			t.Fatal(err)
		}
	}
	if r.Pending() != 0 {
		t.Fatalf("pending %d before any byte", r.Pending())
	}
	feed(frame[:100])
	if r.Pending() != 0 {
		t.Fatalf("pending %d with half a header", r.Pending())
	}
	feed(frame[100:400])
	if want := len(frame) - 400; r.Pending() != want {
		t.Fatalf("pending %d, want %d", r.Pending(), want)
	}
	feed(frame[400:])
	if r.Pending() != 0 || len(log.frames) != 1 {
		t.Fatalf("pending %d after the frame, %d frames handed on", r.Pending(), len(log.frames))
	}
}
