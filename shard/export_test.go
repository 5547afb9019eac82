package shard

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// NewOfflineNode builds a node's shards, queues, links and groups without rings, sockets or
// goroutines: every link is marked up with its sends held, so tests drive ticks and frames by hand.
func NewOfflineNode(cfg Config, peers []Peer, groups []Group) (*Node, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	n := &Node{cfg: cfg, listenFD: -1, pending: groups, groupIDs: make(map[uint64]bool),
		perShard: make([]int, cfg.Shards), stopDone: make(chan struct{})}
	if err := n.buildShards(peers); err != nil {
		return nil, err
	}
	n.releaseWakers() // no loop to wake: a wake on an offline node does nothing
	for _, s := range n.shards {
		for _, l := range s.links {
			l.state = linkUp
			l.up.Store(true)
			l.sendInFlight = true // held: kick never reaches the (absent) ring
		}
	}
	return n, nil
}

// RunTick runs one tick at clock value nowNs.
func (s *Shard) RunTick(nowNs uint64) { s.runTick(nowNs) }

// TakeOutbox returns a copy of what the shard queued for peer and empties the outbox, as a send that
// reached the peer whole would (its groups record the member as connected, R25).
func (s *Shard) TakeOutbox(peer uint16) []byte {
	l := s.byNode[peer]
	out := append([]byte(nil), l.out...)
	l.out = l.out[:0]
	recordSends(l.records, true)
	l.records = l.records[:0]
	return out
}

// FailLink fails the link to peer as a failed send would: what its outbox held is dropped (R30) and
// the groups whose entries were in it record the member as not connected (R25).
func (s *Shard) FailLink(peer uint16) {
	l := s.byNode[peer]
	l.sendInFlight = false // held by NewOfflineNode; fail then closes at once
	l.fail(errors.New("test: send failed"))
}

// SetLinkUp marks the link to peer up or down without a socket.
func (s *Shard) SetLinkUp(peer uint16, up bool) {
	l := s.byNode[peer]
	if up {
		l.state = linkUp
	} else {
		l.state = linkDown
		l.retryTick = ^uint64(0)
	}
	l.up.Store(up)
}

// Feed pushes received bytes through a receiver as if they arrived on a connection from node from
// (through the reader's Free and Commit, like a ring receive), and reports whether the receiver stalled
// on a full queue. The bytes not taken before a stall are kept for Resume.
func (s *Shard) Feed(r *TestReceiver, from uint16, data []byte) (stalled bool, err error) {
	if r.r.frames == nil {
		r.r = newPeerReader(s, from, s.cfg.RecvBufferBytes)
	}
	if r.r.stalled {
		if err := r.r.receive(0); err != nil {
			return false, err
		}
		if r.r.stalled {
			r.pending = append(r.pending, data...)
			return true, nil
		}
	}
	for len(data) > 0 {
		n := copy(r.r.free(), data)
		data = data[n:]
		if err := r.r.receive(n); err != nil {
			return false, err
		}
		if r.r.stalled {
			r.pending = append(r.pending, data...)
			return true, nil
		}
	}
	return false, nil
}

// Resume continues a stalled receiver, then feeds what was held back.
func (s *Shard) Resume(r *TestReceiver, from uint16) (stalled bool, err error) {
	pending := r.pending
	r.pending = nil
	return s.Feed(r, from, pending)
}

// TestReceiver is a connection's receive side that a test feeds by hand (a wire.FrameReader of
// Config.RecvBufferBytes and the shard's frame handler).
type TestReceiver struct {
	r       peerReader
	pending []byte
}

// DrainInbox handles what other shards queued for s.
func (s *Shard) DrainInbox() { s.drainInbox() }

// SetTickHook sets a function run on each shard goroutine after each tick.
func (n *Node) SetTickHook(f func(s *Shard, tick uint64)) { n.tickHook = f }

// Tick is the shard's current tick number.
func (s *Shard) Tick() uint64 { return s.tick.Number }

// GroupBusy reports the heartbeat state of a led group.
func (s *Shard) GroupBusy(id uint64) bool { return s.byID[id].primary.Busy() }

// LinkConnected reports what group id recorded for member after its last send (R25).
func (s *Shard) LinkConnected(id uint64, member uint8) bool {
	return s.byID[id].primary.LinkConnected(member)
}

// QueueCapacityOf is the capacity of the queue from shard i to shard j.
func (n *Node) QueueCapacityOf(i, j int) int { return len(n.shards[i].outbound[j].slots) }

// DiscardOutboxes empties every outbox and reply outbox of s.
func (s *Shard) DiscardOutboxes() {
	for _, l := range s.links {
		l.out = l.out[:0]
		l.replies = l.replies[:0]
		clear(l.records)
		l.records = l.records[:0]
	}
}

// RegisterMetrics registers the node's collector on reg.
func (n *Node) RegisterMetrics(reg prometheus.Registerer) error { return n.registerMetrics(reg) }

// SetSendLimit stops polling s's groups after tick limit: no new Commits are owed, replies still flow.
// Call it on s's goroutine (from a tick hook) once s runs.
func (s *Shard) SetSendLimit(limit uint64) { s.sendLimit = limit }

// TimerTick runs one tick as the ring's timer does, at clock value nowNs: the ticks whose time passed
// since the last TimerTick are skipped first.
func (s *Shard) TimerTick(nowNs uint64) { s.timerTick(nowNs) }

// MissedTicks exposes missedTicks.
func MissedTicks(lastNs, nowNs, tickNs uint64) uint64 { return missedTicks(lastNs, nowNs, tickNs) }
