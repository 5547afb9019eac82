package wire_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/ringstream/ringstream/wire"
)

const (
	testCluster = 0xC0FFEE0000000001
	testSender  = 3
)

func commitEntries(n int) []wire.CommitEntry {
	es := make([]wire.CommitEntry, n)
	for i := range es {
		es[i] = wire.CommitEntry{
			Group:              uint64(i + 1),
			Incarnation:        uint32(i*7 + 1),
			View:               uint32(i % 13),
			Commit:             uint64(i) * 1000003,
			TimestampMonotonic: uint64(i)<<32 | 0xABCD,
			HeartbeatState:     wire.HeartbeatState(i%3 + 1),
			Replica:            uint8(i % 5),
		}
	}
	return es
}

func commitReplyEntries(n int) []wire.CommitReplyEntry {
	es := make([]wire.CommitReplyEntry, n)
	for i := range es {
		es[i] = wire.CommitReplyEntry{
			Group:              uint64(i + 1),
			Incarnation:        uint32(i*3 + 2),
			View:               uint32(i % 11),
			TimestampMonotonic: uint64(i) * 977,
			Replica:            uint8(i%5 + 1),
		}
	}
	return es
}

type badEntry struct {
	index  int
	reason error
}

// collector records what a batch hands on.
type collector struct {
	commits []wire.CommitEntry
	replies []wire.CommitReplyEntry
	bad     []badEntry
}

func (c *collector) OnCommitEntry(e wire.CommitEntry)           { c.commits = append(c.commits, e) }
func (c *collector) OnBadCommitEntry(i int, reason error)       { c.bad = append(c.bad, badEntry{i, reason}) }
func (c *collector) OnCommitReplyEntry(e wire.CommitReplyEntry) { c.replies = append(c.replies, e) }
func (c *collector) OnBadCommitReplyEntry(i int, reason error) {
	c.bad = append(c.bad, badEntry{i, reason})
}

func parse(t *testing.T, frame []byte) (wire.Header, []byte) {
	t.Helper()
	h, body, err := wire.ParseFrame(frame)
	if err != nil {
		t.Fatalf("ParseFrame: %v", err)
	}
	return h, body
}

// refreshChecksums recomputes a frame's checksums after a test changed its body, so the frame passes
// R15 and reaches the per-entry checks.
func refreshChecksums(frame []byte) {
	count := binary.LittleEndian.Uint32(frame[40:])
	wire.EndFrame(frame, count)
}

func TestR10_CommitBatchRoundTrip(t *testing.T) {
	es := commitEntries(1000)
	frame := wire.AppendCommitBatch([]byte("outbox head"), testCluster, testSender, es)
	frame = frame[len("outbox head"):]
	if len(frame) != wire.HeaderSize+1000*wire.CommitEntrySize {
		t.Fatalf("frame is %d bytes", len(frame))
	}
	h, body := parse(t, frame)
	if h.Command != wire.CommandCommit || h.EntryCount != 1000 || h.Cluster != testCluster || h.Sender != testSender {
		t.Fatalf("header %+v", h)
	}
	b, err := wire.DecodeCommitBatch(&h, body)
	if err != nil {
		t.Fatal(err)
	}
	var c collector
	good, bad := b.Each(&c)
	if good != 1000 || bad != 0 {
		t.Fatalf("good %d bad %d", good, bad)
	}
	for i := range es {
		if c.commits[i] != es[i] {
			t.Fatalf("entry %d: got %+v want %+v", i, c.commits[i], es[i])
		}
	}
}

// TestR10_CommitEntryLayout pins the 40-byte entry's offsets.
func TestR10_CommitEntryLayout(t *testing.T) {
	e := wire.CommitEntry{Group: 0x0102030405060708, Incarnation: 0x11121314, View: 0x21222324,
		Commit: 0x3132333435363738, TimestampMonotonic: 0x4142434445464748, HeartbeatState: wire.HeartbeatIdle, Replica: 0x55}
	b := wire.AppendCommitEntry(nil, e)
	want := []byte{
		0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01,
		0x14, 0x13, 0x12, 0x11,
		0x24, 0x23, 0x22, 0x21,
		0x38, 0x37, 0x36, 0x35, 0x34, 0x33, 0x32, 0x31,
		0x48, 0x47, 0x46, 0x45, 0x44, 0x43, 0x42, 0x41,
		0x02, 0x55, 0, 0, 0, 0, 0, 0,
	}
	if !bytes.Equal(b, want) {
		t.Fatalf("layout\n got %x\nwant %x", b, want)
	}
}

// TestR26_CommitReplyEntryLayout pins the 32-byte entry's offsets.
func TestR26_CommitReplyEntryLayout(t *testing.T) {
	e := wire.CommitReplyEntry{Group: 0x0102030405060708, Incarnation: 0x11121314, View: 0x21222324,
		TimestampMonotonic: 0x4142434445464748, Replica: 0x55}
	b := wire.AppendCommitReplyEntry(nil, e)
	want := []byte{
		0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01,
		0x14, 0x13, 0x12, 0x11,
		0x24, 0x23, 0x22, 0x21,
		0x48, 0x47, 0x46, 0x45, 0x44, 0x43, 0x42, 0x41,
		0x55, 0, 0, 0, 0, 0, 0, 0,
	}
	if !bytes.Equal(b, want) {
		t.Fatalf("layout\n got %x\nwant %x", b, want)
	}
}

func TestR26_CommitReplyBatchRoundTrip(t *testing.T) {
	es := commitReplyEntries(1000)
	frame := wire.AppendCommitReplyBatch(nil, testCluster, testSender, es)
	h, body := parse(t, frame)
	b, err := wire.DecodeCommitReplyBatch(&h, body)
	if err != nil {
		t.Fatal(err)
	}
	var c collector
	if good, bad := b.Each(&c); good != 1000 || bad != 0 {
		t.Fatalf("good %d bad %d", good, bad)
	}
	for i := range es {
		if c.replies[i] != es[i] {
			t.Fatalf("entry %d: got %+v want %+v", i, c.replies[i], es[i])
		}
	}
}

func TestR11_EmptyBatchIsAFrame(t *testing.T) {
	frame := wire.AppendCommitBatch(nil, testCluster, testSender, nil)
	h, body := parse(t, frame)
	b, err := wire.DecodeCommitBatch(&h, body)
	if err != nil || b.Len() != 0 {
		t.Fatalf("len %d err %v", b.Len(), err)
	}
}

// TestR17_BadEntryRejectedAlone puts one bad entry among 1000, for each way an entry can be bad, and
// checks the other 999 are handed on in order.
func TestR17_BadEntryRejectedAlone(t *testing.T) {
	cases := []struct {
		name   string
		spoil  func(entry []byte)
		reason error
	}{
		{"group 0", func(e []byte) { clear(e[0:8]) }, wire.ErrEntryGroup},
		{"heartbeat_state 0", func(e []byte) { e[32] = 0 }, wire.ErrEntryHeartbeatState},
		{"heartbeat_state 4", func(e []byte) { e[32] = 4 }, wire.ErrEntryHeartbeatState},
		{"reserved byte 34", func(e []byte) { e[34] = 1 }, wire.ErrEntryReserved},
		{"reserved byte 39", func(e []byte) { e[39] = 0x80 }, wire.ErrEntryReserved},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			es := commitEntries(1000)
			frame := wire.AppendCommitBatch(nil, testCluster, testSender, es)
			const badIndex = 617
			off := wire.HeaderSize + badIndex*wire.CommitEntrySize
			tc.spoil(frame[off : off+wire.CommitEntrySize])
			refreshChecksums(frame)
			h, body := parse(t, frame)
			b, err := wire.DecodeCommitBatch(&h, body)
			if err != nil {
				t.Fatal(err)
			}
			var c collector
			good, bad := b.Each(&c)
			if good != 999 || bad != 1 {
				t.Fatalf("good %d bad %d", good, bad)
			}
			if c.bad[0].index != badIndex || !errors.Is(c.bad[0].reason, tc.reason) || !errors.Is(c.bad[0].reason, wire.ErrBadEntry) {
				t.Fatalf("bad entry reported as %+v", c.bad[0])
			}
			want := append(es[:badIndex:badIndex], es[badIndex+1:]...)
			for i := range want {
				if c.commits[i] != want[i] {
					t.Fatalf("handed-on entry %d: got %+v want %+v", i, c.commits[i], want[i])
				}
			}
		})
	}
}

// TestR29_BadReplyEntryRejectedAlone does the same for CommitReply batches.
func TestR29_BadReplyEntryRejectedAlone(t *testing.T) {
	for _, tc := range []struct {
		name   string
		spoil  func(e []byte)
		reason error
	}{
		{"group 0", func(e []byte) { clear(e[0:8]) }, wire.ErrEntryGroup},
		{"reserved byte 25", func(e []byte) { e[25] = 1 }, wire.ErrEntryReserved},
		{"reserved byte 31", func(e []byte) { e[31] = 1 }, wire.ErrEntryReserved},
	} {
		t.Run(tc.name, func(t *testing.T) {
			es := commitReplyEntries(1000)
			frame := wire.AppendCommitReplyBatch(nil, testCluster, testSender, es)
			off := wire.HeaderSize + 0*wire.CommitReplyEntrySize
			tc.spoil(frame[off : off+wire.CommitReplyEntrySize])
			refreshChecksums(frame)
			h, body := parse(t, frame)
			b, err := wire.DecodeCommitReplyBatch(&h, body)
			if err != nil {
				t.Fatal(err)
			}
			var c collector
			if good, bad := b.Each(&c); good != 999 || bad != 1 {
				t.Fatalf("good %d bad %d", good, bad)
			}
			if c.bad[0].index != 0 || !errors.Is(c.bad[0].reason, tc.reason) {
				t.Fatalf("bad entry reported as %+v", c.bad[0])
			}
			if c.replies[0] != es[1] || c.replies[998] != es[999] {
				t.Fatalf("handed-on entries shifted")
			}
		})
	}
}

// TestR15_BadChecksumDropsWholeBatch: a batch whose checksum fails hands on nothing.
func TestR15_BadChecksumDropsWholeBatch(t *testing.T) {
	frame := wire.AppendCommitBatch(nil, testCluster, testSender, commitEntries(10))
	frame[wire.HeaderSize+5] ^= 0x10
	if _, _, err := wire.ParseFrame(frame); !errors.Is(err, wire.ErrChecksum) {
		t.Fatalf("got %v", err)
	}
}

func TestBatchDecodeRefusals(t *testing.T) {
	frame := wire.AppendCommitBatch(nil, testCluster, testSender, commitEntries(4))
	h, body := parse(t, frame)
	// Every truncation of the body disagrees with the entry count.
	for n := 0; n < len(body); n++ {
		if _, err := wire.DecodeCommitBatch(&h, body[:n]); !errors.Is(err, wire.ErrEntryCount) {
			t.Fatalf("body cut at %d: got %v", n, err)
		}
	}
	hr := h
	hr.Command = wire.CommandCommitReply
	if _, err := wire.DecodeCommitBatch(&hr, body); !errors.Is(err, wire.ErrCommand) {
		t.Fatalf("wrong command: got %v", err)
	}
	if _, err := wire.DecodeCommitReplyBatch(&h, body); !errors.Is(err, wire.ErrCommand) {
		t.Fatalf("wrong command: got %v", err)
	}
	ha := h
	ha.Area[100] = 1
	if _, err := wire.DecodeCommitBatch(&ha, body); !errors.Is(err, wire.ErrReserved) {
		t.Fatalf("area: got %v", err)
	}
	hc := h
	hc.EntryCount = 1 << 31
	if _, err := wire.DecodeCommitBatch(&hc, body); !errors.Is(err, wire.ErrEntryCount) {
		t.Fatalf("huge count: got %v", err)
	}
}

// TestR13_EntryLimitAsserted: the encoder refuses to grow a batch past one frame.
func TestR13_EntryLimitAsserted(t *testing.T) {
	if wire.CommitEntriesMax < 1_600_000 || wire.CommitEntriesMax*wire.CommitEntrySize > wire.BodySizeMax {
		t.Fatalf("CommitEntriesMax %d", wire.CommitEntriesMax)
	}
	var w wire.BatchWriter
	buf := w.Begin(nil, wire.CommandCommit, testCluster, testSender)
	w.SetCountForTest(wire.CommitEntriesMax)
	defer func() {
		r := recover()
		if r == nil || !strings.Contains(r.(string), "R13") {
			t.Fatalf("recovered %v", r)
		}
	}()
	w.AppendCommit(buf, commitEntries(1)[0])
}

// TestBatchEncodeDecodeAllocateNothing pins the hot paths at zero allocations per batch (and so per
// entry) once the outbox has capacity.
func TestBatchEncodeDecodeAllocateNothing(t *testing.T) {
	es := commitEntries(1000)
	out := make([]byte, 0, wire.HeaderSize+len(es)*wire.CommitEntrySize)
	var w wire.BatchWriter
	encode := testing.AllocsPerRun(20, func() {
		buf := w.Begin(out[:0], wire.CommandCommit, testCluster, testSender)
		for i := range es {
			buf = w.AppendCommit(buf, es[i])
		}
		out = w.End(buf)
	})
	if encode != 0 {
		t.Errorf("encode: %v allocs per 1000-entry batch", encode)
	}
	var sink countingVisitor
	decode := testing.AllocsPerRun(20, func() {
		h, body, err := wire.ParseFrame(out)
		if err != nil {
			panic(err)
		}
		b, err := wire.DecodeCommitBatch(&h, body)
		if err != nil {
			panic(err)
		}
		b.Each(&sink)
	})
	if decode != 0 {
		t.Errorf("decode: %v allocs per 1000-entry batch", decode)
	}
	if sink.sum == 0 {
		t.Fatal("visitor saw nothing")
	}
	replies := commitReplyEntries(1000)
	rout := make([]byte, 0, wire.HeaderSize+len(replies)*wire.CommitReplyEntrySize)
	replyAllocs := testing.AllocsPerRun(20, func() {
		rout = wire.AppendCommitReplyBatch(rout[:0], testCluster, testSender, replies)
		h, body, err := wire.ParseFrame(rout)
		if err != nil {
			panic(err)
		}
		b, err := wire.DecodeCommitReplyBatch(&h, body)
		if err != nil {
			panic(err)
		}
		b.Each(&sink)
	})
	if replyAllocs != 0 {
		t.Errorf("reply encode+decode: %v allocs per 1000-entry batch", replyAllocs)
	}
}

type countingVisitor struct{ sum uint64 }

func (v *countingVisitor) OnCommitEntry(e wire.CommitEntry) { v.sum += e.Commit + 1 }
func (v *countingVisitor) OnBadCommitEntry(int, error)      {}
func (v *countingVisitor) OnCommitReplyEntry(e wire.CommitReplyEntry) {
	v.sum += e.TimestampMonotonic + 1
}
func (v *countingVisitor) OnBadCommitReplyEntry(int, error) {}
