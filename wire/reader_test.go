package wire_test

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"testing"

	"github.com/ringstream/ringstream/wire"
)

// frameLog records the frames a reader hands on, copying them (they alias the reader's buffer).
type frameLog struct {
	frames  [][]byte
	dropped []error
	stopAt  int // return errStop on this frame number (1-based); 0: never
	stallAt int // return ErrStall once when this frame number (1-based) arrives; 0: never
}

func (l *frameLog) DropFrame(h wire.Header, err error) { l.dropped = append(l.dropped, err) }

var errStop = errors.New("handler stops")

func (l *frameLog) HandleFrame(h wire.Header, body []byte, frame []byte) error {
	if len(frame) != wire.HeaderSize+len(body) || int(h.BodySize) != len(body) || !bytes.Equal(frame[wire.HeaderSize:], body) {
		panic("frame and body disagree")
	}
	if len(l.frames)+1 == l.stallAt {
		l.stallAt = 0
		return wire.ErrStall
	}
	l.frames = append(l.frames, bytes.Clone(frame))
	if len(l.frames) == l.stopAt {
		return errStop
	}
	return nil
}

// testStream returns a byte stream of several frames of different sizes and the frames themselves.
func testStream() ([]byte, [][]byte) {
	var frames [][]byte
	for _, c := range commandCases() {
		frames = append(frames, c.encode(nil))
	}
	frames = append(frames, wire.AppendCommitBatch(nil, testCluster, 2, commitEntries(40)))
	frames = append(frames, wire.AppendCommitBatch(nil, testCluster, 2, nil))
	return bytes.Join(frames, nil), frames
}

func sameFrames(t *testing.T, got, want [][]byte) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d frames, want %d", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("frame %d differs", i)
		}
	}
}

func TestReaderSeveralFramesInOneRead(t *testing.T) {
	stream, want := testStream()
	r := wire.NewFrameReader(len(stream)+1, wire.FrameSizeMax)
	var l frameLog
	if _, err := r.Write(stream, &l); err != nil {
		t.Fatal(err)
	}
	sameFrames(t, l.frames, want)
	if r.Buffered() != 0 {
		t.Fatalf("%d bytes left", r.Buffered())
	}
}

// TestReaderSplitAtEveryByte splits the stream into two reads at every byte position.
func TestReaderSplitAtEveryByte(t *testing.T) {
	stream, want := testStream()
	r := wire.NewFrameReader(4096, wire.FrameSizeMax)
	for i := 0; i <= len(stream); i++ {
		var l frameLog
		if _, err := r.Write(stream[:i], &l); err != nil {
			t.Fatalf("split %d: %v", i, err)
		}
		if _, err := r.Write(stream[i:], &l); err != nil {
			t.Fatalf("split %d: %v", i, err)
		}
		sameFrames(t, l.frames, want)
		if r.Buffered() != 0 {
			t.Fatalf("split %d: %d bytes left", i, r.Buffered())
		}
	}
}

// TestReaderOneByteAtATime feeds a small buffer one byte per read.
func TestReaderOneByteAtATime(t *testing.T) {
	stream, want := testStream()
	r := wire.NewFrameReader(wire.HeaderSize, wire.FrameSizeMax)
	var l frameLog
	for i := range stream {
		f := r.Free()
		f[0] = stream[i]
		if err := r.Commit(1, &l); err != nil {
			t.Fatalf("byte %d: %v", i, err)
		}
	}
	sameFrames(t, l.frames, want)
}

// TestReaderZeroCopy: a frame received whole into Free's slice is handed on from that memory.
func TestReaderZeroCopy(t *testing.T) {
	frame := wire.AppendCommitBatch(nil, testCluster, 2, commitEntries(3))
	r := wire.NewFrameReader(4096, wire.FrameSizeMax)
	free := r.Free()
	n := copy(free, frame)
	var at *byte
	err := r.Commit(n, handlerFunc(func(h wire.Header, body, f []byte) error {
		at = &f[0]
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	if at != &free[0] {
		t.Fatal("frame was copied")
	}
}

type handlerFunc func(h wire.Header, body, frame []byte) error

func (f handlerFunc) HandleFrame(h wire.Header, body, frame []byte) error { return f(h, body, frame) }
func (f handlerFunc) DropFrame(wire.Header, error)                        {}

// TestReaderLargeFrameGrowsBuffer: a frame larger than the buffer still arrives, split over many reads.
func TestReaderLargeFrameGrowsBuffer(t *testing.T) {
	big := wire.AppendStreamPrepare(nil, fromNode, &wire.StreamPrepare{Stream: 1, Epoch: 1, Log: wire.LogRecords,
		Count: 1, Batches: bytes.Repeat([]byte{0xA5}, 100_000)})
	small := wire.AppendCommitBatch(nil, testCluster, 2, commitEntries(2))
	stream := bytes.Join([][]byte{small, big, small, big}, nil)
	r := wire.NewFrameReader(1024, 1<<20)
	var l frameLog
	for off := 0; off < len(stream); off += 700 {
		if _, err := r.Write(stream[off:min(off+700, len(stream))], &l); err != nil {
			t.Fatal(err)
		}
	}
	sameFrames(t, l.frames, [][]byte{small, big, small, big})
}

func TestReaderRefusesBadStreams(t *testing.T) {
	good := wire.AppendCommitBatch(nil, testCluster, 2, commitEntries(2))
	cases := []struct {
		name  string
		bytes func() []byte
		limit int
		want  error
	}{
		{"corrupt header", func() []byte { b := bytes.Clone(good); b[20] ^= 1; return b }, wire.FrameSizeMax, wire.ErrChecksum},
		{"past the reader's limit", func() []byte { return good }, wire.HeaderSize + 10, wire.ErrFrameTooLarge},
		{"garbage", func() []byte { return bytes.Repeat([]byte("GET / HTTP/1.1\r\n"), 20) }, wire.FrameSizeMax, wire.ErrChecksum},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := wire.NewFrameReader(4096, c.limit)
			var l frameLog
			stream := append(bytes.Clone(good), c.bytes()...)
			if c.want == wire.ErrFrameTooLarge {
				stream = c.bytes()
			}
			_, err := r.Write(stream, &l)
			if !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
			if _, err2 := r.Write(good, &l); !errors.Is(err2, c.want) {
				t.Fatalf("error not sticky: %v", err2)
			}
			if r.Free() != nil {
				t.Fatal("Free after an error")
			}
		})
	}
}

func TestReaderHandlerErrorStops(t *testing.T) {
	stream, _ := testStream()
	r := wire.NewFrameReader(len(stream), wire.FrameSizeMax)
	l := frameLog{stopAt: 2}
	if _, err := r.Write(stream, &l); !errors.Is(err, errStop) {
		t.Fatalf("got %v", err)
	}
	if len(l.frames) != 2 {
		t.Fatalf("handed on %d frames after the handler stopped", len(l.frames))
	}
}

// TestReaderAllocatesNothing: frames flowing through Free and Commit allocate nothing.
func TestReaderAllocatesNothing(t *testing.T) {
	stream, _ := testStream()
	r := wire.NewFrameReader(8192, wire.FrameSizeMax)
	var count countingHandler
	allocs := testing.AllocsPerRun(50, func() {
		rest := stream
		for len(rest) > 0 {
			n := copy(r.Free(), rest[:min(len(rest), 1000)])
			rest = rest[n:]
			if err := r.Commit(n, &count); err != nil {
				panic(err)
			}
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per stream", allocs)
	}
	if count.n == 0 {
		t.Fatal("no frames")
	}
}

type countingHandler struct{ n int }

func (c *countingHandler) HandleFrame(wire.Header, []byte, []byte) error { c.n++; return nil }
func (c *countingHandler) DropFrame(wire.Header, error)                  {}

// TestReaderOverTCP sends frames over a real loopback TCP connection in random-sized writes and
// reassembles them with reads straight into the reader's buffer.
func TestReaderOverTCP(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	stream, want := testStream()
	const rounds = 20
	sent := make(chan error, 1)
	go func() {
		conn, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			sent <- err
			return
		}
		defer conn.Close()
		rng := rand.New(rand.NewPCG(1, 2))
		all := bytes.Repeat(stream, rounds)
		for len(all) > 0 {
			n := min(len(all), 1+rng.IntN(700))
			if _, err := conn.Write(all[:n]); err != nil {
				sent <- err
				return
			}
			all = all[n:]
		}
		sent <- nil
	}()
	conn, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r := wire.NewFrameReader(1500, wire.FrameSizeMax)
	var l frameLog
	for {
		n, err := conn.Read(r.Free())
		if cerr := r.Commit(n, &l); cerr != nil {
			t.Fatal(cerr)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	var all [][]byte
	for i := 0; i < rounds; i++ {
		all = append(all, want...)
	}
	sameFrames(t, l.frames, all)
	if r.Buffered() != 0 {
		t.Fatalf("%d bytes left", r.Buffered())
	}
}

// TestR15_ReaderDropsBadBodyAndGoesOn: a frame whose body fails its checksum is dropped whole, and the
// frames after it on the same connection are still handed on.
func TestR15_ReaderDropsBadBodyAndGoesOn(t *testing.T) {
	first := wire.AppendCommitBatch(nil, testCluster, 2, commitEntries(3))
	bad := wire.AppendCommitBatch(nil, testCluster, 2, commitEntries(4))
	bad[len(bad)-3] ^= 0x40
	last := wire.AppendCommitReplyBatch(nil, testCluster, 2, commitReplyEntries(2))
	stream := bytes.Join([][]byte{first, bad, last}, nil)
	for _, chunk := range []int{1, 100, len(stream)} {
		r := wire.NewFrameReader(512, wire.FrameSizeMax)
		var l frameLog
		for off := 0; off < len(stream); off += chunk {
			if _, err := r.Write(stream[off:min(off+chunk, len(stream))], &l); err != nil {
				t.Fatalf("chunk %d: %v", chunk, err)
			}
		}
		sameFrames(t, l.frames, [][]byte{first, last})
		if len(l.dropped) != 1 || !errors.Is(l.dropped[0], wire.ErrChecksum) {
			t.Fatalf("chunk %d: dropped %v", chunk, l.dropped)
		}
	}
}

// TestReaderStallAndResume: a handler that stalls keeps its frame in the reader; a later Commit(0)
// hands it on again, then the frames after it, with nothing lost or handed on twice.
func TestReaderStallAndResume(t *testing.T) {
	stream, want := testStream()
	r := wire.NewFrameReader(len(stream), wire.FrameSizeMax)
	l := frameLog{stallAt: 3}
	n, err := r.Write(stream, &l)
	if !errors.Is(err, wire.ErrStall) || n != len(stream) {
		t.Fatalf("got n %d err %v", n, err)
	}
	if len(l.frames) != 2 {
		t.Fatalf("%d frames before the stall", len(l.frames))
	}
	if err := r.Commit(0, &l); err != nil {
		t.Fatal(err)
	}
	sameFrames(t, l.frames, want)
}
