package streamhost

import "github.com/ringstream/ringstream/shard"

// Incarnation is the incarnation of the copy of streamID that shard s holds, serving or not (opening,
// deleting); false when it holds none. The node compares it with a request's incarnation: a request for
// a newer incarnation than the copy here waits for the new copy (the node answers "not yet"), it is not
// a request for an unknown stream. It runs on s's goroutine.
func (h *Host) Incarnation(s *shard.Shard, streamID uint64) (uint32, bool) {
	cg := h.shards[s.Index()].copies[streamID]
	if cg == nil {
		return 0, false
	}
	return cg.spec.Incarnation, true
}
