package wire_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/ringstream/ringstream/wire"
)

// TestStreamNameRule: the name alphabet is [A-Za-z0-9._-], 1 to 255 bytes, not "." or "..", and the
// create decoder, the name-request decoder and ValidateStreamName agree on every name (issue 21 finding
// 1: three layers had three rules, and a name one took crashed another).
func TestStreamNameRule(t *testing.T) {
	good := []string{"orders", "a", "A-Z_0.9", "...", ".a", "a..", strings.Repeat("n", wire.NameSizeMax)}
	bad := []string{"", ".", "..", "orders/eu", "a b/c", "naïve", "a\x00b", "tab\t", "\xff", "a*", "a:b", "%2e",
		strings.Repeat("n", wire.NameSizeMax+1)}
	create := wire.CreateStream{RequestID: 1, Name: []byte("x"), Copies: 1, Policy: wire.PolicyMajority}
	hc, _ := parse(t, wire.AppendCreateStream(nil, fromClient, &create))
	hl, _ := parse(t, wire.AppendLookupStream(nil, fromClient, &wire.LookupStream{RequestID: 2, Name: []byte("x")}))
	check := func(name string, want bool) {
		t.Helper()
		errs := []error{wire.ValidateStreamName(name)}
		_, err := wire.DecodeCreateStream(&hc, []byte(name))
		errs = append(errs, err)
		_, err = wire.DecodeLookupStream(&hl, []byte(name))
		errs = append(errs, err)
		for i, err := range errs {
			if want {
				if err != nil {
					t.Errorf("name %q (check %d): refused: %v", name, i, err)
				}
				continue
			}
			if wire.CodeOf(err) != wire.CodeBadStreamName || !errors.Is(err, wire.ErrRule) || !errors.Is(err, wire.ErrMalformed) {
				t.Errorf("name %q (check %d): got %v (code %d), want CodeBadStreamName", name, i, err, wire.CodeOf(err))
			} else if !strings.Contains(err.Error(), wire.StreamNameRule) {
				t.Errorf("name %q (check %d): %q does not state the rule", name, i, err)
			}
		}
	}
	for _, n := range good {
		check(n, true)
	}
	for _, n := range bad {
		check(n, false)
	}
}

// TestConsumerNameRule: cursor requests refuse a consumer name outside the alphabet with its own code.
func TestConsumerNameRule(t *testing.T) {
	h, _ := parse(t, wire.AppendCommitCursor(nil, fromClient, &wire.CursorRequest{RequestID: 1, Stream: 1, Consumer: []byte("c"), Offset: 3}))
	for _, name := range []string{"group a", "", "..", "g/1"} {
		_, err := wire.DecodeCommitCursor(&h, []byte(name))
		if wire.CodeOf(err) != wire.CodeBadConsumerName || !strings.Contains(err.Error(), wire.ConsumerNameRule) {
			t.Errorf("consumer %q: got %v", name, err)
		}
		if wire.CodeOf(wire.ValidateConsumerName(name)) != wire.CodeBadConsumerName {
			t.Errorf("consumer %q: ValidateConsumerName took it", name)
		}
	}
	if _, err := wire.DecodeCommitCursor(&h, []byte("group-a.1")); err != nil {
		t.Errorf("good consumer name: %v", err)
	}
}

// TestCopiesAndPolicyRules: copy counts 1..7 (and at most the nodes), and a policy whose count fits the
// copies, each refused with its own code by the rule and by the create decoder.
func TestCopiesAndPolicyRules(t *testing.T) {
	for _, c := range []struct {
		copies uint8
		nodes  int
		ok     bool
	}{{1, 0, true}, {7, 0, true}, {0, 0, false}, {8, 0, false}, {3, 3, true}, {5, 3, false}} {
		err := wire.ValidateCopies(c.copies, c.nodes)
		if (err == nil) != c.ok || (err != nil && wire.CodeOf(err) != wire.CodeBadCopies) {
			t.Errorf("copies %d on %d nodes: %v", c.copies, c.nodes, err)
		}
	}
	for _, c := range []struct {
		p             wire.ConfirmPolicy
		count, copies uint8
		ok            bool
	}{{wire.PolicyMajority, 0, 3, true}, {wire.PolicyCount, 3, 3, true}, {wire.PolicyCount, 4, 3, false},
		{wire.PolicyCount, 0, 3, false}, {wire.PolicyAll, 1, 3, false}, {0, 0, 3, false}, {4, 0, 3, false}} {
		err := wire.ValidatePolicy(c.p, c.count, c.copies)
		if (err == nil) != c.ok || (err != nil && wire.CodeOf(err) != wire.CodeBadPolicy) {
			t.Errorf("policy %d count %d on %d copies: %v", c.p, c.count, c.copies, err)
		}
	}
	create := wire.CreateStream{RequestID: 1, Name: []byte("x"), Copies: 3, Policy: wire.PolicyMajority}
	h, body := parse(t, wire.AppendCreateStream(nil, fromClient, &create))
	h.Area[8] = 9 // copies
	if _, err := wire.DecodeCreateStream(&h, body); wire.CodeOf(err) != wire.CodeBadCopies {
		t.Errorf("9 copies: %v", err)
	}
	h.Area[8], h.Area[9], h.Area[10] = 3, uint8(wire.PolicyCount), 4
	if _, err := wire.DecodeCreateStream(&h, body); wire.CodeOf(err) != wire.CodeBadPolicy {
		t.Errorf("count 4 of 3 copies: %v", err)
	}
}

// TestCountAndSizeRules: a list limit of 0 and a fetch of 0 bytes are refused with their codes.
func TestCountAndSizeRules(t *testing.T) {
	h, body := parse(t, wire.AppendListStreams(nil, fromClient, &wire.ListStreams{RequestID: 1, Limit: 1}))
	h.Area[16] = 0
	if _, err := wire.DecodeListStreams(&h, body); wire.CodeOf(err) != wire.CodeBadCount || !strings.Contains(err.Error(), wire.CountRule) {
		t.Errorf("limit 0: %v", err)
	}
	h, body = parse(t, wire.AppendFetch(nil, fromClient, &wire.Fetch{RequestID: 1, Stream: 1, BytesMax: 1}))
	h.Area[16] = 0
	if _, err := wire.DecodeFetch(&h, body); wire.CodeOf(err) != wire.CodeBadSize || !strings.Contains(err.Error(), wire.SizeRule) {
		t.Errorf("bytes_max 0: %v", err)
	}
	if wire.CodeOf(errors.New("other")) != wire.CodeInvalidRequest {
		t.Error("CodeOf of an error without a rule is not CodeInvalidRequest")
	}
	if wire.ValidateNodeID("owner", 0) == nil || wire.ValidateNodeID("owner", 1) != nil {
		t.Error("node id rule")
	}
}

// TestFormatRule: a produce carries format 1 or 2 to the node; 0 (a sender that predates formats) is
// read as 1, anything else is refused with CodeBadFormat naming FormatRule.
func TestFormatRule(t *testing.T) {
	for _, tc := range []struct{ sent, read uint8 }{{0, wire.FormatValues}, {1, wire.FormatValues}, {2, wire.FormatRecords}} {
		m := wire.Produce{RequestID: 1, Stream: 3, Format: tc.sent, Count: 1, Batch: []byte("b")}
		h, body := parse(t, wire.AppendProduce(nil, fromClient, &m))
		got, err := wire.DecodeProduce(&h, body)
		if err != nil || got.Format != tc.read {
			t.Errorf("format %d: decoded format %d, err %v; want %d", tc.sent, got.Format, err, tc.read)
		}
	}
	for _, f := range []uint8{3, 4, 255} {
		m := wire.Produce{RequestID: 1, Stream: 3, Format: f, Count: 1, Batch: []byte("b")}
		h, body := parse(t, wire.AppendProduce(nil, fromClient, &m))
		_, err := wire.DecodeProduce(&h, body)
		if wire.CodeOf(err) != wire.CodeBadFormat || !errors.Is(err, wire.ErrRule) || !strings.Contains(err.Error(), wire.FormatRule) {
			t.Errorf("format %d: got %v (code %d), want CodeBadFormat stating the rule", f, err, wire.CodeOf(err))
		}
		if wire.CodeOf(wire.ValidateFormat(f)) != wire.CodeBadFormat {
			t.Errorf("format %d: ValidateFormat took it", f)
		}
	}
}
