// Package engine is the node: it composes the shards with the protocol packages below it.
//
// Node (node*.go) builds one node from its engine/config value and runs its lifecycle (NewNode,
// Start, Shutdown, Stop, Kill): the shards, the metadata replica (engine/metahost) and its controller
// host (engine/controlhost) on a metadata member, the node heartbeat (engine/nodebeat), the stream
// host (engine/streamhost), the client request handler (engine/clientreq: metadata requests served on
// the primary's node and forwarded there from the others, data requests handed to the stream's copy)
// and the admin HTTP listener with the node's metrics (engine/admin, JSON documents in
// engine/adminapi). Those packages import nothing of this one: compose hands each what it needs. The
// node's own decisions are listed in Node's doc comment; the parts' are in their package comments.
package engine
