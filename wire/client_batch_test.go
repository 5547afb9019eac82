package wire_test

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/ringstream/ringstream/wire"
)

func namesOf(ss ...string) [][]byte {
	out := make([][]byte, len(ss))
	for i, s := range ss {
		out[i] = []byte(s)
	}
	return out
}

// TestStreamNames_Rules: a batched request's names are 1..StreamsPerRequestMax valid stream names,
// strictly ascending; every other list is refused with the rule it breaks.
func TestStreamNames_Rules(t *testing.T) {
	many := make([][]byte, wire.StreamsPerRequestMax+1)
	for i := range many {
		many[i] = []byte(fmt.Sprintf("s%05d", i))
	}
	cases := []struct {
		name  string
		names [][]byte
		code  wire.ErrorCode
		rule  string
	}{
		{"none", nil, wire.CodeBadCount, wire.CountRule},
		{"too many", many, wire.CodeBadCount, wire.CountRule},
		{"twice", namesOf("a", "b", "b"), wire.CodeBadStreamName, "strictly ascending"},
		{"descending", namesOf("b", "a"), wire.CodeBadStreamName, "strictly ascending"},
		{"bad name", namesOf("a", "b c"), wire.CodeBadStreamName, wire.StreamNameRule},
		{"empty name", namesOf("", "a"), wire.CodeBadStreamName, wire.StreamNameRule},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := wire.StreamNamesOf(c.names)
			if err == nil {
				t.Fatal("accepted")
			}
			if got := wire.CodeOf(err); got != c.code {
				t.Fatalf("code %d, want %d (%v)", got, c.code, err)
			}
			if !strings.Contains(err.Error(), c.rule) {
				t.Fatalf("%q does not name %q", err, c.rule)
			}
		})
	}
	l, err := wire.StreamNamesOf(many[:wire.StreamsPerRequestMax])
	if err != nil || l.Len() != wire.StreamsPerRequestMax {
		t.Fatalf("the most names a request holds: %v, %d", err, l.Len())
	}
}

// TestCreateStreams_DecoderRefusesWhatTheEncoderWouldNot: a frame whose names break the rule
// (here the second name repeats the first) is refused by the node's decoder, and so is one whose
// body runs past its last name.
func TestCreateStreams_DecoderRefusesWhatTheEncoderWouldNot(t *testing.T) {
	names, err := wire.StreamNamesOf(namesOf("a", "b"))
	if err != nil {
		t.Fatal(err)
	}
	frame := wire.AppendCreateStreams(nil, fromClient, &wire.CreateStreams{RequestID: 1, Copies: 1, Policy: wire.PolicyAll, Names: names})
	h, body, err := wire.ParseFrame(frame)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wire.DecodeCreateStreams(&h, body); err != nil {
		t.Fatal(err)
	}
	dup := bytes.Clone(body)
	dup[3] = 'a' // "\x01a\x01b" -> "\x01a\x01a"
	if _, err := wire.DecodeCreateStreams(&h, dup); wire.CodeOf(err) != wire.CodeBadStreamName {
		t.Fatalf("a repeated name: %v", err)
	}
	if _, err := wire.DecodeCreateStreams(&h, append(bytes.Clone(body), 0)); !errors.Is(err, wire.ErrTrailingBytes) {
		t.Fatalf("a byte after the last name: %v", err)
	}
	h.EntryCount = 3
	if _, err := wire.DecodeCreateStreams(&h, body); err == nil {
		t.Fatal("a count past the names was accepted")
	}
}

// A batched reply is checked outcome by outcome: an unknown code, a name that took effect on
// stream 0, a message that is not UTF-8 and a count that does not match the body are refused.
func TestStreamsReply_DecoderRefusals(t *testing.T) {
	good := []wire.StreamOutcome{{Stream: 5, Incarnation: 1, Message: []byte{}}}
	frame := wire.AppendCreateStreamsReply(nil, fromNode, &wire.StreamsReply{RequestID: 3}, good)
	h, body, err := wire.ParseFrame(frame)
	if err != nil {
		t.Fatal(err)
	}
	if _, got, err := wire.DecodeCreateStreamsReply(&h, body); err != nil || len(got) != 1 || got[0].Stream != 5 {
		t.Fatalf("the good reply: %+v %v", got, err)
	}
	// Outcome layout: code u16 | incarnation u32 | stream u64 | message_len u16 | message.
	bad := func(name string, edit func(b []byte) []byte) {
		b := edit(bytes.Clone(body))
		if _, _, err := wire.DecodeCreateStreamsReply(&h, b); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	bad("unknown code", func(b []byte) []byte { b[0], b[1] = 0xff, 0x00; return b })
	bad("took effect on stream 0", func(b []byte) []byte { clear(b[6:14]); return b })
	bad("message not UTF-8", func(b []byte) []byte { b[14] = 1; return append(b, 0xff) })
	bad("a byte past the last outcome", func(b []byte) []byte { return append(b, 0) })
	h2 := h
	h2.EntryCount = 2
	if _, _, err := wire.DecodeCreateStreamsReply(&h2, body); err == nil {
		t.Error("a count past the outcomes: accepted")
	}
}
