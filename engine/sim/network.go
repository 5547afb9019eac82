package sim

import (
	"slices"

	"github.com/ringstream/ringstream/wire"
)

type packetKind uint8

const (
	packetVSR         packetKind = iota + 1 // a VSR frame between replicas
	packetCommit                            // a Commit entry, primary to backup
	packetCommitReply                       // a CommitReply entry, backup to primary
	packetRequest                           // a client's request to a replica
	packetReply                             // a replica's reply to a client
)

// packet is one message in flight. Replica indexes address replicas; client indexes clients.
type packet struct {
	deliverAt uint64
	seq       uint64
	kind      packetKind
	from, to  int
	frame     []byte
	commit    wire.CommitEntry
	reply     wire.CommitReplyEntry
	client    uint64
	request   uint64
	payload   []byte // a request's op or a reply's result (client frames are checksummed end to end)
}

// network holds packets in flight and the links' state.
type network struct {
	sim     *Sim
	flight  []packet
	seq     uint64
	blocked [][]bool // blocked[from][to]: the one-way link drops everything
	// longUntil: a long partition holds until this tick (0: none).
	longUntil uint64
}

func newNetwork(s *Sim, n int) *network {
	nw := &network{sim: s, blocked: make([][]bool, n)}
	for i := range nw.blocked {
		nw.blocked[i] = make([]bool, n)
	}
	return nw
}

// send puts p in flight between replicas (or between a client and a replica, when blocked does not
// apply), with the run's loss, duplication and delay.
func (nw *network) send(p packet, betweenReplicas bool) {
	s := nw.sim
	if betweenReplicas && (nw.blocked[p.from][p.to] || s.now < s.opts.LinksUpTick) {
		return
	}
	if s.chance(s.opts.DropPPM) {
		s.stats.Dropped++
		return
	}
	copies := 1
	if s.chance(s.opts.DuplicatePPM) {
		copies = 2
	}
	for c := 0; c < copies; c++ {
		q := p
		if q.frame != nil && s.chance(s.opts.CorruptPPM) {
			q.frame = slices.Clone(q.frame)
			q.frame[s.rng.IntN(len(q.frame))] ^= byte(1 + s.rng.IntN(255))
		}
		nw.seq++
		q.seq = nw.seq
		q.deliverAt = s.now + 1 + uint64(s.rng.Int64N(int64(s.opts.DelayTicksMax)))
		nw.flight = append(nw.flight, q)
	}
}

// due removes and returns the packets to deliver at now, in (deliverAt, seq) order.
func (nw *network) due(now uint64, out []packet) []packet {
	kept := nw.flight[:0]
	for _, p := range nw.flight {
		if p.deliverAt <= now {
			out = append(out, p)
		} else {
			kept = append(kept, p)
		}
	}
	nw.flight = kept
	slices.SortFunc(out, func(a, b packet) int {
		if a.deliverAt != b.deliverAt {
			return int(a.deliverAt) - int(b.deliverAt)
		}
		return int(a.seq) - int(b.seq)
	})
	return out
}

// repartition draws a new link state: healed, a split into two sides, or a few one-way cuts.
func (nw *network) repartition() {
	s := nw.sim
	n := len(nw.blocked)
	nw.heal()
	switch s.rng.IntN(3) {
	case 0:
	case 1:
		side := make([]bool, n)
		for i := range side {
			side[i] = s.rng.IntN(2) == 0
		}
		for i := 0; i < n; i++ {
			for j := 0; j < n; j++ {
				nw.blocked[i][j] = side[i] != side[j]
			}
		}
	case 2:
		for k := 1 + s.rng.IntN(n); k > 0; k-- {
			i, j := s.rng.IntN(n), s.rng.IntN(n)
			if i != j {
				nw.blocked[i][j] = true
			}
		}
	}
}

// isolate cuts node i off from every other node, both ways.
func (nw *network) isolate(i int) {
	nw.heal()
	for j := range nw.blocked {
		if j != i {
			nw.blocked[i][j], nw.blocked[j][i] = true, true
		}
	}
}

// requeue puts p back in flight to arrive at at, keeping its place among packets due then.
func (nw *network) requeue(p packet, at uint64) {
	p.deliverAt = at
	nw.flight = append(nw.flight, p)
}

func (nw *network) heal() {
	for i := range nw.blocked {
		clear(nw.blocked[i])
	}
}
