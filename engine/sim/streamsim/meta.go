package streamsim

import (
	"fmt"
	"slices"

	"github.com/ringstream/ringstream/engine/control"
	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/wire"
)

// pendingOp is a proposal on its way through the metadata group.
type pendingOp struct {
	at      uint64
	streams []uint64 // control.Proposal.For: one stream, or a batch op's streams
	op      meta.Op
	gen     uint64 // controller generation that proposed it; 0 for an operator's op
}

// metaGroup models the metadata group as one atomic replicated log applied to a real meta.State: a
// proposal commits MetaDelayTicks after it was made. The controller runs on the node that holds the
// primary; when that node is lost, the proposals it had out commit or vanish at random (as a view
// change keeps or drops them), and after viewChangeTicks the lowest running node becomes primary
// with a fresh controller that rebuilds from the state and fresh heartbeats.
type metaGroup struct {
	state    *meta.State
	opNumber uint64
	ctrl     *control.Controller
	node     uint16 // node of the primary; 0 while there is none
	gen      uint64
	pending  []pendingOp
	electAt  uint64
	linkUp   []bool // the controller's view of each node's links
	policy   meta.Policy
	attn     []control.Attention
}

// viewChangeTicks is how long the metadata group takes to elect a new primary.
const viewChangeTicks = 10

func (m *metaGroup) init(s *Sim) error {
	m.state = meta.NewState()
	m.policy = meta.Policy{Kind: meta.PolicyMajorityDurable}
	if s.opt.Variant == SealRMinus1 {
		m.policy = meta.Policy{Kind: meta.PolicyLocalDurable}
	} else if !s.opt.Scripted && s.rng.IntN(4) == 0 {
		m.policy = meta.Policy{Kind: meta.PolicyLocalDurable}
	}
	for id := 1; id <= s.opt.Nodes; id++ {
		if r := m.apply(meta.RegisterNode{Node: uint16(id), Address: fmt.Sprintf("sim:%d", id)}); !r.OK() {
			return fmt.Errorf("streamsim: register node %d: %s", id, r)
		}
	}
	for i := range s.opt.Streams {
		e := s.opt.Copies
		if e == 0 {
			e = 2 + s.rng.IntN(2)
			if s.rng.IntN(10) == 0 {
				e = 1
			}
		}
		if s.opt.Variant == SealRMinus1 {
			e = 3
		}
		e = min(e, s.opt.Nodes)
		members := s.rng.Perm(s.opt.Nodes)[:e]
		if s.opt.Scripted {
			members = make([]int, e)
			if s.opt.Members > 0 {
				members = members[:s.opt.Members]
			}
			for j := range members {
				members[j] = j
			}
		}
		owner := uint16(members[0] + 1)
		var followers []uint16
		for _, f := range members[1:] {
			followers = append(followers, uint16(f+1))
		}
		slices.Sort(followers)
		name := fmt.Sprintf("s%d", i+1)
		op := meta.CreateStream{Name: name, Copies: uint8(e), Policy: m.policy, Owner: owner, Followers: followers,
			Stamped: m.policy}
		if r := m.apply(op); !r.OK() {
			return fmt.Errorf("streamsim: create %s: %s", name, r)
		}
		st, _ := m.state.StreamByName(name)
		if i == 0 && len(followers) > 0 && !s.opt.Scripted && !s.opt.NoStaleIncarnation {
			old, ok := st, false
			if st, ok = m.recreate(op); !ok {
				return fmt.Errorf("streamsim: create %s again", name)
			}
			s.leaveStaleCopy(followers[len(followers)-1], i, old)
		}
		s.strs = append(s.strs, simStream{st: st, idx: i})
	}
	m.linkUp = make([]bool, s.opt.Nodes+1)
	return m.elect(s, max(s.opt.MetaNode, 1))
}

// apply commits op at the next op number.
func (m *metaGroup) apply(op meta.Op) meta.Result {
	m.opNumber++
	r, err := meta.DecodeResult(m.state.Apply(meta.AppendOp(nil, op), m.opNumber, nil))
	if err != nil {
		panic("streamsim: result does not decode: " + err.Error())
	}
	return r
}

// elect makes node the metadata primary with a fresh controller.
func (m *metaGroup) elect(s *Sim, node uint16) error {
	cfg := s.opt.Control
	cfg.AssignmentPolicy = m.policy
	c, err := control.New(cfg, m.state)
	if err != nil {
		return err
	}
	m.ctrl, m.node, m.electAt = c, node, 0
	m.gen++
	s.logf("node %d is the metadata primary (generation %d)", node, m.gen)
	for id := 1; id <= s.opt.Nodes; id++ {
		m.linkUp[id] = true
	}
	c.BecomePrimary()
	m.syncLinks(s)
	m.ready(s)
	return nil
}

// syncLinks reports to the controller every node whose links to the primary's node went down or
// came back (a crash or a partition; a paused node keeps its links).
func (m *metaGroup) syncLinks(s *Sim) {
	if m.ctrl == nil {
		return
	}
	for id := 1; id <= s.opt.Nodes; id++ {
		up := s.nodes[id].up && !s.net.partitioned(m.node, uint16(id))
		if up == m.linkUp[id] || !up && s.net.inFlight(uint16(id), m.node) {
			continue // a link closes after the frames sent on it before (TCP order)
		}
		m.linkUp[id] = up
		if up {
			m.ctrl.OnLinkUp(uint16(id))
		} else {
			m.ctrl.OnLinkDown(uint16(id))
		}
	}
}

// nodeDown handles a node's crash: the primary's crash loses the controller.
func (m *metaGroup) nodeDown(s *Sim, id uint16) {
	if id != m.node {
		return
	}
	m.ctrl, m.node, m.electAt = nil, 0, s.now+viewChangeTicks
	kept := m.pending[:0]
	for _, p := range m.pending {
		if p.gen == 0 || s.rng.IntN(2) == 0 {
			// Nothing commits without a primary: a kept op is prepared again in the new view and
			// commits at least MetaDelayTicks after it starts, ahead of the new primary's own
			// proposals (log order) but after the new controller's first decisions, which may
			// then be stale.
			// The new view may take a while to replicate them (a slow or partitioned backup).
			p.at = max(p.at, m.electAt+uint64(s.opt.MetaDelayTicks+s.rng.IntN(2*viewChangeTicks)))
			kept = append(kept, p)
		}
	}
	m.pending = kept
}

func (m *metaGroup) running(s *Sim) bool {
	return m.ctrl != nil && s.nodes[m.node].running(s.now)
}

// tick elects a primary when one is due, and ticks the controller.
func (m *metaGroup) tick(s *Sim) {
	if m.ctrl == nil && m.electAt != 0 && s.now >= m.electAt {
		for _, n := range s.nodes[1:] {
			if n.running(s.now) {
				if err := m.elect(s, n.id); err != nil {
					s.fail("elect: %v", err)
				}
				break
			}
		}
	}
	if !m.running(s) {
		return
	}
	m.syncLinks(s)
	m.ctrl.Tick()
	m.ready(s)
	if s.opt.ControllerChecksPerTick {
		m.ctrl.CheckInvariants()
	}
}

// ready carries out the controller's effects: proposals to the group, seals and assignments to
// nodes, from the primary's node.
func (m *metaGroup) ready(s *Sim) {
	fx := m.ctrl.Ready()
	if !s.opt.ControllerChecksPerTick {
		m.ctrl.CheckInvariants()
	}
	for _, p := range fx.Proposals {
		m.pending = append(m.pending, pendingOp{at: s.now + uint64(s.opt.MetaDelayTicks),
			streams: slices.Clone(p.For()), op: p.Op, gen: m.gen})
	}
	for _, sl := range fx.Seals {
		sl.Starts = slices.Clone(sl.Starts)
		s.send(envelope{from: m.node, to: sl.To, kind: kindSeal, stream: sl.Seal.Stream, seal: sl})
	}
	for _, a := range fx.Assignments {
		a.Starts = slices.Clone(a.Starts)
		s.send(envelope{from: m.node, to: a.To, kind: kindAssign, stream: a.Assignment.Stream, assign: a})
	}
}

// propose queues an operator's op.
func (m *metaGroup) propose(s *Sim, stream uint64, op meta.Op) {
	m.pending = append(m.pending, pendingOp{at: s.now + uint64(s.opt.MetaDelayTicks), streams: []uint64{stream}, op: op})
}

// commitDue applies the proposals due, in order, and reports each to the controller that made it.
func (m *metaGroup) commitDue(s *Sim) {
	applied := false
	// Ops commit in log order: the due prefix (an op kept across a view change holds back the ops
	// proposed after it).
	n := 0
	for n < len(m.pending) && m.pending[n].at <= s.now {
		n++
	}
	due := slices.Clone(m.pending[:n])
	m.pending = slices.Delete(m.pending, 0, n)
	for _, p := range due {
		r := m.apply(p.op)
		applied = true
		s.logf("meta op %s on streams %v: %s", p.op.Kind(), p.streams, r)
		if len(r.Entries) > 0 {
			s.counts.batchOps++
			for _, e := range r.Entries {
				if !e.OK() {
					s.counts.batchRefused++
				}
			}
			if s.opt.Variant == BatchCommitsAll {
				r = m.forceRefused(s, p.op, r)
			}
		}
		if o, ok := p.op.(meta.AcceptOwnerLoss); ok && r.OK() {
			s.chk.onAcceptedLoss(s, o.Stream)
			if si, ok := s.streamIndex(o.Stream); ok {
				s.reads.onAcceptedLoss(si)
			}
		}
		if p.gen != 0 && p.gen == m.gen && m.ctrl != nil {
			m.ctrl.ProposalApplied(p.streams, r)
		}
	}
	if applied && m.ctrl != nil {
		m.ctrl.StateChanged()
		if m.running(s) {
			m.ready(s)
		}
	}
}

func (m *metaGroup) onHeartbeat(s *Sim, e envelope) {
	if e.to != m.node || m.ctrl == nil {
		return
	}
	h, body, err := wire.ParseFrame(e.frame)
	if err != nil {
		s.fail("heartbeat from %d does not parse: %v", e.from, err)
		return
	}
	hb, copies, err := wire.DecodeNodeHeartbeat(&h, body)
	if err != nil {
		s.fail("heartbeat from %d does not decode: %v", e.from, err)
		return
	}
	m.ctrl.OnHeartbeat(e.from, hb, copies)
	m.ready(s)
}

func (m *metaGroup) onSealReply(s *Sim, e envelope) {
	if e.to != m.node || m.ctrl == nil {
		return
	}
	m.ctrl.OnSealReply(e.from, e.sealReply)
	m.ready(s)
}
