package wire

import (
	"errors"
	"reflect"
	"testing"
)

func vsrSamples() []VSRMessage {
	e1 := VSREntry{Op: 4, View: 2, Client: 9, Request: 3, Parent: 11, Checksum: 12, Body: []byte("op-four")}
	e2 := VSREntry{Op: 5, View: 3, Parent: 12, Checksum: 13}
	return []VSRMessage{
		{Command: CommandVSRRequest, Replica: 1, Client: 9, Request: 3, Payload: []byte("op")},
		{Command: CommandVSRReply, Replica: 0, View: 2, Op: 4, Client: 9, Request: 3, Payload: []byte("ok")},
		{Command: CommandVSRPrepare, Replica: 0, View: 3, Op: 4, Commit: 3, Entries: []VSREntry{e1}},
		{Command: CommandVSRPrepareOK, Replica: 2, View: 3, Op: 4, Checksum: 12},
		{Command: CommandVSRStartViewChange, Replica: 4, View: 7},
		{Command: CommandVSRDoViewChange, Replica: 1, View: 7, LogView: 3, Op: 5, Commit: 3, Checksum: 13,
			LogBase: 3, Entries: []VSREntry{e1, e2}},
		{Command: CommandVSRStartView, Replica: 2, View: 7, LogView: 7, Op: 5, Commit: 4, Checksum: 13,
			LogBase: 3, Entries: []VSREntry{e1, e2}},
		{Command: CommandVSRRequestPrepare, Replica: 1, View: 7, Op: 4},
		{Command: CommandVSRSnapshot, Replica: 0, View: 7, Op: 64, Commit: 70, Checksum: 99, Offset: 5, Total: 10,
			Payload: []byte("state")},
		{Command: CommandVSRSnapshot, Replica: 0, View: 7, Op: 64, Commit: 70, Checksum: 99, Total: 1, Payload: []byte("s")},
		{Command: CommandVSRSnapshot, Replica: 2, View: 9, Op: 1 << 40, Commit: 1<<40 + 5, Checksum: 1 << 63,
			Offset: 0xfedcba00, Total: 0xfedcba01, Payload: []byte("z")},
		{Command: CommandVSRRequestSnapshot, Replica: 1, View: 7, Op: 64, Checksum: 99, Offset: 5},
		{Command: CommandVSRRequestStartView, Replica: 2, View: 7},
		{Command: CommandVSRRecovery, Replica: 1, View: 6, Request: 0xfeed},
		{Command: CommandVSRRecoveryResponse, Replica: 0, View: 7, Request: 0xfeed},
		{Command: CommandVSRRecoveryResponse, Replica: 1, View: 7, LogView: 7, Op: 5, Commit: 4, Checksum: 13,
			LogBase: 3, Request: 0xfeed, Entries: []VSREntry{e1, e2}},
	}
}

func TestVSR_RoundTripEveryCommand(t *testing.T) {
	for _, m := range vsrSamples() {
		frame := AppendVSRFrame(nil, From{Cluster: 5, Node: 2}, 0, &m)
		h, body, err := ParseFrame(frame)
		if err != nil {
			t.Fatalf("%s: parse: %v", m.Command, err)
		}
		if h.Command != m.Command || h.Sender != 2 || h.Cluster != 5 {
			t.Fatalf("%s: header %+v", m.Command, h)
		}
		var got VSRMessage
		if err := DecodeVSR(&h, body, &got); err != nil {
			t.Fatalf("%s: decode: %v", m.Command, err)
		}
		if !reflect.DeepEqual(got, m) {
			t.Fatalf("%s: round trip\n got %+v\nwant %+v", m.Command, got, m)
		}
	}
}

func TestVSR_EveryTruncationRefused(t *testing.T) {
	for _, m := range vsrSamples() {
		frame := AppendVSRFrame(nil, From{Cluster: 5, Node: 2}, 0, &m)
		h, body, err := ParseFrame(frame)
		if err != nil {
			t.Fatal(err)
		}
		for n := 0; n < len(body); n++ {
			var got VSRMessage
			if err := DecodeVSR(&h, body[:n], &got); err == nil {
				t.Fatalf("%s: body cut to %d of %d bytes decoded", m.Command, n, len(body))
			}
		}
	}
}

func TestVSR_ShapeAndReservedChecked(t *testing.T) {
	m := vsrSamples()[2] // prepare
	m.Entries = append(m.Entries, m.Entries[0])
	frame := AppendVSRFrame(nil, From{Cluster: 1, Node: 1}, 0, &m)
	h, body, _ := ParseFrame(frame)
	var got VSRMessage
	if err := DecodeVSR(&h, body, &got); !errors.Is(err, ErrEntryCount) {
		t.Fatalf("prepare with two entries: %v, want ErrEntryCount", err)
	}
	m = vsrSamples()[3]
	frame = AppendVSRFrame(nil, From{Cluster: 1, Node: 1}, 0, &m)
	h, body, _ = ParseFrame(frame)
	body[1] = 7
	if err := DecodeVSR(&h, body, &got); !errors.Is(err, ErrReserved) {
		t.Fatalf("reserved byte set: %v, want ErrReserved", err)
	}
	h.EntryCount = 1 << 30
	if err := DecodeVSR(&h, body, &got); err == nil {
		t.Fatal("huge entry count decoded")
	}
}

// TestVSR_ChunkShapeChecked: a chunk must be non-empty and end within the checkpoint's total, a request
// for one carries no payload or total, and no other command carries offset or total.
func TestVSR_ChunkShapeChecked(t *testing.T) {
	chunk := VSRMessage{Command: CommandVSRSnapshot, Replica: 0, View: 7, Op: 64, Checksum: 99, Offset: 5,
		Total: 10, Payload: []byte("state")}
	request := VSRMessage{Command: CommandVSRRequestSnapshot, Replica: 1, View: 7, Op: 64, Checksum: 99, Offset: 5}
	for _, c := range []struct {
		name string
		m    VSRMessage
		want error
	}{
		{"chunk past total", func() VSRMessage { m := chunk; m.Total = 9; return m }(), ErrChunk},
		{"chunk offset past total", func() VSRMessage { m := chunk; m.Offset = 1 << 31; m.Total = 1 << 31; return m }(), ErrChunk},
		{"empty chunk", func() VSRMessage { m := chunk; m.Payload = nil; return m }(), ErrChunk},
		{"request with a payload", func() VSRMessage { m := request; m.Payload = []byte("x"); return m }(), ErrChunk},
		{"request with a total", func() VSRMessage { m := request; m.Total = 10; return m }(), ErrChunk},
		{"prepare-ok with an offset", VSRMessage{Command: CommandVSRPrepareOK, Replica: 2, View: 3, Op: 4, Offset: 1}, ErrReserved},
		{"start-view-change with a total", VSRMessage{Command: CommandVSRStartViewChange, Replica: 2, View: 3, Total: 1}, ErrReserved},
	} {
		frame := AppendVSRFrame(nil, From{Cluster: 1, Node: 1}, 0, &c.m)
		h, body, err := ParseFrame(frame)
		if err != nil {
			t.Fatal(err)
		}
		var got VSRMessage
		if err := DecodeVSR(&h, body, &got); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}

func TestVSR_DecodeReusesEntriesWithoutAllocating(t *testing.T) {
	m := vsrSamples()[5]
	frame := AppendVSRFrame(nil, From{Cluster: 1, Node: 1}, 0, &m)
	h, body, _ := ParseFrame(frame)
	var got VSRMessage
	if err := DecodeVSR(&h, body, &got); err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(100, func() {
		if err := DecodeVSR(&h, body, &got); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per decode, want 0", allocs)
	}
}

func FuzzVSRDecode(f *testing.F) {
	for _, m := range vsrSamples() {
		frame := AppendVSRFrame(nil, From{Cluster: 1, Node: 1}, 0, &m)
		f.Add(frame)
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		h, body, err := ParseFrame(frame)
		if err != nil {
			return
		}
		var m VSRMessage
		if err := DecodeVSR(&h, body, &m); err != nil {
			return
		}
		// What decodes re-encodes to the same body.
		again := AppendVSRFrame(nil, From{Cluster: h.Cluster, Node: h.Sender}, h.Group, &m)
		_, body2, err := ParseFrame(again)
		if err != nil {
			t.Fatalf("re-encoded frame does not parse: %v", err)
		}
		if string(body2) != string(body) {
			t.Fatalf("re-encoded body differs")
		}
	})
}

func FuzzVSREntry(f *testing.F) {
	e := VSREntry{Op: 1, View: 1, Client: 2, Request: 3, Parent: 4, Checksum: 5, Body: []byte("x")}
	f.Add(AppendVSREntry(nil, &e))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		got, n, err := DecodeVSREntry(b)
		if err != nil {
			return
		}
		if n > len(b) || n != VSREntryHeaderSize+len(got.Body) {
			t.Fatalf("size %d of %d bytes, body %d", n, len(b), len(got.Body))
		}
	})
}
