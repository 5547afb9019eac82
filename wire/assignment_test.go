package wire_test

import (
	"errors"
	"testing"

	"github.com/ringstream/ringstream/wire"
)

// An assignment round-trips with its starts; every rule the decoder checks refuses the whole frame,
// so a copy never applies an assignment whose starts it cannot read (stream-failover spec: an
// unreadable list withholds the assignment).
func TestStreamAssignment_Refusals(t *testing.T) {
	good := wire.StreamAssignment{Stream: 9, Incarnation: 1, Epoch: 5, Owner: 3, PolicyKind: 2,
		StartsVersion: 2, FollowerCount: 2, Followers: [wire.AssignmentFollowersMax]uint16{1, 4}}
	starts := []wire.HistoryStart{{Epoch: 2, Node: 2, RecordStart: 10, CursorStart: 1}, {Epoch: 5, Node: 3, RecordStart: 12}}
	frame := wire.AppendStreamAssignment(nil, fromNode, &good, starts)
	h, body, err := wire.ParseFrame(frame)
	if err != nil {
		t.Fatal(err)
	}
	m, l, err := wire.DecodeStreamAssignment(&h, body)
	if err != nil || m != good || l.Len() != 2 || l.At(1) != starts[1] {
		t.Fatalf("round trip %+v %v %v", m, l.AppendTo(nil), err)
	}
	if got := m.FollowerList(); len(got) != 2 || got[0] != 1 || got[1] != 4 {
		t.Fatalf("followers %v", got)
	}
	cases := []struct {
		name string
		mut  func(h *wire.Header, body []byte) []byte
		want error
	}{
		{"epoch 0", func(h *wire.Header, b []byte) []byte { h.Area[0] = 0; return b }, wire.ErrMalformed},
		{"owner 0", func(h *wire.Header, b []byte) []byte { h.Area[4] = 0; return b }, wire.ErrMalformed},
		{"too many followers", func(h *wire.Header, b []byte) []byte { h.Area[8] = 7; return b }, wire.ErrMalformed},
		{"follower count past the listed ones", func(h *wire.Header, b []byte) []byte { h.Area[8] = 3; return b },
			wire.ErrMalformed},
		{"unused follower slot set", func(h *wire.Header, b []byte) []byte { h.Area[28] = 1; return b }, wire.ErrReserved},
		{"followers not ascending", func(h *wire.Header, b []byte) []byte { h.Area[24] = 9; return b }, wire.ErrMalformed},
		{"owner among followers", func(h *wire.Header, b []byte) []byte { h.Area[26] = 3; return b }, wire.ErrMalformed},
		{"reserved byte", func(h *wire.Header, b []byte) []byte { h.Area[12] = 1; return b }, wire.ErrReserved},
		{"start past the epoch", func(h *wire.Header, b []byte) []byte { h.Area[0] = 4; return b }, wire.ErrMalformed},
		{"start reserved bytes", func(h *wire.Header, b []byte) []byte { b[24+6] = 1; return b }, wire.ErrBadEntry},
		{"start list cut short", func(h *wire.Header, b []byte) []byte { return b[:30] }, wire.ErrEntryCount},
		{"starts out of order", func(h *wire.Header, b []byte) []byte { b[0] = 9; return b }, wire.ErrMalformed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h2 := h
			b := c.mut(&h2, append([]byte(nil), body...))
			if _, _, err := wire.DecodeStreamAssignment(&h2, b); !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
		})
	}
}

// A follower reports a silent owner, an owner its restart within its epoch, in its heartbeat entry;
// an unknown flag is a bad entry, skipped alone.
func TestCopyTail_Flags(t *testing.T) {
	copies := []wire.CopyTail{
		{Stream: 4, Incarnation: 1, Epoch: 3, RecordTail: 9, Role: wire.RoleFollower, Flags: wire.CopyOwnerSilent},
		{Stream: 5, Incarnation: 1, Epoch: 3, RecordTail: 9, Role: wire.RoleOwner, Flags: wire.CopyOwnerRestarted},
	}
	frame := wire.AppendNodeHeartbeat(nil, fromNode, &wire.NodeHeartbeat{Sequence: 1}, copies)
	h, body, err := wire.ParseFrame(frame)
	if err != nil {
		t.Fatal(err)
	}
	_, l, err := wire.DecodeNodeHeartbeat(&h, body)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range copies {
		if got, err := l.At(i); err != nil || got != want {
			t.Fatalf("entry %d: %+v, %v; want %+v", i, got, err, want)
		}
	}
	body[wire.CopyTailSize+33] = 0x80 // an unknown flag on the second entry
	if _, err := l.At(1); !errors.Is(err, wire.ErrEntryReserved) {
		t.Fatalf("unknown flag: %v", err)
	}
	if got, err := l.At(0); err != nil || got != copies[0] {
		t.Fatalf("the good entry after a bad one: %+v, %v", got, err)
	}
}

// A copy whose log failed says so, with the cause, in its heartbeat entry; a cause without the flag,
// the flag without a cause, or an unknown cause is a bad entry, skipped alone.
func TestCopyTail_LogFailed(t *testing.T) {
	copies := []wire.CopyTail{
		{Stream: 4, Incarnation: 1, Epoch: 3, RecordTail: 9, Role: wire.RoleFollower, Flags: wire.CopyLogFailed,
			Cause: wire.LogFailNoSpace},
		{Stream: 5, Incarnation: 2, Epoch: 3, RecordTail: 7, Role: wire.RoleOwner,
			Flags: wire.CopyLogFailed | wire.CopyOwnerRestarted, Cause: wire.LogFailIO},
		{Stream: 6, Incarnation: 1, Epoch: 1, RecordTail: 1, Role: wire.RoleFollower},
	}
	frame := wire.AppendNodeHeartbeat(nil, fromNode, &wire.NodeHeartbeat{Sequence: 1}, copies)
	h, body, err := wire.ParseFrame(frame)
	if err != nil {
		t.Fatal(err)
	}
	_, l, err := wire.DecodeNodeHeartbeat(&h, body)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range copies {
		if got, err := l.At(i); err != nil || got != want {
			t.Fatalf("entry %d: %+v, %v; want %+v", i, got, err, want)
		}
	}
	bad := []struct {
		name  string
		entry int
		mut   func(b []byte)
	}{
		{"cause without the flag", 2, func(b []byte) { b[34] = byte(wire.LogFailNoSpace) }},
		{"flag without a cause", 0, func(b []byte) { b[34] = 0 }},
		{"unknown cause", 0, func(b []byte) { b[34] = 99 }},
		{"reserved byte past the cause", 0, func(b []byte) { b[35] = 1 }},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			b := append([]byte(nil), body...)
			c.mut(b[c.entry*wire.CopyTailSize:])
			_, l, err := wire.DecodeNodeHeartbeat(&h, b)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := l.At(c.entry); !errors.Is(err, wire.ErrEntryReserved) {
				t.Fatalf("got %v, want a reserved-bytes refusal", err)
			}
			if got, err := l.At(1); err != nil || got != copies[1] {
				t.Fatalf("the good entry beside a bad one: %+v, %v", got, err)
			}
		})
	}
	if got := wire.LogFailNoSpace.String(); got != "no_space" {
		t.Fatalf("cause name %q", got)
	}
}
