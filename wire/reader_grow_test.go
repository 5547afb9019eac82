package wire_test

import (
	"bytes"
	"runtime"
	"testing"

	"github.com/ringstream/ringstream/wire"
)

// bigPrepare is a stream prepare frame of bodyBytes bytes of records.
func bigPrepare(bodyBytes int) []byte {
	return wire.AppendStreamPrepare(nil, fromNode, &wire.StreamPrepare{Stream: 1, Epoch: 1, Log: wire.LogRecords,
		Count: 1, Batches: bytes.Repeat([]byte{0x5A}, bodyBytes)})
}

func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestReaderHeaderAloneReservesNothing: many readers, each handed only a header that claims a body near
// FrameSizeMax, then asked for space to receive the body into (as a connection posts its next receive),
// hold no more than their own buffers: the heap does not grow by the sizes the headers claim.
func TestReaderHeaderAloneReservesNothing(t *testing.T) {
	const readers, bufferSize = 16, 64 << 10
	header := bytes.Clone(bigPrepare(wire.FrameSizeMax - wire.HeaderSize - 64)[:wire.HeaderSize])
	before := heapInUse()
	rs := make([]*wire.FrameReader, readers)
	var l frameLog
	for i := range rs {
		rs[i] = wire.NewFrameReader(bufferSize, wire.FrameSizeMax)
		if _, err := rs[i].Write(header, &l); err != nil {
			t.Fatal(err)
		}
		if free := rs[i].Free(); len(free) == 0 {
			t.Fatalf("reader %d offers %d bytes to receive into", i, len(free))
		}
		if p := rs[i].Pending(); p < wire.FrameSizeMax/2 {
			t.Fatalf("reader %d: pending %d, want the claimed body", i, p)
		}
	}
	grown := int64(heapInUse()) - int64(before)
	// Each reader holds its own buffer; the claimed bodies would be readers × 64 MiB.
	if limit := int64(readers*bufferSize + 4<<20); grown > limit {
		t.Fatalf("heap grew %d bytes for %d headers claiming %d bytes each, want at most %d",
			grown, readers, wire.FrameSizeMax, limit)
	}
	for i, r := range rs {
		if r.Reserved() != bufferSize {
			t.Fatalf("reader %d reserved %d bytes, want its buffer of %d", i, r.Reserved(), bufferSize)
		}
	}
	runtime.KeepAlive(rs)
}

// TestReaderGrowsAsBytesArrive: a large frame's buffer follows the bytes received (at most twice them),
// the frame arrives whole, and the buffer returns to its size after it.
func TestReaderGrowsAsBytesArrive(t *testing.T) {
	const bufferSize = 4096
	frame := bigPrepare(8 << 20)
	small := wire.AppendCommitBatch(nil, testCluster, 2, commitEntries(2))
	stream := bytes.Join([][]byte{frame, small}, nil)
	r := wire.NewFrameReader(bufferSize, wire.FrameSizeMax)
	var l frameLog
	received := 0
	for received < len(frame) {
		free := r.Free()
		n := copy(free, stream[received:min(received+1000, len(frame))])
		if err := r.Commit(n, &l); err != nil {
			t.Fatal(err)
		}
		received += n
		if received < len(frame) && r.Reserved() > max(bufferSize, 2*received) {
			t.Fatalf("%d bytes of the frame received, %d reserved: want at most %d", received, r.Reserved(),
				max(bufferSize, 2*received))
		}
	}
	if _, err := r.Write(stream[received:], &l); err != nil {
		t.Fatal(err)
	}
	sameFrames(t, l.frames, [][]byte{frame, small})
	r.Free()
	if r.Reserved() != bufferSize {
		t.Fatalf("reserved %d after the large frame, want %d", r.Reserved(), bufferSize)
	}
}
