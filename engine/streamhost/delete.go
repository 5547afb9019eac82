package streamhost

import (
	"fmt"

	"github.com/ringstream/ringstream/shard"
)

// DeleteIncarnation is Delete for the copy of stream at incarnation only: a copy of another
// incarnation of the stream (the name created again) is left alone and done hears ErrUnknownStream.
// The node calls it for the copies of incarnations its metadata replica records as deleted.
func (h *Host) DeleteIncarnation(streamID uint64, incarnation uint32, done func(error)) error {
	i := shard.ShardOf(streamID, len(h.shards))
	return h.node.Run(i, func(*shard.Shard) {
		cg := h.shards[i].copies[streamID]
		if cg == nil || cg.spec.Incarnation != incarnation {
			done(fmt.Errorf("%w: %d incarnation %d", ErrUnknownStream, streamID, incarnation))
			return
		}
		cg.delete(done)
	})
}
