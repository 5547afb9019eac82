package controlhost

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/ringstream/ringstream/engine/control"
	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/engine/metahost"
	"github.com/ringstream/ringstream/engine/vsr"
	"github.com/ringstream/ringstream/internal/assert"
	"github.com/ringstream/ringstream/shard"
	"github.com/ringstream/ringstream/wire"
)

// ClientBase marks the VSR client ids the controller proposes under.
const ClientBase uint64 = 1 << 63

// Config sets up the controller host of a node holding a metadata replica.
type Config struct {
	Control control.Config
	// LocalFrame receives the seal and assignment frames the controller addresses to this node, on
	// shard 0's goroutine (the stream host's entry for them); nil drops them.
	LocalFrame func(h *wire.Header, body []byte)
	// StatusEveryTicks: Status is refreshed this often while primary (0: DefaultStatusTicks);
	// building the attention list walks every stream.
	StatusEveryTicks uint32
	// Next receives the node-level frames the host does not handle (anything but node heartbeats);
	// nil counts them as dropped. If it implements shard.UnroutedHandler (the stream host does), it
	// also gets the frames for streams this node holds no copy of.
	Next   shard.NodeHandler
	Logger *slog.Logger
}

// DefaultStatusTicks is Config.StatusEveryTicks when left 0.
const DefaultStatusTicks = 10

// Status is what the controller host last published.
type Status struct {
	Primary   bool
	Stats     control.Stats
	Attention []control.Attention
	// FramesDropped counts node-level frames that did not decode or had no handler; SendFailures the
	// seals and assignments a link refused (the controller sends them again).
	FramesDropped, SendFailures uint64
}

type controlProposal struct {
	request uint64
	streams []uint64 // control.Proposal.For, owned here
	kind    meta.OpKind
}

// EventKind names one step of the controller host, as an observer hears it.
type EventKind uint8

// Controller host events (Host.SetObserver).
const (
	BecamePrimary  EventKind = iota + 1 // the controller became active
	NodeLost                            // the controller declared a node lost
	Proposed                            // an op went into the replica (Op)
	Committed                           // an op's result came back (Op; OK says whether it applied)
	SealSent                            // a seal left for Node
	SealReply                           // a seal reply from Node reached the controller
	AssignmentSent                      // an assignment left for Node
)

// Event is one step of the controller host: the failover's parts, timed by an observer. A batch op
// is heard as one Proposed and one Committed event per entry, each naming the entry's stream, the
// kind of the entry's single op (OpRecordRecovery for an entry of OpRecordRecoveries, and so on) and,
// for Committed, whether that entry took effect; Batch is the op's entry count (0 for a single op).
type Event struct {
	Kind   EventKind
	Stream uint64
	Node   uint16
	Op     meta.OpKind
	OK     bool
	Batch  int
}

// entryKind is the kind of the single op each entry of a batch op of kind k is (k for a single op).
func entryKind(k meta.OpKind) meta.OpKind {
	switch k {
	case meta.OpRecordRecoveries:
		return meta.OpRecordRecovery
	case meta.OpCommitRecoveries:
		return meta.OpCommitRecovery
	case meta.OpSetAssignments:
		return meta.OpSetAssignment
	default:
		return k
	}
}

// Host is the controller on this node's metadata replica. It implements shard.NodeHandler:
// set it with Node.SetNodeHandler.
type Host struct {
	cfg     Config
	g       *metahost.Group
	node    *shard.Node
	ctl     *control.Controller
	log     *slog.Logger
	primary bool
	commit  uint64
	client  uint64
	request uint64
	out     []controlProposal // ascending request
	dropped []uint64          // scratch: streams whose proposal was refused at once
	down    []uint16          // peers whose shard 0 link is down, ascending
	opBuf   []byte
	frame   []byte
	attn    []control.Attention
	since   uint32 // ticks since the status was published

	dropFrames   atomic.Uint64 // from any shard
	sendFailures uint64
	nodesLost    uint64                      // the controller's count when last looked at
	observer     atomic.Pointer[func(Event)] // SetObserver

	mu     sync.Mutex
	status Status

	// Seal replies from any shard, waiting for shard 0 (OnSealReply): one run of shard 0 takes all
	// that arrived and pumps the group once.
	repliesMu     sync.Mutex
	replies       []sealReplyFrom
	repliesPosted bool
	repliesTaken  []sealReplyFrom // shard 0's: the batch being handed to the controller
}

type sealReplyFrom struct {
	from uint16
	m    wire.StreamSealReply
}

// New puts a controller on g, the replica of node n (before n starts). It sets itself as
// the node's handler of node-level frames.
func New(cfg Config, g *metahost.Group, n *shard.Node) (*Host, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.StatusEveryTicks == 0 {
		cfg.StatusEveryTicks = DefaultStatusTicks
	}
	ctl, err := control.New(cfg.Control, g.State())
	if err != nil {
		return nil, err
	}
	h := &Host{cfg: cfg, g: g, node: n, ctl: ctl, log: cfg.Logger.With("part", "controller")}
	if err := n.SetNodeHandler(h); err != nil {
		return nil, fmt.Errorf("engine: controller host: %w", err)
	}
	g.SetController(h)
	return h, nil
}

// Controller is the controller itself, for the operator's actions (withdraw, accept a loss), which
// build their ops from it on shard 0's goroutine.
func (h *Host) Controller() *control.Controller { return h.ctl }

// SetObserver makes f hear the host's steps (nil: none), on shard 0's goroutine: f must not block.
// Benchmarks time the failover's parts with it. Safe from any goroutine.
func (h *Host) SetObserver(f func(Event)) {
	if f == nil {
		h.observer.Store(nil)
		return
	}
	h.observer.Store(&f)
}

// observe hands e to the observer, if any.
func (h *Host) observe(e Event) {
	if f := h.observer.Load(); f != nil {
		(*f)(e)
	}
}

// Status returns what the host last published. Safe from any goroutine.
func (h *Host) Status() Status {
	h.mu.Lock()
	defer h.mu.Unlock()
	st := h.status
	st.Attention = slices.Clone(st.Attention)
	return st
}

// OnNodeFrame handles node heartbeats (shard.NodeHandler) and hands other node-level frames to Next.
func (h *Host) OnNodeFrame(s *shard.Shard, from uint16, hd *wire.Header, body []byte) {
	if hd.Command != wire.CommandNodeHeartbeat {
		if h.cfg.Next != nil {
			h.cfg.Next.OnNodeFrame(s, from, hd, body)
		} else {
			h.dropFrames.Add(1)
		}
		return
	}
	if s.Index() == 0 {
		h.handle(from, hd, body)
		return
	}
	hc, bc := *hd, slices.Clone(body)
	_ = h.node.Run(0, func(*shard.Shard) { h.handle(from, &hc, bc) })
}

// OnUnroutedFrame hands the frames for groups this node does not hold (shard.UnroutedHandler) to Next
// when it takes them: the stream host answers a seal for a copy it does not hold, creates a copy an
// assignment names, and hands a seal reply for a stream with no copy here back to OnSealReply.
func (h *Host) OnUnroutedFrame(s *shard.Shard, from uint16, hd *wire.Header, body []byte) bool {
	if uh, ok := h.cfg.Next.(shard.UnroutedHandler); ok {
		return uh.OnUnroutedFrame(s, from, hd, body)
	}
	return false
}

// OnSealReply hands a seal reply to the controller. Seal replies are addressed to the stream's group,
// so they reach the stream host of the primary's node (through its copy's group, or through
// OnUnroutedFrame when the node holds no copy), which calls this (streamhost.Config.SealReplies). Safe
// from any goroutine. Replies are queued and handed over in batches: shard 0 runs once for all that
// arrived since its last run and pumps the group once, so a failover of thousands of streams, whose
// seals are answered within milliseconds of each other, costs shard 0 a few controller passes, not one
// per reply (each pass may look at every stream).
func (h *Host) OnSealReply(from uint16, m wire.StreamSealReply) {
	h.repliesMu.Lock()
	h.replies = append(h.replies, sealReplyFrom{from: from, m: m})
	post := !h.repliesPosted
	h.repliesPosted = true
	h.repliesMu.Unlock()
	if !post {
		return
	}
	if err := h.node.Run(0, h.takeSealReplies); err != nil {
		h.repliesMu.Lock()
		h.replies, h.repliesPosted = h.replies[:0], false // the node is stopping: nothing will read them
		h.repliesMu.Unlock()
	}
}

// takeSealReplies hands every queued seal reply to the controller and pumps once (shard 0).
func (h *Host) takeSealReplies(*shard.Shard) {
	h.repliesMu.Lock()
	h.replies, h.repliesTaken = h.repliesTaken[:0], h.replies
	h.repliesPosted = false
	h.repliesMu.Unlock()
	for _, r := range h.repliesTaken {
		h.observe(Event{Kind: SealReply, Stream: r.m.Stream, Node: r.from})
		h.ctl.OnSealReply(r.from, r.m)
	}
	clear(h.repliesTaken)
	h.g.Pump()
}

// LocalHeartbeat is nodebeat.Config.Self for a node holding a metadata replica (shard 0).
func (h *Host) LocalHeartbeat(hd *wire.Header, body []byte) { h.handle(h.g.Node(), hd, body) }

// handle takes a node heartbeat on shard 0.
func (h *Host) handle(from uint16, hd *wire.Header, body []byte) {
	m, copies, err := wire.DecodeNodeHeartbeat(hd, body)
	if err != nil {
		h.dropFrames.Add(1)
		return
	}
	h.ctl.OnHeartbeat(from, m, copies)
	h.g.Pump()
}

// LinkUp and LinkDown hear shard 0's links (through metahost.Group's LinkWatcher).
func (h *Host) LinkUp(node uint16) {
	if i, ok := slices.BinarySearch(h.down, node); ok {
		h.down = slices.Delete(h.down, i, i+1)
	}
	h.ctl.OnLinkUp(node)
}

func (h *Host) LinkDown(node uint16) {
	if i, ok := slices.BinarySearch(h.down, node); !ok {
		h.down = slices.Insert(h.down, i, node)
	}
	h.ctl.OnLinkDown(node)
}

// Tick runs at each of shard 0's ticks, before the replica's effects are pumped; skipped ticks (a
// stall of shard 0) count for the eager failover grace, which is wall time (control.TicksSkipped).
func (h *Host) Tick(skipped uint64) {
	h.ctl.TicksSkipped(skipped)
	h.ctl.Tick()
	if h.since++; h.since >= h.cfg.StatusEveryTicks {
		h.publish()
	}
}

// replied takes the reply to one of the controller's proposals. It reports false for another
// client's reply.
func (h *Host) Replied(rep vsr.Reply) bool {
	if rep.Client&ClientBase == 0 {
		return false
	}
	if rep.Client != h.client {
		return true // an earlier view's controller: nobody waits for it
	}
	i, ok := slices.BinarySearchFunc(h.out, rep.Request, func(p controlProposal, r uint64) int {
		return cmp.Compare(p.request, r)
	})
	if !ok {
		return true
	}
	p := h.out[i]
	h.out = slices.Delete(h.out, i, i+1)
	r, err := meta.DecodeResult(rep.Result)
	if err != nil {
		h.log.Error("controller proposal: result does not decode", "streams", p.streams, "err", err)
		for _, s := range p.streams {
			h.ctl.ProposalDropped(s)
		}
		return true
	}
	if h.observer.Load() != nil {
		h.observeCommitted(p, r)
	}
	h.ctl.ProposalApplied(p.streams, r)
	return true
}

// observeCommitted tells the observer the outcome of p for each of its streams.
func (h *Host) observeCommitted(p controlProposal, r meta.Result) {
	batch := 0
	if len(p.streams) > 1 || len(r.Entries) > 0 {
		batch = len(p.streams)
	}
	for _, s := range p.streams {
		ok := r.OK()
		if e, found := r.Entry(s); found {
			ok = e.OK()
		} else if batch > 0 {
			ok = false // a batch refused whole
		}
		h.observe(Event{Kind: Committed, Stream: s, Op: entryKind(p.kind), OK: ok, Batch: batch})
	}
}

// step follows the replica's role and commit and carries out the controller's effects. It reports
// whether it proposed anything (the replica then has effects to pump).
func (h *Host) Step() bool {
	r := h.g.Replica()
	if c := r.Commit(); c != h.commit {
		h.commit = c
		h.ctl.StateChanged()
	}
	primary := r.IsPrimary() && r.Normal()
	switch {
	case primary && !h.primary:
		h.primary = true
		h.client = ClientBase | uint64(r.View())<<16 | uint64(h.g.Node())
		h.request = 0
		h.ctl.BecomePrimary()
		h.nodesLost = h.ctl.Stats().NodesLost
		h.observe(Event{Kind: BecamePrimary})
		for _, n := range h.down {
			h.ctl.OnLinkDown(n)
		}
		h.log.Info("controller active on the metadata primary", "view", r.View())
		h.publish()
	case !primary && h.primary:
		h.primary = false
		for _, p := range h.out {
			for _, s := range p.streams {
				h.ctl.ProposalDropped(s)
			}
		}
		h.out = h.out[:0]
		h.ctl.StepDown()
		h.log.Info("controller stepped down", "view", r.View())
		h.publish()
	}
	if !h.primary {
		return false
	}
	return h.carryOut(h.ctl.Ready())
}

// carryOut proposes, seals and assigns what fx asks.
func (h *Host) carryOut(fx *control.Effects) bool {
	if h.observer.Load() != nil {
		if lost := h.ctl.Stats().NodesLost; lost != h.nodesLost {
			h.nodesLost = lost
			h.observe(Event{Kind: NodeLost})
		}
	}
	from := wire.From{Cluster: h.g.Cluster(), Node: h.g.Node()}
	h.dropped = h.dropped[:0]
	proposed := false
	for _, p := range fx.Proposals {
		h.request++
		streams := p.For()
		var err error
		if h.opBuf, err = meta.EncodeOp(h.opBuf[:0], p.Op); err == nil {
			err = h.g.Replica().Propose(h.client, h.request, h.opBuf)
		}
		if err != nil {
			if !errors.Is(err, vsr.ErrNotPrimary) && !errors.Is(err, vsr.ErrPipelineFull) {
				h.log.Warn("controller proposal refused", "streams", streams, "op", p.Op.Kind(), "err", err)
			}
			h.dropped = append(h.dropped, streams...)
			continue
		}
		proposed = true
		h.out = append(h.out, controlProposal{request: h.request, streams: slices.Clone(streams), kind: p.Op.Kind()})
		if h.observer.Load() != nil {
			batch := 0
			if p.Streams != nil {
				batch = len(streams)
			}
			for _, s := range streams {
				h.observe(Event{Kind: Proposed, Stream: s, Op: entryKind(p.Op.Kind()), Batch: batch})
			}
		}
	}
	for i := range fx.Seals {
		s := &fx.Seals[i]
		h.frame = wire.AppendStreamSeal(h.frame[:0], from, &s.Seal, s.Starts)
		h.observe(Event{Kind: SealSent, Stream: s.Seal.Stream, Node: s.To})
		h.sendFrame(s.To)
	}
	for i := range fx.Assignments {
		a := &fx.Assignments[i]
		h.frame = wire.AppendStreamAssignment(h.frame[:0], from, &a.Assignment, a.Starts)
		h.observe(Event{Kind: AssignmentSent, Stream: a.Assignment.Stream, Node: a.To})
		h.sendFrame(a.To)
	}
	for _, s := range h.dropped {
		h.ctl.ProposalDropped(s)
	}
	return proposed
}

// sendFrame sends h.frame to node to, or hands it to LocalFrame when to is this node.
func (h *Host) sendFrame(to uint16) {
	if to == h.g.Node() {
		if h.cfg.LocalFrame != nil {
			hd, body, err := wire.ParseFrame(h.frame)
			assert.True(err == nil, "engine: controller frame does not parse")
			h.cfg.LocalFrame(&hd, body)
		}
		return
	}
	if !h.g.SendFrame(to, h.frame) {
		h.sendFailures++ // the controller seals and assigns again while the copy lags
	}
}

// publish copies the controller's status for Status.
func (h *Host) publish() {
	h.since = 0
	h.attn = h.ctl.Attention(h.attn[:0])
	h.mu.Lock()
	h.status.Primary = h.primary
	h.status.Stats = h.ctl.Stats()
	h.status.Attention = append(h.status.Attention[:0], h.attn...)
	h.status.FramesDropped, h.status.SendFailures = h.dropFrames.Load(), h.sendFailures
	h.mu.Unlock()
}
