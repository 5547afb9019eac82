package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// resealHeader recomputes only the header checksum, so a test can change a header field and reach the
// check after the checksum.
func resealHeader(frame []byte) {
	binary.LittleEndian.PutUint64(frame[offsetChecksum:], xxhash.Sum64(frame[offsetChecksumBody:HeaderSize]))
}

func testFrame(t *testing.T, c Command, body []byte) []byte {
	t.Helper()
	h := Header{Cluster: 0xC1C2C3C4C5C6C7C8, Sender: 7, Command: c}
	if !c.NodeLevel() {
		h.Group = 42
		h.Incarnation = 3
	}
	frame := BeginFrame(nil, &h)
	frame = append(frame, body...)
	EndFrame(frame, 0)
	return frame
}

// TestHeaderOffsets pins every header field to its byte offset and width.
func TestHeaderOffsets(t *testing.T) {
	h := Header{
		Cluster:     0x1112131415161718,
		Group:       0x2122232425262728,
		Incarnation: 0x31323334,
		Sender:      0x4142,
		Command:     CommandStreamSeal,
	}
	for i := range h.Area {
		h.Area[i] = byte(0x80 + i)
	}
	frame := BeginFrame([]byte("prefix"), &h)
	frame = append(frame, []byte("body bytes")...)
	f := frame[len("prefix"):]
	EndFrame(f, 0x51525354)

	if HeaderSize != 256 || AreaOffset != 64 || AreaSize != 192 || FrameSizeMax != 64<<20 || Revision != 2 {
		t.Fatalf("constants changed")
	}
	le := binary.LittleEndian
	checks := []struct {
		name string
		off  int
		got  uint64
		want uint64
	}{
		{"checksum", 0, le.Uint64(f[0:]), xxhash.Sum64(f[8:256])},
		{"checksum_body", 8, le.Uint64(f[8:]), xxhash.Sum64(f[256:])},
		{"cluster", 16, le.Uint64(f[16:]), 0x1112131415161718},
		{"group", 24, le.Uint64(f[24:]), 0x2122232425262728},
		{"incarnation", 32, uint64(le.Uint32(f[32:])), 0x31323334},
		{"body_size", 36, uint64(le.Uint32(f[36:])), uint64(len("body bytes"))},
		{"entry_count", 40, uint64(le.Uint32(f[40:])), 0x51525354},
		{"sender", 44, uint64(le.Uint16(f[44:])), 0x4142},
		{"command", 46, uint64(le.Uint16(f[46:])), 50},
		{"revision", 48, uint64(le.Uint16(f[48:])), 2},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s at %d: got %#x, want %#x", c.name, c.off, c.got, c.want)
		}
	}
	if !zero(f[50:64]) {
		t.Errorf("reserved bytes 50..64 not zero: %x", f[50:64])
	}
	for i := 0; i < AreaSize; i++ {
		if f[64+i] != byte(0x80+i) {
			t.Fatalf("area byte %d: got %#x", i, f[64+i])
		}
	}
	got, body, err := ParseFrame(f)
	if err != nil {
		t.Fatal(err)
	}
	h.Revision = Revision
	h.BodySize = uint32(len("body bytes"))
	h.EntryCount = 0x51525354
	h.Checksum = le.Uint64(f[0:])
	h.ChecksumBody = le.Uint64(f[8:])
	if got != h {
		t.Errorf("parsed header %+v, want %+v", got, h)
	}
	if string(body) != "body bytes" {
		t.Errorf("body %q", body)
	}
	if &body[0] != &f[HeaderSize] {
		t.Errorf("body does not alias the buffer")
	}
}

// TestR15_FlippedBitAnywhereCaught flips every bit of a frame, one at a time; each must be refused.
func TestR15_FlippedBitAnywhereCaught(t *testing.T) {
	frame := testFrame(t, CommandStreamPrepare, bytes.Repeat([]byte{0x5A, 0x00, 0xFF}, 100))
	if _, _, err := ParseFrame(frame); err != nil {
		t.Fatal(err)
	}
	for i := range frame {
		for bit := 0; bit < 8; bit++ {
			frame[i] ^= 1 << bit
			_, _, err := ParseFrame(frame)
			frame[i] ^= 1 << bit
			if !errors.Is(err, ErrChecksum) {
				t.Fatalf("byte %d bit %d: got %v, want ErrChecksum", i, bit, err)
			}
		}
	}
}

func TestParseFrameRefusals(t *testing.T) {
	good := testFrame(t, CommandStreamPrepare, []byte("abc"))
	cases := []struct {
		name   string
		mutate func(f []byte) []byte
		want   error
	}{
		{"empty", func(f []byte) []byte { return nil }, ErrShortFrame},
		{"header cut", func(f []byte) []byte { return f[:HeaderSize-1] }, ErrShortFrame},
		{"body cut", func(f []byte) []byte { return f[:len(f)-1] }, ErrShortFrame},
		{"trailing byte", func(f []byte) []byte { return append(f, 0) }, ErrTrailingBytes},
		{"revision 1", func(f []byte) []byte {
			binary.LittleEndian.PutUint16(f[offsetRevision:], 1)
			resealHeader(f)
			return f
		}, ErrRevision},
		{"reserved", func(f []byte) []byte { f[offsetReserved+3] = 1; resealHeader(f); return f }, ErrReserved},
		{"too large", func(f []byte) []byte {
			binary.LittleEndian.PutUint32(f[offsetBodySize:], BodySizeMax+1)
			resealHeader(f)
			return f
		}, ErrFrameTooLarge},
		{"unknown command", func(f []byte) []byte {
			binary.LittleEndian.PutUint16(f[offsetCommand:], 3)
			resealHeader(f)
			return f
		}, ErrUnknownCommand},
		{"sender 0", func(f []byte) []byte {
			binary.LittleEndian.PutUint16(f[offsetSender:], 0)
			resealHeader(f)
			return f
		}, ErrSender},
		{"group on a node-level frame", func(f []byte) []byte {
			binary.LittleEndian.PutUint16(f[offsetCommand:], uint16(CommandCommit))
			resealHeader(f)
			return f
		}, ErrRouting},
		{"body checksum", func(f []byte) []byte {
			f[HeaderSize] ^= 1
			return f
		}, ErrChecksum},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := c.mutate(bytes.Clone(good))
			_, _, err := ParseFrame(f)
			if !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
		})
	}
}

func TestClientFrameMayHaveNoSender(t *testing.T) {
	h := Header{Cluster: 1, Command: CommandProduce, Group: 5}
	frame := BeginFrame(nil, &h)
	EndFrame(frame, 0)
	if _, _, err := ParseFrame(frame); err != nil {
		t.Fatal(err)
	}
}

func TestCommandKnown(t *testing.T) {
	for c := Command(0); c < 200; c++ {
		known := c.Known()
		want := c == 1 || c == 2 || c == 9 || c == 10 || (c >= 20 && c <= 32) || c == 40 || c == 41 ||
			(c >= 50 && c <= 53) || (c >= 60 && c <= 78) || (c >= 82 && c <= 89) || c == 99
		if known != want {
			t.Errorf("command %d: Known %v, want %v", c, known, want)
		}
		if c.String() == "" {
			t.Errorf("command %d has no string", c)
		}
	}
}
