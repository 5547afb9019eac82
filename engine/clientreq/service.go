package clientreq

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringstream/ringstream/engine/controlhost"
	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/engine/metahost"
	"github.com/ringstream/ringstream/engine/vsr"
	"github.com/ringstream/ringstream/shard"
	"github.com/ringstream/ringstream/wire"
)

// metaRequestsMax bounds the metadata requests a node serves (or forwards) at once; more are answered
// CodeOverloaded at once.
const metaRequestsMax = 256

// forwardedOnce marks the request id of a request forwarded by a metadata replica: the node it reaches
// serves it or refuses it, it never forwards it again.
const forwardedOnce = 1 << 63

// metaJob is one metadata request: from a client connection of this node, or forwarded by a peer.
type metaJob struct {
	h    wire.Header // Sender and the request id are the origin's
	body []byte      // a copy
	// client origin
	client shard.ClientRequest
	// peer origin (from != 0)
	from uint16
}

func (j *metaJob) requestID() uint64 { return binary.LittleEndian.Uint64(j.h.Area[:8]) }

// Service serves the metadata requests of clients (create, delete, list, lookup). On the node of
// the metadata primary it reads the applied state on shard 0 and proposes ops to the local replica;
// elsewhere it forwards the request over the peer link to the primary's node and relays the answer.
// Each request runs on a goroutine of its own (at most metaRequestsMax at once), since a proposal
// waits for a commit; nothing of it runs on a shard goroutine but the reads and the sends.
type Service struct {
	n      *node
	sem    chan struct{}
	wg     sync.WaitGroup
	ctx    context.Context
	cancel context.CancelFunc
	client uint64 // this process's VSR client id
	seq    atomic.Uint64

	mu      sync.Mutex
	fwd     map[uint64]chan []byte // forwarded request id -> its reply frame
	closed  bool
	guess   atomic.Uint32 // a node without a replica: the index in replicas it forwards to
	fwdNext atomic.Uint64
}

func newService(n *node) *Service {
	ctx, cancel := context.WithCancel(context.Background())
	var b [8]byte
	_, _ = rand.Read(b[:])
	// Below controlhost.ClientBase, never 0: a restarted process is a new VSR client, so its request numbers
	// never meet the client table's entries of the previous one.
	client := binary.LittleEndian.Uint64(b[:])&(controlhost.ClientBase-1) | 1
	return &Service{n: n, sem: make(chan struct{}, metaRequestsMax), ctx: ctx, cancel: cancel,
		client: client, fwd: make(map[uint64]chan []byte)}
}

// submitClient takes a client's metadata request on shard s (its connection's shard).
func (m *Service) submitClient(s *shard.Shard, req shard.ClientRequest, h *wire.Header, body []byte) {
	if err := m.start(metaJob{h: *h, body: append([]byte(nil), body...), client: req}); err != nil {
		m.n.clients.refuse(s, req, err.code, 0, err.msg)
	}
}

// notStarted says why a metadata request was not taken: the node is stopping (CodeUnavailable: the
// client goes elsewhere, a forwarder waits for the next primary) or serves metaRequestsMax already
// (CodeOverloaded).
type notStarted struct {
	code wire.ErrorCode
	msg  string
}

// start runs j on a goroutine of its own, or says why not: the service closed, or metaRequestsMax
// are running.
func (m *Service) start(j metaJob) *notStarted {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return &notStarted{wire.CodeUnavailable, fmt.Sprintf("node %d is stopping; retry", m.n.id)}
	}
	select {
	case m.sem <- struct{}{}:
	default:
		m.mu.Unlock()
		return &notStarted{wire.CodeOverloaded, fmt.Sprintf("node %d serves %d metadata requests already; retry",
			m.n.id, metaRequestsMax)}
	}
	m.wg.Add(1)
	m.mu.Unlock()
	go m.run(j)
	return nil
}

func (m *Service) run(j metaJob) {
	defer m.wg.Done()
	defer func() { <-m.sem }()
	ctx, cancel := context.WithTimeout(m.ctx, m.n.metaRequestTimeout)
	defer cancel()
	frame := m.serve(ctx, &j)
	m.answer(ctx, &j, frame)
}

// answerRetry is how often an answer to a forwarder is sent again while this node's link to it is
// not up.
const answerRetry = 10 * time.Millisecond

// answer sends a reply frame to j's origin: the client connection on its own shard, or the peer that
// forwarded it (from shard 0). Links are one per direction: a forward can arrive over the
// forwarder's link while this node's link back is not up yet (after a start or a reconnect), and an
// answer dropped then held the forwarder's client for its whole MetaRequestTimeout. So an answer the
// link refuses is sent again every answerRetry until ctx, the request's own time, ends; only then is
// it lost, and the forwarder answers its client when its wait ends.
func (m *Service) answer(ctx context.Context, j *metaJob, frame []byte) {
	if j.from == 0 {
		_ = m.n.shard.Run(j.client.Shard, func(s *shard.Shard) {
			m.n.clients.send(s, &m.n.clients.shards[s.Index()], j.client, frame)
		})
		return
	}
	for {
		sent := make(chan error, 1)
		if m.n.shard.Run(0, func(s *shard.Shard) { sent <- s.SendFrame(j.from, frame) }) != nil {
			return // the node is stopping
		}
		var err error
		select {
		case err = <-sent:
		case <-m.ctx.Done(): // the node is stopping: shard 0 may never run the send
			return
		}
		if err == nil {
			return
		}
		m.n.metrics.forwardAnswersRetried.Inc()
		t := time.NewTimer(answerRetry)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			m.n.metrics.forwardsLost.Inc()
			return
		}
	}
}

// serve answers j: locally on the metadata primary, else through the primary's node. A request that
// finds no primary to ask (the group electing one, or the one it named gone) waits here for the
// replica's next change and tries again, within primaryWait: a client meets a view change as a
// slower answer, not as a refusal into its backoff.
func (m *Service) serve(ctx context.Context, j *metaJob) []byte {
	var expired <-chan time.Time
	for {
		frame, again := m.serveOnce(ctx, j)
		if !again {
			return frame
		}
		if expired == nil {
			d := m.primaryWait(j)
			if d == 0 {
				return frame
			}
			t := time.NewTimer(d)
			defer t.Stop()
			expired = t.C
		}
		select {
		case <-m.changes(ctx):
		case <-expired:
			return frame
		case <-ctx.Done():
			return frame
		}
	}
}

// changes is the local metadata replica's next-change channel (metahost.Group.Changed); nil, which
// never fires, on a node without a replica or when shard 0 did not answer.
func (m *Service) changes(ctx context.Context) <-chan struct{} {
	if m.n.meta == nil {
		return nil
	}
	var ch <-chan struct{}
	if m.OnShard0(ctx, func() { ch = m.n.meta.Changed() }) != nil {
		return nil
	}
	return ch
}

// serveOnce is one try of serve; again reports a refusal that a change of the local replica may
// clear (no primary known, or the one named did not take the forward).
func (m *Service) serveOnce(ctx context.Context, j *metaJob) (frame []byte, again bool) {
	rid := j.requestID()
	if g := m.n.meta; g != nil && g.Status().Primary {
		return m.local(ctx, j), false
	}
	if j.from != 0 && (rid&forwardedOnce != 0 || m.n.meta == nil) {
		return m.refusal(rid, wire.CodeNotYet, fmt.Sprintf("node %d is not the metadata primary; retry", m.n.id)), false
	}
	target := m.primaryGuess()
	if target == 0 {
		return m.refusal(rid, wire.CodeNotYet, "the metadata group is electing a primary; retry"), true
	}
	return m.forward(ctx, j, target)
}

// primaryGuess is the node to forward to: the primary of this replica's view, or, on a node without a
// replica, the replica it last reached (rotated after each failure).
func (m *Service) primaryGuess() uint16 {
	reps := m.n.replicas
	if g := m.n.meta; g != nil {
		st := g.Status()
		if !st.Normal {
			return 0
		}
		return reps[int(st.View)%len(reps)]
	}
	return reps[int(m.guess.Load())%len(reps)]
}

// forward sends j to target under a request id of this node's and waits for the answer; again
// reports that target could not be reached, or answered that it could not serve as the primary.
func (m *Service) forward(ctx context.Context, j *metaJob, target uint16) (frame []byte, again bool) {
	rid := j.requestID()
	id := m.fwdNext.Add(1)
	if m.n.meta != nil {
		id |= forwardedOnce
	}
	done := make(chan []byte, 1)
	m.mu.Lock()
	m.fwd[id] = done
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.fwd, id)
		m.mu.Unlock()
	}()
	out := reframe(nil, &j.h, j.body, m.n.id, id)
	err := m.n.shard.Run(0, func(s *shard.Shard) {
		if err := s.SendFrame(target, out); err != nil {
			done <- nil
		}
	})
	if err != nil {
		return m.refusal(rid, wire.CodeUnavailable, fmt.Sprintf("node %d is stopping", m.n.id)), false
	}
	m.n.metrics.forwards.Inc()
	changed := m.changes(ctx)
	for {
		select {
		case reply := <-done:
			if reply != nil {
				h, body, err := wire.ParseFrame(reply)
				if err == nil {
					return reframe(nil, &h, body, m.n.id, rid), primaryCouldNotServe(&h, body)
				}
			}
		case <-changed:
			if m.primaryGuess() == target {
				changed = m.changes(ctx) // the commit moved: target is still the primary
				continue
			}
			// The view moved on: target is no longer the primary (it may be dead), so waiting out
			// MetaRequestTimeout for its answer would only hold the client.
			return m.refusal(rid, wire.CodeUnavailable, fmt.Sprintf("node %d stopped being the metadata primary; retry", target)), true
		case <-ctx.Done():
		}
		break
	}
	m.guess.Add(1)
	return m.refusal(rid, wire.CodeUnavailable, fmt.Sprintf("the metadata primary (node %d) did not answer; retry", target)), ctx.Err() == nil
}

// primaryCouldNotServe reports a forwarded request's answer that says the node was not, or stopped
// being, the primary that could serve it (CodeNotYet, CodeUnavailable): the request may be tried
// again once the forwarding replica's view moves.
func primaryCouldNotServe(h *wire.Header, body []byte) bool {
	if h.Command != wire.CommandErrorReply {
		return false
	}
	e, err := wire.DecodeErrorReply(h, body)
	return err == nil && (e.Code == wire.CodeNotYet || e.Code == wire.CodeUnavailable)
}

// OnPeerFrame takes a node-level client frame from a peer: a forwarded request to serve, or the answer
// to one this node forwarded. It runs on the shard that received the frame; body is copied.
func (m *Service) OnPeerFrame(s *shard.Shard, from uint16, h *wire.Header, body []byte) {
	switch h.Command {
	case wire.CommandCreateStream, wire.CommandDeleteStream, wire.CommandListStreams, wire.CommandLookupStream,
		wire.CommandCreateStreams, wire.CommandDeleteStreams:
		j := metaJob{h: *h, body: append([]byte(nil), body...), from: from}
		if err := m.start(j); err != nil {
			_ = s.SendFrame(from, m.refusal(j.requestID(), err.code, err.msg))
		}
	case wire.CommandCreateStreamReply, wire.CommandDeleteStreamReply, wire.CommandListStreamsReply,
		wire.CommandLookupStreamReply, wire.CommandCreateStreamsReply, wire.CommandDeleteStreamsReply,
		wire.CommandErrorReply:
		id := binary.LittleEndian.Uint64(h.Area[:8])
		m.mu.Lock()
		done := m.fwd[id]
		m.mu.Unlock()
		if done == nil {
			m.n.metrics.forwardsLate.Inc() // its wait ended; the client was answered unavailable
			return
		}
		select {
		case done <- reframe(nil, h, body, h.Sender, id):
		default:
		}
	default:
		m.n.metrics.nodeFramesDropped.Inc()
	}
}

// reframe re-encodes a client frame with sender and request id replaced, the rest as it was.
func reframe(dst []byte, h *wire.Header, body []byte, sender uint16, requestID uint64) []byte {
	hc := *h
	hc.Sender = sender
	binary.LittleEndian.PutUint64(hc.Area[:8], requestID)
	start := len(dst)
	dst = wire.BeginFrame(dst, &hc)
	dst = append(dst, body...)
	wire.EndFrame(dst[start:], h.EntryCount)
	return dst
}

// refusal is an error reply frame for request rid (metadata requests name no stream).
func (m *Service) refusal(rid uint64, code wire.ErrorCode, msg string) []byte {
	m.n.metrics.countError(code)
	return errorFrame(nil, m.n.from, rid, 0, code, 0, msg)
}

// OnShard0 runs f on shard 0 and waits for it (or ctx).
func (m *Service) OnShard0(ctx context.Context, f func()) error {
	done := make(chan struct{})
	if err := m.n.shard.Run(0, func(*shard.Shard) { f(); close(done) }); err != nil {
		return err
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// propose orders op through the local replica and waits for its result.
func (m *Service) propose(ctx context.Context, op []byte) (metahost.ProposeResult, error) {
	ch := m.n.meta.Propose(m.client, m.seq.Add(1), op)
	select {
	case res := <-ch:
		return res, res.Err
	case <-ctx.Done():
		return metahost.ProposeResult{}, ctx.Err()
	}
}

// ProposeOp checks op against meta's rules (EncodeOp) and proposes it: an op that breaks a rule is
// refused here, on the node that built it, and never reaches the log (issue 21: an op built from a
// client's name was asserted, and the assertion took the metadata primary down).
func (m *Service) ProposeOp(ctx context.Context, op meta.Op) (metahost.ProposeResult, error) {
	b, err := meta.EncodeOp(nil, op)
	if err != nil {
		return metahost.ProposeResult{}, err
	}
	return m.propose(ctx, b)
}

// proposeRefusal turns a proposal's failure into an error reply.
func (m *Service) proposeRefusal(rid uint64, err error) []byte {
	code, msg := proposeError(err)
	return m.refusal(rid, code, msg)
}

// proposeError is the client's error code and message for a proposal that failed.
func proposeError(err error) (wire.ErrorCode, string) {
	switch {
	case errors.Is(err, meta.ErrOpInvalid):
		return wire.CodeOf(err), err.Error()
	case errors.Is(err, vsr.ErrNotPrimary):
		return wire.CodeNotYet, "the metadata primary changed; retry"
	case errors.Is(err, vsr.ErrPipelineFull):
		return wire.CodeOverloaded, "the metadata group's pipeline is full; retry"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return wire.CodeUnavailable, "the metadata op did not commit in time; retry"
	}
	return wire.CodeInternal, err.Error()
}

// Close stops taking requests and cancels the ones running; Wait waits for them.
func (m *Service) Close() {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	m.cancel()
}

func (m *Service) Wait() { m.wg.Wait() }

// Register runs until ctx ends: the node's registration of every configured node at its client
// address, while this node holds the metadata primary (see register).
func (m *Service) Register(ctx context.Context) { m.n.register(ctx) }

// OnNodeFrame takes the node-level frames the controller host does not (all of them on a node
// without a metadata replica): forwarded metadata requests and their answers are served; anything
// else is counted and dropped.
func (m *Service) OnNodeFrame(s *shard.Shard, from uint16, h *wire.Header, body []byte) {
	if h.Command.Client() {
		m.OnPeerFrame(s, from, h, body)
		return
	}
	m.n.metrics.nodeFramesDropped.Inc() // node heartbeats on a node without a controller
}

// ForwardTo makes a node without a metadata replica forward its next metadata requests to the
// replica of member index i first (tests point it at a backup).
func (m *Service) ForwardTo(i int) { m.guess.Store(uint32(i)) }
