package adminapi

// StageTrace is the answer to GET /v1/stages: the record batches this node traced since POST
// /v1/stages/start, each with the CLOCK_MONOTONIC instants (nanoseconds) it passed its stages here.
// Every process of the machine reads the same clock, so `ringstream bench --trace-stages` lines
// them up with its client's instants and the other nodes' into one budget per batch.
type StageTrace struct {
	Node uint16 `json:"node"`
	On   bool   `json:"on"`
	// Dropped counts traces begun and never finished that were pushed out of a shard's open table,
	// and finished traces overwritten in a full log before they were read.
	Dropped uint64       `json:"dropped"`
	Entries []StageEntry `json:"entries"`
}

// Kinds of StageEntry.
const (
	StageRequest  = "request"  // a produce as the client handler saw it: Received, Replied
	StageOwner    = "owner"    // the owner's batch: Appended, Submitted, Durable, Answers, Confirmed
	StageFollower = "follower" // a follower's prepare: Received, Submitted, Durable, Answered
)

// StageEntry is one traced batch (request, owner) or prepare (follower) on one node. Instants are
// CLOCK_MONOTONIC nanoseconds; 0 means not seen.
type StageEntry struct {
	Kind   string `json:"kind"`
	Stream uint64 `json:"stream"`
	// Producer and Sequence name a produced batch (request, owner).
	Producer uint64 `json:"producer,omitempty"`
	Sequence uint64 `json:"sequence,omitempty"`
	// Base and End are the record offsets it covers (owner: the batch; follower: the prepare).
	Base uint64 `json:"base,omitempty"`
	End  uint64 `json:"end,omitempty"`
	// Peer is a follower's owner node.
	Peer uint16 `json:"peer,omitempty"`
	// Quorum is the owner's W: the copies, itself counted, that must hold the batch to confirm it.
	Quorum int `json:"quorum,omitempty"`

	// Received: request: the produce was decoded on the stream's shard; follower: the prepare was.
	Received int64 `json:"received,omitempty"`
	// Appended: owner: the copy stepped the batch, queued its append and its prepares.
	Appended int64 `json:"appended,omitempty"`
	// Submitted: the group commit holding the batch had its writes queued on the ring.
	Submitted int64 `json:"submitted,omitempty"`
	// Durable: that group commit's fdatasync completed.
	Durable int64 `json:"durable,omitempty"`
	// Answers: owner: each follower's answer that covered the batch, as it arrived.
	Answers []StageAnswer `json:"answers,omitempty"`
	// Answered: follower: the prepare-ok covering the prepare was queued to the owner.
	Answered int64 `json:"answered,omitempty"`
	// Confirmed: owner: the confirmed tail passed the batch and its reply was made.
	Confirmed int64 `json:"confirmed,omitempty"`
	// Replied: request: the reply was handed to the client's connection.
	Replied int64 `json:"replied,omitempty"`
}

// StageAnswer is one follower's answer, as its owner received it.
type StageAnswer struct {
	Node uint16 `json:"node"`
	At   int64  `json:"at"`
}
