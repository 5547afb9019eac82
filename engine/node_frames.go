package engine

import (
	"github.com/ringstream/ringstream/shard"
	"github.com/ringstream/ringstream/wire"
)

// nodeFrames is the node's handler of node-level frames (Group 0) that the controller host does not
// take (all of them on a node without a metadata replica): forwarded metadata requests and their
// answers go to the metadata service; anything else is counted and dropped.
type nodeFrames struct{ n *Node }

// OnNodeFrame implements shard.NodeHandler.
func (f nodeFrames) OnNodeFrame(s *shard.Shard, from uint16, h *wire.Header, body []byte) {
	f.n.metaSvc.OnNodeFrame(s, from, h, body)
}

// OnUnroutedFrame implements shard.UnroutedHandler: frames for streams this node holds no copy of go to
// the stream host (a seal answered without a copy, an assignment that creates one, a seal reply).
func (f nodeFrames) OnUnroutedFrame(s *shard.Shard, from uint16, h *wire.Header, body []byte) bool {
	return f.n.streams.OnUnroutedFrame(s, from, h, body)
}

// sealReply is streamhost.Config.SealReplies: a seal reply reaching this node goes to its controller.
func (n *Node) sealReply(from uint16, m wire.StreamSealReply) {
	if n.ctl != nil {
		n.ctl.OnSealReply(from, m)
	}
}

// localControlFrame is controlhost.Config.LocalFrame: the seal and assignment frames the controller on
// this node addresses to this node's copies go to the stream host, on shard 0's goroutine.
func (n *Node) localControlFrame(h *wire.Header, body []byte) { n.streams.OnControlFrame(h, body) }
