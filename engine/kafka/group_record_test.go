package kafka

import (
	"errors"
	"testing"

	"github.com/ringstream/ringstream/wire"
)

func TestOffsetRecord_RoundTripAndRefusals(t *testing.T) {
	o := offsetRecord{group: "g1", topic: "orders", partition: 3, offset: 12345, leaderEpoch: -1, metadata: "m",
		commitMs: 1700000000000}
	b := appendOffsetRecord(nil, &o)
	got, err := decodeOffsetRecord(b)
	if err != nil || got != o {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	for i := range b { // every cut is refused, none panics
		if _, err := decodeOffsetRecord(b[:i]); !errors.Is(err, errOffsetRecord) {
			t.Fatalf("record cut at %d of %d bytes: %v", i, len(b), err)
		}
	}
	if _, err := decodeOffsetRecord(append(b, 0)); !errors.Is(err, errOffsetRecord) {
		t.Fatalf("a byte past the record: %v", err)
	}
	var payload []byte
	payload = appendValue(payload, b)
	payload = appendValue(payload, []byte("x"))
	var n int
	if err := eachValue(payload, func([]byte) { n++ }); err != nil || n != 2 {
		t.Fatalf("values: %d, %v", n, err)
	}
	if err := eachValue(payload[:len(payload)-1], func([]byte) {}); !errors.Is(err, errOffsetRecord) {
		t.Fatalf("a cut value: %v", err)
	}
}

// TestGroupStreamName: the internal streams pass the stream name rule, are no topic (Metadata does not
// list them, Produce cannot reach them), and spread groups over all groupStreams of them.
func TestGroupStreamName(t *testing.T) {
	seen := make(map[string]bool)
	for i := range 200 {
		name := groupStreamName("group-" + uintString(uint64(i)))
		if err := wire.ValidateStreamName(name); err != nil {
			t.Fatalf("%q: %v", name, err)
		}
		if _, _, ok := SplitStreamName(name); ok {
			t.Fatalf("%q reads as a topic's partition", name)
		}
		seen[name] = true
	}
	if len(seen) != groupStreams {
		t.Fatalf("200 groups over %d streams, want all %d", len(seen), groupStreams)
	}
	if groupStreamName("same") != groupStreamName("same") {
		t.Fatal("not a function of the group id")
	}
}

// TestGroupCodeOf: a refusal of the internal stream becomes the group error clients act on.
func TestGroupCodeOf(t *testing.T) {
	for in, want := range map[int16]int16{errNone: errNone, errNotLeader: errNotCoordinator,
		errUnknownTopicOrPart: errNotCoordinator, errLeaderNotAvailable: errCoordinatorNotAvailable,
		errRequestTimedOut: errRequestTimedOut, errStorage: errCoordinatorNotAvailable} {
		if got := groupCodeOf(in); got != want {
			t.Errorf("groupCodeOf(%d) = %d, want %d", in, got, want)
		}
	}
}

// TestGroupValidation: the rules of a group id and of a committed offset's partition.
func TestGroupValidation(t *testing.T) {
	long := string(make([]byte, groupIDMax+1))
	for id, want := range map[string]int16{"g": errNone, "": errInvalidGroupID, long: errInvalidGroupID,
		long[:groupIDMax]: errNone} {
		if got := validateGroupID(id); got != want {
			t.Errorf("group id of %d bytes: %d, want %d", len(id), got, want)
		}
	}
	md := string(make([]byte, offsetMetadataMax))
	for _, c := range []struct {
		topic     string
		partition int32
		metadata  string
		want      int16
	}{
		{"orders", 0, "", errNone}, {"orders", PartitionsMax - 1, md, errNone},
		{"orders", -1, "", errUnknownTopicOrPart}, {"orders", PartitionsMax, "", errUnknownTopicOrPart},
		{"bad topic", 0, "", errUnknownTopicOrPart}, {"orders", 0, md + "x", errOffsetMetadataTooLarge},
	} {
		if got := validateCommitPartition(c.topic, c.partition, c.metadata); got != c.want {
			t.Errorf("commit %q/%d with %d bytes of metadata: %d, want %d", c.topic, c.partition, len(c.metadata), got,
				c.want)
		}
	}
}
