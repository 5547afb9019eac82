package sim

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/ringstream/ringstream/engine/meta"
)

// ErrViolation: a check failed. The error names the seed, the step and the check.
var ErrViolation = errors.New("sim: violation")

// Stats describes a run.
type Stats struct {
	Ticks, Steps       uint64
	Committed          uint64 // highest op committed anywhere
	Requests, Replies  uint64
	Crashes, Restarts  uint64
	ReadErrors         uint64
	Dropped, Corrupt   uint64
	Pauses             uint64
	SkewedTicks        uint64 // ticks a node ran twice or skipped
	LongPartitions     uint64
	PersistFailures    uint64
	Compactions        uint64
	Wipes, OldCopies   uint64
	SectorFaults       uint64
	MisdirectedWrites  uint64
	Recoveries         uint64 // recoveries completed by the replicas up at the end
	ViewChanges        uint64
	SnapshotsInstalled uint64
	SnapshotChunks     uint64 // state transfer chunks taken, by the replicas up at the end
	TransferRestarts   uint64 // state transfers begun again on a newer checkpoint, by the same
	CoreTicks          uint64 // ticks the healthy core took to make progress
	LivenessTicks      uint64 // ticks the healed cluster took to make progress and converge
}

// add sums o's counts into st (Committed, the highest op, is summed too: ops committed over runs).
func (st *Stats) add(o Stats) {
	st.Ticks += o.Ticks
	st.Steps += o.Steps
	st.Committed += o.Committed
	st.Requests += o.Requests
	st.Replies += o.Replies
	st.Crashes += o.Crashes
	st.Restarts += o.Restarts
	st.ReadErrors += o.ReadErrors
	st.Dropped += o.Dropped
	st.Corrupt += o.Corrupt
	st.Pauses += o.Pauses
	st.SkewedTicks += o.SkewedTicks
	st.LongPartitions += o.LongPartitions
	st.PersistFailures += o.PersistFailures
	st.Compactions += o.Compactions
	st.Wipes += o.Wipes
	st.OldCopies += o.OldCopies
	st.SectorFaults += o.SectorFaults
	st.MisdirectedWrites += o.MisdirectedWrites
	st.Recoveries += o.Recoveries
	st.ViewChanges += o.ViewChanges
	st.SnapshotsInstalled += o.SnapshotsInstalled
	st.SnapshotChunks += o.SnapshotChunks
	st.TransferRestarts += o.TransferRestarts
	st.CoreTicks += o.CoreTicks
	st.LivenessTicks += o.LivenessTicks
}

// client is one workload client: one request outstanding at a time, retried at another replica when
// no reply comes.
type client struct {
	id        uint64
	request   uint64
	waiting   bool
	sentAt    uint64
	target    int
	completed uint64
}

const clientRetryTicks = 30

// Sim is one run.
type Sim struct {
	opts    Options
	rng     *rand.Rand
	now     uint64
	step    uint64
	nodes   []*node
	net     *network
	clients []*client
	stats   Stats
	faults  bool
	quiet   bool // liveness phase: clients send no new requests

	committed    map[uint64]uint64 // op -> checksum of the committed entry
	digests      map[uint64]uint64 // commit -> digest of state machine and client table
	opDigests    map[uint64]uint64 // op -> state machine digest right after applying it
	maxCommitted uint64
	// maxCommittedView is the highest view a replica was in when it reached maxCommitted.
	maxCommittedView uint32
	due              []packet
	firstErr         error // a violation found where no error can be returned
}

// Run runs the simulation opts describes and returns its stats, or an error wrapping ErrViolation.
// Three phases: faults with load; a healthy core (a quorum) must make progress while the other
// replicas stay down or cut off; then everything heals and the group must converge. An assertion of a
// replica or its state machine (a panic whose message starts "vsr: " or "meta: ") is a violation too,
// named with the seed and step; any other panic is the simulator's own and goes on.
func Run(opts Options) (st Stats, err error) {
	opts.SwarmOff.leaveOut(&opts)
	s := &Sim{opts: opts, rng: rand.New(rand.NewPCG(opts.Seed, 0xc1a5)), faults: true,
		committed: make(map[uint64]uint64), digests: make(map[uint64]uint64),
		opDigests: make(map[uint64]uint64)}
	defer func() {
		if r := recover(); r != nil {
			msg, ok := r.(string)
			if !ok || !(strings.HasPrefix(msg, "vsr: ") || strings.HasPrefix(msg, "meta: ")) {
				panic(r)
			}
			st, err = s.stats, s.violation("assertion: %s", msg)
		}
	}()
	err = s.run()
	return s.stats, err
}

// run is Run's three phases.
func (s *Sim) run() error {
	opts := s.opts
	s.net = newNetwork(s, opts.Replicas)
	for i := 0; i < opts.Replicas; i++ {
		n := &node{index: i}
		n.disk.format(i, false)
		if opts.SkewPPM > 0 {
			n.skew = s.rng.IntN(3) - 1
		}
		s.nodes = append(s.nodes, n)
		if err := s.startRetrying(n); err != nil {
			return err
		}
	}
	for i := 0; i < opts.Clients; i++ {
		s.clients = append(s.clients, &client{id: uint64(1000 + i), target: i % opts.Replicas})
	}
	for s.now < opts.FaultTicks {
		if err := s.tick(); err != nil {
			return err
		}
	}
	if opts.CoreTicks > 0 {
		if err := s.requireCoreProgress(); err != nil {
			return err
		}
	}
	if err := s.heal(); err != nil {
		return err
	}
	return s.requireLiveness()
}

// startRetrying starts a node, retrying past injected read errors (used at boot and when healing).
func (s *Sim) startRetrying(n *node) error {
	for {
		err := s.start(n)
		if errors.Is(err, errReadFault) {
			s.stats.ReadErrors++
			continue
		}
		if err != nil {
			return s.violation("%v", err)
		}
		return nil
	}
}

func (s *Sim) trace(format string, args ...any) {
	if s.opts.Trace != nil {
		s.opts.Trace(fmt.Sprintf("tick=%d step=%d ", s.now, s.step) + fmt.Sprintf(format, args...))
	}
}

func (s *Sim) violation(format string, args ...any) error {
	return fmt.Errorf("%w: seed=%d step=%d tick=%d: %s", ErrViolation, s.opts.Seed, s.step, s.now,
		fmt.Sprintf(format, args...))
}

// chance is true with probability ppm parts per million.
func (s *Sim) chance(ppm uint32) bool { return ppm > 0 && s.rng.Uint32N(1_000_000) < ppm }

func (s *Sim) quorum() int { return s.opts.Replicas/2 + 1 }

func (s *Sim) clientIndex(id uint64) int {
	i := int(id) - 1000
	if i < 0 || i >= len(s.clients) {
		return -1
	}
	return i
}

// tick is one tick of the whole cluster. A paused node does nothing; a skewed one ticks twice or
// not at all now and then.
func (s *Sim) tick() error {
	s.now++
	s.stats.Ticks++
	defer func() { s.stats.Steps = s.step }()
	if s.faults {
		if err := s.injectFaults(); err != nil {
			return err
		}
	} else if err := s.restartFailed(); err != nil {
		return err
	}
	for _, n := range s.nodes {
		ticks := 1
		if s.faults && n.skew != 0 && s.chance(s.opts.SkewPPM) {
			ticks += n.skew
			s.stats.SkewedTicks++
		}
		for ; ticks > 0 && n.up && !n.paused(s.now); ticks-- {
			s.step++
			if err := s.tickNode(n); err != nil {
				return err
			}
		}
	}
	s.due = s.net.due(s.now, s.due[:0])
	for i := range s.due {
		if err := s.deliver(&s.due[i]); err != nil {
			return err
		}
	}
	for _, n := range s.nodes {
		if n.up && !n.paused(s.now) {
			if err := s.completeDisk(n); err != nil {
				return err
			}
		}
	}
	s.tickClients()
	return s.firstErr
}

// deliver hands one packet to its replica or client. A paused replica gets it when it resumes.
func (s *Sim) deliver(p *packet) error {
	if p.kind == packetReply {
		s.onReply(p)
		return nil
	}
	n := s.nodes[p.to]
	if !n.up {
		return nil
	}
	if n.paused(s.now) {
		s.net.requeue(*p, n.pausedUntil)
		return nil
	}
	s.step++
	switch p.kind {
	case packetVSR:
		return s.onFrame(n, p)
	case packetCommit:
		return s.onCommit(n, p)
	case packetCommitReply:
		s.onCommitReply(n, p)
		return nil
	case packetRequest:
		_ = n.replica.Propose(p.client, p.request, p.payload)
		return s.flush(n)
	}
	return nil
}

// tickClients sends new requests and retries overdue ones.
func (s *Sim) tickClients() {
	for i, c := range s.clients {
		switch {
		case !c.waiting && s.quiet:
			continue
		case !c.waiting:
			c.request++
			c.waiting = true
		case s.now-c.sentAt >= clientRetryTicks:
			c.target = (c.target + 1) % s.opts.Replicas
		default:
			continue
		}
		c.sentAt = s.now
		s.stats.Requests++
		s.net.send(packet{kind: packetRequest, from: i, to: c.target, client: c.id, request: c.request,
			payload: s.clientOp(c)}, false)
	}
}

// clientOp is the op of c's current request.
func (s *Sim) clientOp(c *client) []byte {
	if s.opts.Machine == MachineCounter {
		return counterOp(nil, c.id, 1)
	}
	node := uint16(c.id)
	if c.request == 1 {
		return meta.AppendOp(nil, meta.RegisterNode{Node: node, Address: fmt.Sprintf("10.0.0.%d:7000", node%250)})
	}
	p := meta.Policy{Kind: meta.PolicyMajorityDurable}
	return meta.AppendOp(nil, meta.CreateStream{Name: fmt.Sprintf("c%d-%d", c.id, c.request), Copies: 1,
		Policy: p, Owner: node, Stamped: p})
}

// onReply checks a reply against exactly-once application and completes the client's request.
func (s *Sim) onReply(p *packet) {
	c := s.clients[p.to]
	if !c.waiting || p.request != c.request {
		return
	}
	if err := s.checkResult(c, p.payload); err != nil && s.firstErr == nil {
		s.firstErr = err
	}
	s.stats.Replies++
	c.waiting = false
	c.completed++
}

// checkResult: the counter must equal the request number; a meta op must have succeeded (a stream
// created twice would answer "name in use").
func (s *Sim) checkResult(c *client, result []byte) error {
	if s.opts.Machine == MachineCounter {
		if len(result) != 8 || binary.LittleEndian.Uint64(result) != c.request {
			return s.violation("client %d request %d: result %x, want the request applied exactly once",
				c.id, c.request, result)
		}
		return nil
	}
	res, err := meta.DecodeResult(result)
	if err != nil || !res.OK() {
		return s.violation("client %d request %d: result %v (%v), want success exactly once", c.id, c.request,
			res, err)
	}
	return nil
}
