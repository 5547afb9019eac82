package shard

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/ringstream/ringstream/wire"
)

// splitKafka is the reference framing: whole frames (prefix stripped) and the error that stops it.
func splitKafka(b []byte, frameMax int) ([][]byte, error) {
	var out [][]byte
	for len(b) >= 4 {
		size := int64(int32(binary.BigEndian.Uint32(b)))
		if err := validateKafkaFrameSize(size, frameMax); err != nil {
			return out, err
		}
		if int64(len(b)-4) < size {
			break
		}
		out = append(out, b[4:4+size])
		b = b[4+size:]
	}
	return out, nil
}

// FuzzKafkaReader cuts arbitrary bytes, received in arbitrary pieces and with a handler that stalls
// on every other frame, into the frames the reference framing finds, and stops where it stops.
func FuzzKafkaReader(f *testing.F) {
	frame := func(s string) []byte { return append(binary.BigEndian.AppendUint32(nil, uint32(len(s))), s...) }
	f.Add(append(frame("12345678"), frame("abcdefghijkl")...), uint8(3))
	f.Add(append(frame("12345678"), 0, 0, 0, 2), uint8(1))
	f.Add(append(frame("12345678"), 0, 0, 1, 0), uint8(7))
	f.Add(bytes.Repeat(frame("a long enough frame body"), 20), uint8(5))
	f.Fuzz(func(t *testing.T, data []byte, chunk uint8) {
		const frameMax = 64
		want, wantErr := splitKafka(data, frameMax)
		r := newKafkaReader(16, frameMax)
		var got [][]byte
		stall := false
		take := func(fr []byte) error {
			stall = !stall
			if stall {
				return wire.ErrStall
			}
			got = append(got, bytes.Clone(fr))
			return nil
		}
		var err error
		step := int(chunk%17) + 1
		for off := 0; off < len(data) && err == nil; {
			free := r.free()
			n := copy(free, data[off:min(len(data), off+step)])
			off += n
			err = r.commit(n, take)
			for errors.Is(err, wire.ErrStall) {
				err = r.commit(0, take)
			}
		}
		if (err != nil) != (wantErr != nil) || len(got) != len(want) {
			t.Fatalf("reader: %d frames, err %v; reference: %d frames, err %v", len(got), err, len(want), wantErr)
		}
		for i := range got {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("frame %d: % x, want % x", i, got[i], want[i])
			}
		}
	})
}
