package kafka

// Kafka error codes of the group coordinator (Kafka's protocol guide, "Error Codes").
const (
	errOffsetMetadataTooLarge    int16 = 12
	errCoordinatorLoading        int16 = 14 // COORDINATOR_LOAD_IN_PROGRESS
	errCoordinatorNotAvailable   int16 = 15
	errNotCoordinator            int16 = 16
	errIllegalGeneration         int16 = 22
	errInconsistentGroupProtocol int16 = 23
	errInvalidGroupID            int16 = 24
	errUnknownMemberID           int16 = 25
	errInvalidSessionTimeout     int16 = 26
	errRebalanceInProgress       int16 = 27
	errGroupIDNotFound           int16 = 69
	errMemberIDRequired          int16 = 79
	errGroupMaxSize              int16 = 81
)

// groupCodeOf maps the Kafka error of a request to the coordinator's internal stream (codeOf) to
// the error a group client acts on: a stream this node does not own, or that does not exist here,
// is NOT_COORDINATOR (the client finds the coordinator again); a stream without an owner yet is
// COORDINATOR_NOT_AVAILABLE (it retries).
func groupCodeOf(code int16) int16 {
	switch code {
	case errNone:
		return errNone
	case errNotLeader, errUnknownTopicOrPart:
		return errNotCoordinator
	case errLeaderNotAvailable:
		return errCoordinatorNotAvailable
	case errRequestTimedOut:
		return errRequestTimedOut
	}
	return errCoordinatorNotAvailable
}
