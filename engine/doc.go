// Package engine is the node: it composes the shards with the protocol packages below it.
//
// Node (node*.go) builds one node from its engine/config value: shards, the metadata replica and
// controller host on a metadata member, the node heartbeat, the stream host, the client request
// handler (clientreq*.go: metadata requests served on the primary's node and forwarded there from the
// others, data requests handed to the stream's copy) and the admin HTTP listener (admin*.go, JSON
// documents in engine/adminapi). Its decisions are listed in Node's doc comment.
//
// The parts below the node are packages of their own, which import nothing of it: engine/metahost
// (the metadata replica), engine/controlhost (the controller on it), engine/nodebeat (the node
// heartbeat), engine/streamhost (the stream copies).
package engine
