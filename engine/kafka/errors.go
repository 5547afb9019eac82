package kafka

import (
	"errors"

	"github.com/ringstream/ringstream/wire"
)

// Kafka error codes this listener answers with (Kafka's protocol guide, "Error Codes").
const (
	errNone                 int16 = 0
	errUnknownServer        int16 = -1
	errOffsetOutOfRange     int16 = 1
	errCorruptMessage       int16 = 2
	errUnknownTopicOrPart   int16 = 3
	errLeaderNotAvailable   int16 = 5
	errNotLeader            int16 = 6
	errRequestTimedOut      int16 = 7
	errMessageTooLarge      int16 = 10
	errInvalidTopic         int16 = 17
	errInvalidRequiredAcks  int16 = 21
	errUnsupportedVersion   int16 = 35
	errTopicExists          int16 = 36
	errInvalidPartitions    int16 = 37
	errInvalidReplication   int16 = 38
	errInvalidRequest       int16 = 42
	errOutOfOrderSequence   int16 = 45
	errInvalidProducerEpoch int16 = 47
	errStorage              int16 = 56
	errUnsupportedCompress  int16 = 76
	errInvalidRecord        int16 = 87
	errTransactionalIDAuthz int16 = 53
)

// codeOf maps a node's refusal of a client request to the Kafka error a client acts on.
func codeOf(c wire.ErrorCode) int16 {
	switch c {
	case wire.CodeNotOwner, wire.CodeFenced:
		return errNotLeader // the client refreshes its metadata and follows the new owner
	case wire.CodeUnknownStream, wire.CodeStaleIncarnation:
		return errUnknownTopicOrPart
	case wire.CodeStreamExists:
		return errTopicExists
	case wire.CodeUnavailable, wire.CodeNotYet:
		return errLeaderNotAvailable // no owner yet (a recovery), or the owner not serving yet: retry
	case wire.CodeOverloaded:
		return errRequestTimedOut
	case wire.CodeBatchTooLarge:
		return errMessageTooLarge
	case wire.CodeSequenceGap:
		return errOutOfOrderSequence
	case wire.CodeProducerFenced:
		return errInvalidProducerEpoch
	case wire.CodeLogFailed:
		return errStorage
	case wire.CodeBadStreamName:
		return errInvalidTopic
	case wire.CodeBadCopies:
		return errInvalidReplication
	case wire.CodeInvalidRequest, wire.CodeBadPolicy, wire.CodeBadCount, wire.CodeBadSize, wire.CodeBadFormat,
		wire.CodeBadConsumerName:
		return errInvalidRequest
	}
	return errUnknownServer
}

// batchErrorCode maps a produced batch's refusal (parseProducedBatch) to its Kafka error.
func batchErrorCode(err error) int16 {
	switch {
	case errors.Is(err, ErrCompression):
		return errUnsupportedCompress
	case errors.Is(err, ErrBatchKind), errors.Is(err, ErrProducerFields):
		return errInvalidRecord
	}
	return errCorruptMessage
}
