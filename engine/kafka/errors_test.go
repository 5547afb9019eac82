package kafka

import (
	"testing"

	"github.com/ringstream/ringstream/wire"
)

// The errors clients act on: each refusal of the node maps to the Kafka error a client follows.
func TestCodeOf(t *testing.T) {
	for code, want := range map[wire.ErrorCode]int16{
		wire.CodeNotOwner:         errNotLeader,          // the owner moved: refresh metadata, follow
		wire.CodeFenced:           errNotLeader,          // a sealed copy: the same
		wire.CodeUnavailable:      errLeaderNotAvailable, // no owner during a recovery
		wire.CodeNotYet:           errLeaderNotAvailable,
		wire.CodeLogFailed:        errStorage, // the record log failed
		wire.CodeUnknownStream:    errUnknownTopicOrPart,
		wire.CodeStreamExists:     errTopicExists,
		wire.CodeBatchTooLarge:    errMessageTooLarge,
		wire.CodeSequenceGap:      errOutOfOrderSequence,
		wire.CodeProducerFenced:   errInvalidProducerEpoch, // a newer session of the producer fenced it
		wire.CodeOverloaded:       errRequestTimedOut,
		wire.CodeBadCopies:        errInvalidReplication,
		wire.CodeBadStreamName:    errInvalidTopic,
		wire.CodeInvalidRequest:   errInvalidRequest,
		wire.CodeInternal:         errUnknownServer,
		wire.CodeStaleIncarnation: errUnknownTopicOrPart,
	} {
		if got := codeOf(code); got != want {
			t.Errorf("wire code %d: Kafka error %d, want %d", code, got, want)
		}
	}
}
