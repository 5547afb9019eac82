package wire_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/ringstream/ringstream/wire"
)

// The list-cursors decoders refuse what their encoders never write: names out of order or repeated,
// a bad name, more entries than the total or than CursorListMax, "after" without a name, limit 0.
func TestListCursors_DecodersRefuseBrokenLists(t *testing.T) {
	m := wire.ListCursorsReply{RequestID: 1, Stream: 7, Total: 5}
	cs := []wire.CursorInfo{{Consumer: []byte("a"), Offset: 1}, {Consumer: []byte("b"), Offset: 2}}
	frame := wire.AppendListCursorsReply(nil, wire.From{Cluster: 1, Node: 1}, &m, cs)
	sound, soundBody, err := wire.ParseFrame(frame)
	if err != nil {
		t.Fatal(err)
	}
	if _, l, err := wire.DecodeListCursorsReply(&sound, soundBody); err != nil || l.Len() != 2 {
		t.Fatalf("a sound list refused: %v", err)
	}
	// Entries are offset u64 | length u8 | name: the names are bytes 9 and 19.
	for name, c := range map[string]struct {
		at   int
		b    byte
		want error
	}{"out of order": {9, 'c', wire.ErrMalformed}, "repeated": {19, 'a', wire.ErrMalformed}, "bad name": {9, '/', wire.ErrMalformed}} {
		body := bytes.Clone(soundBody)
		body[c.at] = c.b
		h := sound
		if _, _, err := wire.DecodeListCursorsReply(&h, body); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
	}
	h := sound
	binary.LittleEndian.PutUint32(h.Area[24:], 1) // total
	if _, _, err := wire.DecodeListCursorsReply(&h, soundBody); !errors.Is(err, wire.ErrEntryCount) {
		t.Errorf("more entries than the total: %v", err)
	}
	h = sound
	binary.LittleEndian.PutUint32(h.Area[24:], 1<<20)
	h.EntryCount = wire.CursorListMax + 1
	if _, _, err := wire.DecodeListCursorsReply(&h, soundBody); !errors.Is(err, wire.ErrEntryCount) {
		t.Errorf("more entries than CursorListMax: %v", err)
	}

	req := wire.AppendListCursors(nil, wire.From{Cluster: 1}, &wire.ListCursors{Stream: 7, From: []byte("x"), After: true, Limit: 5})
	rh, rbody, err := wire.ParseFrame(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wire.DecodeListCursors(&rh, rbody); err != nil {
		t.Fatalf("a sound request refused: %v", err)
	}
	if _, err := wire.DecodeListCursors(&rh, nil); !errors.Is(err, wire.ErrMalformed) {
		t.Errorf("after without a name: %v", err)
	}
	if _, err := wire.DecodeListCursors(&rh, []byte("..")); wire.CodeOf(err) != wire.CodeBadConsumerName {
		t.Errorf("a bad name to start from: %v", err)
	}
	binary.LittleEndian.PutUint32(rh.Area[8:], 0)
	if _, err := wire.DecodeListCursors(&rh, rbody); wire.CodeOf(err) != wire.CodeBadCount {
		t.Errorf("limit 0: %v", err)
	}
}
