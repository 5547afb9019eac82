// Package adminapi holds the JSON documents a node's admin HTTP listener serves (engine/admin.go):
// GET /v1/status answers Status, GET /v1/attention answers Attention, and the operator's POST
// /v1/recovery/accept-loss and /v1/recovery/withdraw answer RecoveryAction; GET /v1/stages and POST
// /v1/stages/start and /v1/stages/stop answer StageTrace. `ringstream status`, `attention`, `recovery`
// and `bench --trace-stages` decode them with these types, so server and client cannot drift apart.
//
// It owns the types and their JSON names only: no behaviour, no imports beyond the standard library.
// Field names are snake_case; a field that does not apply to a node (no metadata replica, no
// controller) is omitted (omitempty), never filled with a zero that reads as a value.
//
// Decisions where the design is silent:
//   - Streams, owners, epochs and recoveries come from the node's own metadata replica, as applied on
//     it: a backup's view may trail the primary's by the ops in flight. A node that holds no replica
//     lists its own copies only; ask a replica for the cluster's streams.
//   - Copies are this node's serving copies as their shards see them (tails, confirmed tail, role),
//     on every node, replica or not; copies still opening or closed are not listed (failed ones are
//     in Failures).
//   - Policies and roles are strings (meta.Policy.String, engine/stream roles) so that a reader needs
//     no table of numbers.
package adminapi

// Status is the answer to GET /v1/status.
type Status struct {
	Node       uint16 `json:"node"`
	Cluster    uint64 `json:"cluster"`
	PeerAddr   string `json:"peer_addr"`
	ClientAddr string `json:"client_addr"`
	AdminAddr  string `json:"admin_addr,omitempty"`
	Shards     int    `json:"shards"`
	// State is "starting", "serving", "stopping" or "stopped".
	State string `json:"state"`
	// Registered: the metadata group has committed this node's registration (its client address).
	Registered bool `json:"registered"`

	Meta       *Meta       `json:"meta,omitempty"`       // this node's metadata replica, when it holds one
	Controller *Controller `json:"controller,omitempty"` // the controller host, when this node holds a replica
	Links      []Link      `json:"links"`
	Streams    []Stream    `json:"streams"` // from this node's metadata replica (empty without one)
	Copies     []Copy      `json:"copies"`  // this node's stream copies
	Failures   []Failure   `json:"failures,omitempty"`
	Heartbeats Heartbeats  `json:"heartbeats"`
	Retention  Retention   `json:"retention"`
}

// Retention is the node's [storage] retention of its stream logs: closed segments past Bytes of a
// log, or whose newest record is older than AgeMs, are removed (0: kept).
type Retention struct {
	Bytes int64 `json:"bytes"`
	AgeMs int64 `json:"age_ms"`
}

// Meta is this node's metadata replica.
type Meta struct {
	View       uint32 `json:"view"`
	Op         uint64 `json:"op"`
	Commit     uint64 `json:"commit"`
	Primary    bool   `json:"primary"`
	PrimaryID  uint16 `json:"primary_node"` // the node of the primary of View
	Normal     bool   `json:"normal"`
	Recovering bool   `json:"recovering"`
	// PersistError is the persist failure that took the replica out of the group ("" while its storage
	// works).
	PersistError   string `json:"persist_error,omitempty"`
	EagerFailovers uint64 `json:"eager_failovers"`
}

// Controller is the controller host on this node's replica; Active only on the metadata primary.
type Controller struct {
	Active           bool   `json:"active"`
	Heartbeats       uint64 `json:"heartbeats"`
	NodesLost        uint64 `json:"nodes_lost"`
	Proposals        uint64 `json:"proposals"`
	ProposalsRefused uint64 `json:"proposals_refused"`
	ProposalsDropped uint64 `json:"proposals_dropped"` // streams whose proposal the metadata replica refused at once (its pipeline full); proposed again
	Seals            uint64 `json:"seals"`
	SealReplies      uint64 `json:"seal_replies"`
	Attention        int    `json:"attention"` // entries in /v1/attention
	FramesDropped    uint64 `json:"frames_dropped"`
	SendFailures     uint64 `json:"send_failures"`
}

// Link is one shard's link to one peer node.
type Link struct {
	Shard int    `json:"shard"`
	Peer  uint16 `json:"peer"`
	Up    bool   `json:"up"`
}

// Stream is one stream as the metadata state holds it.
type Stream struct {
	ID          uint64   `json:"id"`
	Name        string   `json:"name"`
	Incarnation uint32   `json:"incarnation"`
	Copies      uint8    `json:"copies"`
	Policy      string   `json:"policy"`
	Epoch       uint32   `json:"epoch"`
	Owner       uint16   `json:"owner"`
	Followers   []uint16 `json:"followers"`
	Stamped     string   `json:"stamped_policy"`
	// Recovery is "" or the pending recovery's status ("pending", "withdrawn") with its id.
	Recovery   string `json:"recovery,omitempty"`
	RecoveryID uint64 `json:"recovery_id,omitempty"`
}

// Copy is one stream copy on this node.
type Copy struct {
	Stream      uint64 `json:"stream"`
	Incarnation uint32 `json:"incarnation"`
	Shard       int    `json:"shard"`
	Open        bool   `json:"open"`
	Role        string `json:"role"`
	Epoch       uint32 `json:"epoch"`
	Appended    uint64 `json:"appended_tail"`
	Durable     uint64 `json:"durable_tail"`
	Confirmed   uint64 `json:"confirmed_tail"`
	CursorTail  uint64 `json:"cursor_tail"` // the cursor event log's durable tail
	// Head is the record log's retained head (records below it were removed by retention);
	// RecordBytes and CursorBytes the two logs' durable bytes on disk.
	Head        uint64 `json:"head"`
	RecordBytes int64  `json:"record_bytes"`
	CursorBytes int64  `json:"cursor_bytes"`
	// OwnerSilent: a follower that heard nothing from its owner for its heartbeat timeout (reported to
	// the controller). OwnerRestarted: an owner that reopened within its own epoch and waits for a
	// recovery before it serves.
	OwnerSilent    bool `json:"owner_silent,omitempty"`
	OwnerRestarted bool `json:"owner_restarted,omitempty"`
}

// Failure is a copy whose storage did not open or failed while it served: its cause (enospc, eio,
// erofs, corrupt, refused, other), whether the node reopens it by itself (retrying, with a backoff;
// false: corrupt data waits for POST /v1/copies/{stream}/retry after a repair, or a delete), the
// reopens tried, and the role it had.
type Failure struct {
	Stream      uint64 `json:"stream"`
	Incarnation uint32 `json:"incarnation"`
	Dir         string `json:"dir"`
	Error       string `json:"error"`
	Cause       string `json:"cause"`
	Retrying    bool   `json:"retrying"`
	Attempts    int    `json:"attempts"`
	Role        string `json:"role"`
	Epoch       uint32 `json:"epoch"`
}

// CopyRetry is the answer to POST /v1/copies/{stream}/retry: whether the reopen of the node's failed
// copy started (its outcome shows in status), or why not.
type CopyRetry struct {
	Stream  uint64 `json:"stream"`
	Started bool   `json:"started"`
	Error   string `json:"error,omitempty"`
}

// Heartbeats is this node's heartbeat sender and, on a metadata replica, every registered node with
// this node's shard 0 link to it.
type Heartbeats struct {
	Sent     uint64     `json:"sent"`
	Failures uint64     `json:"failures"`
	Nodes    []NodeBeat `json:"nodes,omitempty"`
}

// NodeBeat is one registered node as the metadata state and this node's links see it.
type NodeBeat struct {
	Node    uint16 `json:"node"`
	Address string `json:"client_addr"`
	Status  string `json:"status"`  // registered, decommissioned
	LinkUp  bool   `json:"link_up"` // this node's shard 0 link to it (true for itself)
}

// Attention is the answer to GET /v1/attention: what waits for an operator or a node, as the active
// controller sees it. Active is false on a node that is not the metadata primary: its list is empty
// and Primary names the node to ask (0 when unknown).
type Attention struct {
	Node    uint16           `json:"node"`
	Active  bool             `json:"active"`
	Primary uint16           `json:"primary,omitempty"`
	Entries []AttentionEntry `json:"entries"`
}

// AttentionEntry is one control.Attention.
type AttentionEntry struct {
	Kind        string `json:"kind"` // control.AttentionKind.String
	Stream      uint64 `json:"stream"`
	Incarnation uint32 `json:"incarnation"`
	Recovery    uint64 `json:"recovery,omitempty"`
	Node        uint16 `json:"node,omitempty"`
	Answers     int    `json:"answers,omitempty"`
	Needed      int    `json:"needed,omitempty"`
	// StartEpoch, StartNode, StartRecord and StartCursor are the latest history start, when the
	// entry concerns one.
	StartEpoch  uint32 `json:"start_epoch,omitempty"`
	StartNode   uint16 `json:"start_node,omitempty"`
	StartRecord uint64 `json:"start_record,omitempty"`
	StartCursor uint64 `json:"start_cursor,omitempty"`
	Why         string `json:"why"`
}

// RecoveryAction is the answer to POST /v1/recovery/accept-loss and POST /v1/recovery/withdraw (query
// parameters: stream, the stream's name; owner, for accept-loss, the node to promote, 0 or absent for
// the controller's proposal). Done says the op committed and took effect; otherwise Error says why
// (Primary names the node to ask when this one is not the metadata primary).
type RecoveryAction struct {
	Action   string `json:"action"` // accept-loss, withdraw
	Stream   string `json:"stream"`
	StreamID uint64 `json:"stream_id,omitempty"`
	Recovery uint64 `json:"recovery,omitempty"`
	Owner    uint16 `json:"owner,omitempty"` // accept-loss: the new owner
	Op       uint64 `json:"op,omitempty"`    // the metadata op number that committed
	Done     bool   `json:"done"`
	Result   string `json:"result,omitempty"` // meta's result: code and message
	Error    string `json:"error,omitempty"`
	Primary  uint16 `json:"primary,omitempty"`
	// Warning repeats the risk of an accepted loss: records confirmed past the new owner's published
	// tails are gone.
	Warning string `json:"warning,omitempty"`
}
