package streamsim

import (
	"cmp"
	"slices"

	"github.com/ringstream/ringstream/engine/control"
	"github.com/ringstream/ringstream/engine/stream"
	"github.com/ringstream/ringstream/wire"
)

// msgKind says what an envelope carries.
type msgKind uint8

const (
	kindPrepare   msgKind = iota + 1 // stream prepare frame, owner to follower
	kindPrepareOK                    // prepare-ok frame, follower to owner
	kindHeartbeat                    // node heartbeat frame, node to the metadata primary
	kindSeal                         // controller to a copy's node
	kindSealReply                    // a copy's node to the controller
	kindAssign                       // controller to a member's node
	kindRequest                      // client request to a node
	kindReply                        // a node's reply to a client
)

func (k msgKind) String() string {
	return [...]string{"?", "prepare", "prepare-ok", "heartbeat", "seal", "seal-reply", "assign", "request", "reply"}[k]
}

// clientNode is the address of the clients: they are not partitioned and never crash.
const clientNode = 0

// envelope is one message in flight.
type envelope struct {
	at     uint64 // tick it is delivered at
	seq    uint64 // send order, to break ties
	from   uint16
	to     uint16
	kind   msgKind
	stream uint64

	frame     []byte
	seal      control.Seal
	sealReply wire.StreamSealReply
	assign    control.Assignment
	request   stream.Message
	reply     stream.Reply
}

// network holds the messages in flight. Loss, duplication and delay (which reorders) are drawn per
// message; partitions drop messages between sides; a message to a paused node waits for it.
type network struct {
	queue    []*envelope
	seq      uint64
	lossPct  int
	dupPct   int
	delayMax int
	side     []uint8 // partition side per node id; all 0 when whole
	// drop, when set, drops the messages it returns true for (scripted runs).
	drop func(e *envelope) bool
}

func (n *network) partitioned(a, b uint16) bool {
	if a == clientNode || b == clientNode {
		return false
	}
	return n.side[a] != n.side[b]
}

// due removes and returns the messages due at now, in delivery order.
func (n *network) due(now uint64) []*envelope {
	var out []*envelope
	kept := n.queue[:0]
	for _, e := range n.queue {
		if e.at <= now {
			out = append(out, e)
		} else {
			kept = append(kept, e)
		}
	}
	clear(n.queue[len(kept):])
	n.queue = kept
	slices.SortFunc(out, func(a, b *envelope) int {
		if c := cmp.Compare(a.at, b.at); c != 0 {
			return c
		}
		return cmp.Compare(a.seq, b.seq)
	})
	return out
}

// inFlight reports whether a message from one node to another is still queued.
func (n *network) inFlight(from, to uint16) bool {
	for i := range n.queue {
		if n.queue[i].from == from && n.queue[i].to == to {
			return true
		}
	}
	return false
}
