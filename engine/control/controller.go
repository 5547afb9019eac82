package control

import (
	"cmp"
	"slices"

	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/internal/assert"
)

// Stats counts what the controller did and what it dropped. Read it with Controller.Stats.
type Stats struct {
	Heartbeats         uint64 // node heartbeats handled
	HeartbeatsIgnored  uint64 // from nodes that are not registered
	CopyTailsBad       uint64 // heartbeat copy entries that did not decode, skipped
	NodesLost          uint64 // nodes declared lost (liveness expiry or eager failover)
	Proposals          uint64 // ops handed out in Effects.Proposals
	ProposalsRefused   uint64 // proposals applied with a refusal (a guard did not hold)
	ProposalsExpired   uint64 // proposals whose outcome never came back within ProposalTimeoutTicks
	ProposalsDropped   uint64 // streams whose proposal the replica refused at once (pipeline full, not primary): decided again
	Seals              uint64 // seals handed out in Effects.Seals
	SealReplies        uint64 // seal replies counted for the current transition
	SealRepliesIgnored uint64 // seal replies for no current transition, another fence, or not sealed
}

// proposalSlot is one stream's proposal that is out (or, after a refusal, its back-off).
type proposalSlot struct {
	stream    uint64
	ticksLeft uint32
	refused   bool // backing off after a refusal, nothing out
}

// Controller is the controller and recovery worker of the metadata primary. It is a pure state
// machine: the host feeds it ticks, heartbeats, link events, seal replies and the outcome of its
// proposals, and executes the Effects that Ready returns. It reads the metadata state it was given
// (never writes it) on the goroutine that applies ops to that state. See the package doc.
type Controller struct {
	cfg     Config
	state   *meta.State
	primary bool
	dirty   bool // something changed that the streams must be looked at again for

	nodes       []nodeView     // registered nodes, ascending id
	works       []*work        // pending recoveries being worked on, ascending stream id
	due         []*work        // works with news since the last Ready (an answer, the seal timeout)
	proposals   []proposalSlot // ascending stream id
	reports     []silentReport // followers' reports of a silent owner, ascending (stream, node)
	deliveries  []delivery     // current assignments to deliver, ascending stream id
	sinceResend uint32         // ticks since lagging members were sent their assignment again
	load        []int          // scratch: copies held per node, parallel to nodes
	gen         uint64         // reconcile pass number
	fx, spare   Effects
	stats       Stats
}

// New returns a controller over state, which the host keeps applying committed ops to. It starts as
// a backup: it acts only after BecomePrimary.
func New(cfg Config, state *meta.State) (*Controller, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	assert.True(state != nil, "control: no metadata state")
	return &Controller{cfg: cfg, state: state}, nil
}

// Primary reports whether the controller acts (between BecomePrimary and StepDown).
func (c *Controller) Primary() bool { return c.primary }

// Stats returns the controller's counters.
func (c *Controller) Stats() Stats { return c.stats }

// BecomePrimary starts the controller on a new metadata primary. It rebuilds from the replicated state
// and fresh heartbeats: every registered node gets a full liveness window (its links' state, as the
// host reported it, is kept), and pending recoveries resume, sealing again at the same fence with the
// same transition id. The host calls it once this replica is primary with every committed op applied.
func (c *Controller) BecomePrimary() {
	c.primary = true
	c.syncNodes()
	for i := range c.nodes {
		n := &c.nodes[i]
		n.heard, n.lost, n.lostReason, n.silentTicks = false, false, 0, 0
		n.tails, n.failedSum = n.tails[:0], 0
	}
	c.works, c.due, c.proposals, c.reports, c.deliveries = nil, nil, nil, nil, nil
	c.fx.reset()
	c.dirty = true
}

// StepDown stops the controller when this replica is no longer the metadata primary. Work in progress
// is dropped; the next primary resumes it from the replicated state.
func (c *Controller) StepDown() {
	c.primary = false
	c.works, c.due, c.proposals, c.reports, c.deliveries = nil, nil, nil, nil, nil
	c.fx.reset()
}

// StateChanged tells the controller that committed ops were applied to the state. A backup keeps its
// views of the registered nodes up to date here, so that the links' state and the time they have been
// down carry over into BecomePrimary.
func (c *Controller) StateChanged() {
	c.dirty = true
	if !c.primary {
		c.syncNodes()
	}
}

// ProposalDone reports the outcome of the proposal the controller made for stream: the op was
// committed and applied with result r. After a refusal the stream is looked at again once
// SealRetryTimeoutTicks have passed.
func (c *Controller) ProposalDone(stream uint64, r meta.Result) {
	c.dirty = true
	i, ok := c.proposalIndex(stream)
	if !ok {
		return
	}
	if r.OK() {
		c.proposals = slices.Delete(c.proposals, i, i+1)
		return
	}
	c.stats.ProposalsRefused++
	c.proposals[i].ticksLeft, c.proposals[i].refused = c.cfg.SealRetryTimeoutTicks, true
}

// ProposalDropped reports that the proposal for stream was never proposed or was lost (this replica
// is not primary, its pipeline is full, a view change dropped it).
func (c *Controller) ProposalDropped(stream uint64) {
	c.stats.ProposalsDropped++
	c.dirty = true
	if i, ok := c.proposalIndex(stream); ok {
		c.proposals = slices.Delete(c.proposals, i, i+1)
	}
}

// Tick advances every timer by one tick: liveness and eager failover, proposal time-outs, seal
// time-outs and reseals of copies that have not answered, and assignments sent again to members whose
// heartbeats lag (every SealRetryTimeoutTicks).
func (c *Controller) Tick() {
	c.tickLiveness()
	if !c.primary {
		return
	}
	kept := c.proposals[:0]
	for _, p := range c.proposals {
		p.ticksLeft--
		if p.ticksLeft == 0 {
			if !p.refused {
				c.stats.ProposalsExpired++
			}
			c.dirty = true
			continue
		}
		kept = append(kept, p)
	}
	c.proposals = kept
	c.tickReports()
	for _, w := range c.works {
		c.tickWork(w)
	}
	if c.sinceResend++; c.sinceResend >= c.cfg.SealRetryTimeoutTicks {
		c.sinceResend = 0
		c.resendLagging()
	}
}

// Ready acts on everything reported since the last call (streams whose owner was lost, recoveries to
// start, answers to decide on) and returns the effects gathered. They stay valid until the next call
// to Ready.
func (c *Controller) Ready() *Effects {
	if c.primary {
		all := c.dirty
		if c.dirty {
			c.reconcile()
			c.dropStaleSeals()
		}
		c.sendNewDeliveries()
		c.decideDue(all)
		c.fx.batchProposals()
	}
	out := c.fx
	c.fx = c.spare
	c.fx.reset()
	c.spare = out
	return &c.spare
}

// decideDue runs decide on every work when all (something every work's decision reads changed:
// the state, a node's liveness or failed copies, a proposal's outcome), else on the works with news
// of their own since the last Ready (markDue). Deciding a work that has no news changes nothing, and
// a pass over every work per seal answer made a mass failover quadratic in its streams. A work queued
// twice is decided twice: the second finds its proposal out.
func (c *Controller) decideDue(all bool) {
	if all {
		for _, w := range c.works {
			c.decide(w)
		}
	} else {
		for _, w := range c.due {
			i, ok := c.workIndex(w.stream)
			assert.True(ok && c.works[i] == w, "control: a due work left the works without a reconcile")
			c.decide(w)
		}
	}
	clear(c.due)
	c.due = c.due[:0]
}

// markDue queues w for the next Ready's decision.
func (c *Controller) markDue(w *work) { c.due = append(c.due, w) }

// dropStaleSeals drops seals gathered since the last Ready for a transition that is no longer worked
// on (withdrawn, committed or deleted in the meantime).
func (c *Controller) dropStaleSeals() {
	c.fx.Seals = slices.DeleteFunc(c.fx.Seals, func(s Seal) bool {
		i, ok := c.workIndex(s.Seal.Stream)
		return !ok || c.works[i].id != s.Seal.TransitionID
	})
}

// propose hands op out for stream and marks a proposal out for it.
func (c *Controller) propose(stream uint64, op meta.Op) {
	i, ok := c.proposalIndex(stream)
	assert.True(!ok, "control: second proposal for one stream")
	c.proposals = slices.Insert(c.proposals, i, proposalSlot{stream: stream, ticksLeft: c.cfg.ProposalTimeoutTicks})
	c.fx.Proposals = append(c.fx.Proposals, Proposal{Stream: stream, Op: op})
	c.stats.Proposals++
}

// proposing reports whether a proposal for stream is out (or backing off after a refusal).
func (c *Controller) proposing(stream uint64) bool {
	_, ok := c.proposalIndex(stream)
	return ok
}

func (c *Controller) proposalIndex(stream uint64) (int, bool) {
	return slices.BinarySearchFunc(c.proposals, stream, func(p proposalSlot, s uint64) int {
		return cmp.Compare(p.stream, s)
	})
}
