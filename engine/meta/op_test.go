package meta

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// sampleOps holds one valid op of every kind, with every field set away from its zero value where the
// kind allows it, so a field dropped or swapped by the codec shows up.
func sampleOps() []Op {
	majority := Policy{Kind: PolicyMajorityDurable}
	return []Op{
		RegisterNode{Node: 7, Address: "10.0.0.7:7000"},
		DecommissionNode{Node: 7},
		CreateStream{Name: "orders.eu-1_a", Copies: 3, Policy: majority, Owner: 4, Followers: []uint16{2, 9},
			Stamped: Policy{Kind: PolicyCountAccepted, Count: 2}},
		CreateStream{Name: "solo", Copies: 1, Policy: Policy{Kind: PolicyLocalDurable}, Owner: 1},
		DeleteStream{Stream: 0x0102030405060708, Incarnation: 0x0a0b0c0d},
		SetAssignment{Stream: 3, Incarnation: 2, ExpectedEpoch: 5, Owner: 1, Followers: []uint16{2, 3, 4},
			Policy: majority},
		RecordRecovery{Stream: 3, Incarnation: 2, ExpectedEpoch: 5, Replaces: 77, ProposedOwner: 3,
			Members: []uint16{2, 3, 6}, Policy: majority, Reason: ReasonEagerFailover},
		WithdrawRecovery{Stream: 3, Incarnation: 2, Recovery: 99},
		CommitRecovery{Stream: 3, Incarnation: 2, Recovery: 99, ExpectedEpoch: 5, ExpectedStartsVersion: 4,
			Owner: 3, RecordTail: 1 << 40, CursorTail: 12345, Sealed: []uint16{2, 3}},
		AcceptOwnerLoss{Stream: 3, Incarnation: 2, Recovery: 99, Owner: 2, TailsPublished: true,
			RecordTail: 500, CursorTail: 20},
		AcceptOwnerLoss{Stream: 3, Incarnation: 2, Recovery: 99, Owner: 2},
		RecordRecoveries{Entries: []RecordRecovery{
			{Stream: 3, Incarnation: 2, ExpectedEpoch: 5, Replaces: 77, ProposedOwner: 3,
				Members: []uint16{2, 3, 6}, Policy: majority, Reason: ReasonEagerFailover},
			{Stream: 0x0102030405060708, Incarnation: 9, ExpectedEpoch: 1, ProposedOwner: 4,
				Members: []uint16{4}, Policy: Policy{Kind: PolicyCountAccepted, Count: 1}, Reason: ReasonPlacement}}},
		CommitRecoveries{Entries: []CommitRecovery{
			{Stream: 3, Incarnation: 2, Recovery: 99, ExpectedEpoch: 5, ExpectedStartsVersion: 4,
				Owner: 3, RecordTail: 1 << 40, CursorTail: 12345, Sealed: []uint16{2, 3}},
			{Stream: 8, Incarnation: 1, Recovery: 100, ExpectedEpoch: 2, Owner: 1, Sealed: []uint16{1, 2, 3, 4, 5, 6, 7}}}},
		SetAssignments{Entries: []SetAssignment{
			{Stream: 3, Incarnation: 2, ExpectedEpoch: 5, Owner: 1, Followers: []uint16{2, 3, 4}, Policy: majority},
			{Stream: 4, Incarnation: 1, ExpectedEpoch: 7, Owner: 2, Policy: Policy{Kind: PolicyLocalDurable}}}},
		CreateStreams{Entries: []CreateStream{
			{Name: "t.0", Copies: 3, Policy: majority, Owner: 2, Followers: []uint16{1, 3}, Stamped: Policy{Kind: PolicyCountAccepted, Count: 2}},
			{Name: "t.1", Copies: 1, Policy: Policy{Kind: PolicyLocalDurable}, Owner: 3, Stamped: Policy{Kind: PolicyLocalDurable}}}},
		DeleteStreams{Entries: []DeleteStream{{Stream: 3, Incarnation: 2}, {Stream: 9, Incarnation: 1 << 30}}},
	}
}

func TestOpCodec_RoundTripsEveryKind(t *testing.T) {
	for _, op := range sampleOps() {
		t.Run(op.Kind().String(), func(t *testing.T) {
			b := AppendOp([]byte("prefix"), op)
			if string(b[:6]) != "prefix" {
				t.Fatalf("AppendOp overwrote dst")
			}
			got, err := DecodeOp(b[6:])
			if err != nil {
				t.Fatalf("DecodeOp: %v", err)
			}
			if !reflect.DeepEqual(got, op) {
				t.Fatalf("round trip:\n got %#v\nwant %#v", got, op)
			}
		})
	}
}

func TestOpCodec_DecodedSlicesDoNotAliasInput(t *testing.T) {
	op := CommitRecovery{Stream: 1, Incarnation: 1, Recovery: 2, ExpectedEpoch: 1, Owner: 2, Sealed: []uint16{2, 3}}
	b := AppendOp(nil, op)
	got, err := DecodeOp(b)
	if err != nil {
		t.Fatal(err)
	}
	clear(b)
	if !reflect.DeepEqual(got, op) {
		t.Fatalf("decoded op changed when its input was overwritten: %#v", got)
	}
}

// Every strict prefix of a valid op is refused as short, and one extra byte as trailing.
func TestDecodeOp_RefusesTruncatedAndTrailingBytes(t *testing.T) {
	for _, op := range sampleOps() {
		b := AppendOp(nil, op)
		for n := 0; n < len(b); n++ {
			if _, err := DecodeOp(b[:n]); !errors.Is(err, ErrOpShort) {
				t.Fatalf("%s cut to %d of %d bytes: err %v, want ErrOpShort", op.Kind(), n, len(b), err)
			}
		}
		if _, err := DecodeOp(append(b, 0)); !errors.Is(err, ErrOpTrailing) {
			t.Fatalf("%s with a trailing byte: err %v, want ErrOpTrailing", op.Kind(), err)
		}
	}
}

func TestDecodeOp_RefusesUnknownVersionAndKind(t *testing.T) {
	b := AppendOp(nil, DecommissionNode{Node: 1})
	b[0] = opVersion + 1
	if _, err := DecodeOp(b); !errors.Is(err, ErrOpVersion) {
		t.Fatalf("version %d: err %v, want ErrOpVersion", b[0], err)
	}
	for _, kind := range []byte{0, byte(OpDeleteStreams) + 1, 255} {
		if _, err := DecodeOp([]byte{opVersion, kind, 1, 0}); !errors.Is(err, ErrOpKind) {
			t.Fatalf("kind %d: err %v, want ErrOpKind", kind, err)
		}
	}
}

// A list count above its bound is refused before any element is read.
func TestDecodeOp_RefusesOverlongNodeList(t *testing.T) {
	b := AppendOp(nil, WithdrawRecovery{Stream: 1, Incarnation: 1, Recovery: 1})
	b[1] = byte(OpCommitRecovery)
	b = b[:2]
	b = append(b, make([]byte, 8+4+8+4+8+2+8+8)...)
	b = append(b, CopiesMax+1)
	for range CopiesMax + 1 {
		b = append(b, 1, 0)
	}
	if _, err := DecodeOp(b); !errors.Is(err, ErrOpShort) {
		t.Fatalf("err %v, want ErrOpShort for a sealed list of %d", err, CopiesMax+1)
	}
}

// Bytes that decode into an op breaking its own rules are refused as invalid, never applied.
func TestDecodeOp_RefusesOpsThatFailValidate(t *testing.T) {
	cases := []struct {
		name string
		body []byte // after version and kind
		kind OpKind
	}{
		{"node id 0", []byte{0, 0, 1, 'a'}, OpRegisterNode},
		{"empty address", []byte{1, 0, 0}, OpRegisterNode},
		{"tails-published byte 2", append(append(make([]byte, 8+4+8), 2, 0, 2), make([]byte, 16)...), OpAcceptOwnerLoss},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := append([]byte{opVersion, byte(c.kind)}, c.body...)
			if _, err := DecodeOp(b); !errors.Is(err, ErrOpInvalid) {
				t.Fatalf("err %v, want ErrOpInvalid", err)
			}
		})
	}
}

func TestOpValidate_RefusesBadShapes(t *testing.T) {
	majority := Policy{Kind: PolicyMajorityDurable}
	create := func(mod func(*CreateStream)) CreateStream {
		c := CreateStream{Name: "s", Copies: 3, Policy: majority, Owner: 1, Followers: []uint16{2, 3}, Stamped: majority}
		mod(&c)
		return c
	}
	cases := []struct {
		name string
		op   Op
	}{
		{"empty name", create(func(c *CreateStream) { c.Name = "" })},
		{"name with a slash", create(func(c *CreateStream) { c.Name = "a/b" })},
		{"name too long", create(func(c *CreateStream) { c.Name = strings.Repeat("a", NameBytesMax+1) })},
		{"zero copies", create(func(c *CreateStream) { c.Copies = 0 })},
		{"copies above max", create(func(c *CreateStream) { c.Copies = CopiesMax + 1 })},
		{"unset stream policy", create(func(c *CreateStream) { c.Policy = Policy{} })},
		{"bad stamped policy", create(func(c *CreateStream) { c.Stamped = Policy{Kind: 99} })},
		{"owner 0", create(func(c *CreateStream) { c.Owner = 0 })},
		{"owner also follower", create(func(c *CreateStream) { c.Followers = []uint16{1, 2} })},
		{"followers not ascending", create(func(c *CreateStream) { c.Followers = []uint16{3, 2} })},
		{"duplicate follower", create(func(c *CreateStream) { c.Followers = []uint16{2, 2} })},
		{"too many copies", create(func(c *CreateStream) { c.Followers = []uint16{2, 3, 4, 5, 6, 7, 8} })},
		{"delete stream 0", DeleteStream{Stream: 0, Incarnation: 1}},
		{"delete incarnation 0", DeleteStream{Stream: 1, Incarnation: 0}},
		{"set assignment epoch 0", SetAssignment{Stream: 1, Incarnation: 1, Owner: 1}},
		{"recovery without members", RecordRecovery{Stream: 1, Incarnation: 1, ExpectedEpoch: 1, ProposedOwner: 1,
			Reason: ReasonOperator}},
		{"recovery owner not a member", RecordRecovery{Stream: 1, Incarnation: 1, ExpectedEpoch: 1, ProposedOwner: 1,
			Members: []uint16{2}, Reason: ReasonOperator}},
		{"recovery reason 0", RecordRecovery{Stream: 1, Incarnation: 1, ExpectedEpoch: 1, ProposedOwner: 1,
			Members: []uint16{1}}},
		{"recovery reason unknown", RecordRecovery{Stream: 1, Incarnation: 1, ExpectedEpoch: 1, ProposedOwner: 1,
			Members: []uint16{1}, Reason: reasonMax + 1}},
		{"withdraw recovery 0", WithdrawRecovery{Stream: 1, Incarnation: 1}},
		{"commit owner not sealed", CommitRecovery{Stream: 1, Incarnation: 1, Recovery: 1, ExpectedEpoch: 1,
			Owner: 1, Sealed: []uint16{2}}},
		{"commit no sealed", CommitRecovery{Stream: 1, Incarnation: 1, Recovery: 1, ExpectedEpoch: 1, Owner: 1}},
		{"accept tails without published", AcceptOwnerLoss{Stream: 1, Incarnation: 1, Recovery: 1, Owner: 1,
			RecordTail: 5}},
		{"accept owner 0", AcceptOwnerLoss{Stream: 1, Incarnation: 1, Recovery: 1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := c.op.Validate(); !errors.Is(err, ErrOpInvalid) {
				t.Fatalf("Validate = %v, want ErrOpInvalid", err)
			}
		})
	}
}

func TestAppendOp_PanicsOnInvalidOp(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("AppendOp encoded an invalid op")
		}
	}()
	AppendOp(nil, DecommissionNode{})
}
