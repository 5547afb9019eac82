package shard

import (
	"sync/atomic"

	"github.com/ringstream/ringstream/internal/assert"
	"github.com/ringstream/ringstream/wire"
)

// messageKind says what a cross-shard message carries.
type messageKind uint8

const (
	messageCommit messageKind = iota + 1 // a Commit entry for a group the target owns (R16)
	messageReply                         // a CommitReply entry for a group the target owns (R29)
	messageFrame                         // a group-addressed frame (VSR and later stream frames)
	messageConn                          // an accepted, handshaken connection handed to the target
)

// Client messages (client.go): the frame and the client field are set.
const (
	messageClientRequest messageKind = messageConn + 1 + iota // a client request for a stream the target owns
	messageClientReply                                        // a reply for a client connection the target holds
)

// message is one cross-shard message. It is copied by value into the queue's fixed array, so sending
// a Commit or CommitReply entry allocates nothing.
type message struct {
	kind   messageKind
	from   uint16 // the peer node the entry or frame came from
	commit wire.CommitEntry
	reply  wire.CommitReplyEntry
	frame  []byte // messageFrame: header and body, owned by the message (a copy, not the recv buffer)
	fd     int    // messageConn
	peer   uint16 // messageConn: the node that dialed it

	client ClientRequest // messageClientRequest, messageClientReply
}

// spscQueue is a bounded single-producer single-consumer queue: one per ordered pair of shards.
// The producer shard pushes, the consumer shard pops; head and tail are atomics, so the two threads
// share nothing else. A full queue makes Push return false: the producer sees the back-pressure.
type spscQueue struct {
	slots []message
	mask  uint64
	head  atomic.Uint64 // next slot to pop; written by the consumer only
	tail  atomic.Uint64 // next slot to push; written by the producer only
}

func newSPSCQueue(capacity int) *spscQueue {
	assert.True(capacity > 0 && capacity&(capacity-1) == 0, "shard: queue capacity not a power of two")
	return &spscQueue{slots: make([]message, capacity), mask: uint64(capacity - 1)}
}

// Push copies m into the queue. It returns false, queueing nothing, when the queue is full.
func (q *spscQueue) Push(m *message) bool {
	tail := q.tail.Load()
	if tail-q.head.Load() == uint64(len(q.slots)) {
		return false
	}
	q.slots[tail&q.mask] = *m
	q.tail.Store(tail + 1)
	return true
}

// Pop moves the oldest message into out. It returns false when the queue is empty.
func (q *spscQueue) Pop(out *message) bool {
	head := q.head.Load()
	if head == q.tail.Load() {
		return false
	}
	slot := &q.slots[head&q.mask]
	*out = *slot
	*slot = message{} // drop the frame reference so it can be collected
	q.head.Store(head + 1)
	return true
}

// Len is the number of queued messages (exact for either side's own view).
func (q *spscQueue) Len() int { return int(q.tail.Load() - q.head.Load()) }
