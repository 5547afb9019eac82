package clientreq

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/engine/metahost"
	"github.com/ringstream/ringstream/wire"
)

// listLimitMax caps the streams of one list reply.
const listLimitMax = 1000

// local serves a metadata request on the node of the metadata primary.
func (m *Service) local(ctx context.Context, j *metaJob) []byte {
	rid := j.requestID()
	switch j.h.Command {
	case wire.CommandLookupStream:
		req, err := wire.DecodeLookupStream(&j.h, j.body)
		if err != nil {
			return m.refusal(rid, wire.CodeOf(err), err.Error())
		}
		return m.lookup(ctx, &req)
	case wire.CommandListStreams:
		req, err := wire.DecodeListStreams(&j.h, j.body)
		if err != nil {
			return m.refusal(rid, wire.CodeOf(err), err.Error())
		}
		return m.list(ctx, req)
	case wire.CommandCreateStream:
		req, err := wire.DecodeCreateStream(&j.h, j.body)
		if err != nil {
			return m.refusal(rid, wire.CodeOf(err), err.Error())
		}
		return m.create(ctx, req)
	case wire.CommandDeleteStream:
		req, err := wire.DecodeDeleteStream(&j.h, j.body)
		if err != nil {
			return m.refusal(rid, wire.CodeOf(err), err.Error())
		}
		return m.delete(ctx, rid, string(req.Name))
	case wire.CommandCreateStreams:
		req, err := wire.DecodeCreateStreams(&j.h, j.body)
		if err != nil {
			return m.refusal(rid, wire.CodeOf(err), err.Error())
		}
		return m.createMany(ctx, req)
	case wire.CommandDeleteStreams:
		req, err := wire.DecodeDeleteStreams(&j.h, j.body)
		if err != nil {
			return m.refusal(rid, wire.CodeOf(err), err.Error())
		}
		return m.deleteMany(ctx, req)
	}
	return m.refusal(rid, wire.CodeInvalidRequest, fmt.Sprintf("%s is not a metadata request", j.h.Command))
}

// lookup answers who owns the stream req names, with the owner's client address. A long poll
// (req.AfterEpoch above 0) is answered once the stream's assignment is newer than AfterEpoch and has
// an owner, or when its wait (capped at lookupWaitMax) ends, with what the state holds then; it
// wakes on each change of the replica (metahost.Group.Changed), never on a timer of its own.
func (m *Service) lookup(ctx context.Context, req *wire.LookupStream) []byte {
	rid, name := req.RequestID, string(req.Name)
	var expired <-chan time.Time
	if req.AfterEpoch > 0 {
		t := time.NewTimer(m.lookupWait(req))
		defer t.Stop()
		expired = t.C
	}
	last := req.AfterEpoch == 0
	for {
		var frame []byte
		var changed <-chan struct{}
		err := m.OnShard0(ctx, func() {
			if !m.n.meta.Status().Primary {
				frame = m.refusal(rid, wire.CodeNotYet, fmt.Sprintf("node %d is no longer the metadata primary; retry", m.n.id))
				return
			}
			st := m.n.meta.State()
			s, ok := st.StreamByName(name)
			if !ok {
				frame = m.refusal(rid, wire.CodeUnknownStream, fmt.Sprintf("no stream is named %q", name))
				return
			}
			a, _ := st.Assignment(s.ID)
			r := wire.LookupStreamReply{RequestID: rid, Stream: s.ID, Incarnation: s.Incarnation, Epoch: a.Epoch}
			if _, recovering := st.RecoveryOf(s.ID); !recovering {
				r.Owner = a.Owner
				if addr, ok := m.n.clientAddrOf(a.Owner); ok {
					r.OwnerAddr = []byte(addr)
				}
			}
			if last || (r.Epoch > req.AfterEpoch && r.Owner != 0) {
				frame = wire.AppendLookupStreamReply(nil, m.n.from, &r)
				return
			}
			changed = m.n.meta.Changed()
		})
		if err != nil {
			return m.proposeRefusal(rid, err)
		}
		if frame != nil {
			return frame
		}
		select {
		case <-changed:
		case <-expired:
			last = true
		case <-ctx.Done():
			return m.refusal(rid, wire.CodeUnavailable, "the lookup's wait was cut short; retry")
		}
	}
}

// lookupWaitMax caps a long-poll lookup's wait. It is also kept below half the node's
// MetaRequestTimeout, so that a forwarded lookup is answered by the primary before its forwarder
// gives up on it.
const lookupWaitMax = 5 * time.Second

// lookupWait is how long a long-poll lookup may wait here.
func (m *Service) lookupWait(req *wire.LookupStream) time.Duration {
	return min(time.Duration(req.WaitMs)*time.Millisecond, lookupWaitMax, m.n.metaRequestTimeout/2)
}

// primaryWaitMax bounds how long a metadata request waits on a node that knows no primary to send it
// to (the group electing one, or the one it named gone) before it is refused: about four view changes
// here, so a request that meets a failover of the metadata primary is served by the next one instead
// of being refused into the client's backoff.
const primaryWaitMax = time.Second

// primaryWait reports how long j may wait on this node for a primary to serve it: a long-poll lookup
// its own wait, any other request primaryWaitMax (both within half of MetaRequestTimeout); 0 on a node
// without a metadata replica, which has no changes to wait on.
func (m *Service) primaryWait(j *metaJob) time.Duration {
	if m.n.meta == nil {
		return 0
	}
	if j.h.Command == wire.CommandLookupStream {
		if req, err := wire.DecodeLookupStream(&j.h, j.body); err == nil && req.AfterEpoch > 0 {
			return max(m.lookupWait(&req), min(primaryWaitMax, m.n.metaRequestTimeout/2))
		}
	}
	return min(primaryWaitMax, m.n.metaRequestTimeout/2)
}

// clientAddrOf is node id's client address: as registered in the metadata state, else as configured.
// It runs on shard 0.
func (n *node) clientAddrOf(id uint16) (string, bool) {
	if n.meta != nil {
		if nd, ok := n.meta.State().Node(id); ok && nd.Address != "" {
			return nd.Address, true
		}
	}
	for _, p := range n.clientAddrs {
		if p.Node == id {
			return p.Addr.String(), true
		}
	}
	return "", false
}

// list answers up to req.Limit (at most listLimitMax) streams with ids above req.After.
func (m *Service) list(ctx context.Context, req wire.ListStreams) []byte {
	var frame []byte
	err := m.OnShard0(ctx, func() {
		all := m.n.meta.State().Streams()
		i, _ := slices.BinarySearchFunc(all, req.After+1, func(s meta.Stream, id uint64) int { return cmp.Compare(s.ID, id) })
		all = all[i:]
		limit := min(int(req.Limit), listLimitMax)
		more := len(all) > limit
		all = all[:min(len(all), limit)]
		infos := make([]wire.StreamInfo, len(all))
		for k, s := range all {
			infos[k] = wire.StreamInfo{Stream: s.ID, Incarnation: s.Incarnation, Copies: s.Copies, Name: []byte(s.Name)}
			infos[k].Policy, infos[k].ConfirmCount = wirePolicy(s.Policy, s.Copies)
		}
		frame = wire.AppendListStreamsReply(nil, m.n.from, &wire.ListStreamsReply{RequestID: req.RequestID, More: more}, infos)
	})
	if err != nil {
		return m.proposeRefusal(req.RequestID, err)
	}
	return frame
}

// wirePolicy is the policy of a stream of copies copies as the client protocol names it. A count is
// capped at the copies, as the confirm rule caps it (meta.StreamConfirmPolicy): the metadata state
// allows any count, and a stream created before wire's PolicyRule bounded it may carry a larger one,
// which the list reply's encoder would refuse.
func wirePolicy(p meta.Policy, copies uint8) (wire.ConfirmPolicy, uint8) {
	switch p.Kind {
	case meta.PolicyMajorityDurable:
		return wire.PolicyMajority, 0
	case meta.PolicyCountDurable, meta.PolicyCountAccepted:
		return wire.PolicyCount, min(p.Count, max(copies, 1))
	}
	return wire.PolicyAll, 0
}

// metaPolicy is a client's confirm policy as the metadata state records it.
func metaPolicy(p wire.ConfirmPolicy, count uint8) meta.Policy {
	switch p {
	case wire.PolicyMajority:
		return meta.Policy{Kind: meta.PolicyMajorityDurable}
	case wire.PolicyCount:
		return meta.Policy{Kind: meta.PolicyCountDurable, Count: count}
	}
	return meta.Policy{Kind: meta.PolicyLocalDurable}
}

// create places a new stream and proposes it. Placement: the registered nodes this node reaches
// (its shard 0 link is up) holding the fewest copies, then the lowest ids; the first is the owner. A replicated stream's assignment is stamped
// with the cluster's assignment policy (the controller's rule), a single copy with the stream's own.
func (m *Service) create(ctx context.Context, req wire.CreateStream) []byte {
	rid, name := req.RequestID, string(req.Name)
	// The decoder checked the name, the copy count and the policy against wire's rules (a forwarded
	// request was decoded here too); the cluster's size is what only this node knows.
	if err := wire.ValidateCopies(req.Copies, len(m.n.clientAddrs)); err != nil {
		return m.refusal(rid, wire.CodeOf(err), err.Error())
	}
	policy := metaPolicy(req.Policy, req.ConfirmCount)
	var op meta.CreateStream
	var refusal []byte
	err := m.OnShard0(ctx, func() {
		st := m.n.meta.State()
		if _, ok := st.StreamByName(name); ok {
			refusal = m.refusal(rid, wire.CodeStreamExists, fmt.Sprintf("a stream is named %q already", name))
			return
		}
		p := newPlacement(st, m.n.reachable())
		if len(p.nodes) < int(req.Copies) {
			refusal = m.refusal(rid, wire.CodeUnavailable, fmt.Sprintf("%d copies asked, %d registered nodes reachable",
				req.Copies, len(p.nodes)))
			return
		}
		nodes := p.pick(int(req.Copies))
		op = meta.CreateStream{Name: name, Copies: req.Copies, Policy: policy, Owner: nodes[0],
			Followers: slices.Sorted(slices.Values(nodes[1:])), Stamped: policy}
		if req.Copies > 1 {
			op.Stamped = m.n.cfg.Policy
		}
	})
	if err != nil {
		return m.proposeRefusal(rid, err)
	}
	if refusal != nil {
		return refusal
	}
	res, err := m.ProposeOp(ctx, op)
	if err != nil {
		return m.proposeRefusal(rid, err)
	}
	if f := m.resultRefusal(rid, res); f != nil {
		return f
	}
	return m.createdReply(ctx, rid, name)
}

// placement chooses the nodes of new streams: the registered nodes reachable reports holding the
// fewest copies (then the lowest ids), and among them as owner the one owning the fewest streams
// (then the lowest id), so owners spread even when every stream has a copy on every node. Each pick
// counts what it placed, so the streams of one batched create spread as one-by-one creates do.
type placement struct {
	nodes []uint16
	load  map[uint16]int // copies held
	owned map[uint16]int // streams owned
}

func newPlacement(st *meta.State, reachable func(uint16) bool) *placement {
	p := &placement{load: map[uint16]int{}, owned: map[uint16]int{}}
	for _, nd := range st.Nodes() {
		if nd.Status == meta.NodeRegistered && reachable(nd.ID) {
			p.nodes = append(p.nodes, nd.ID)
		}
	}
	for _, s := range st.Streams() {
		a, _ := st.Assignment(s.ID)
		p.load[a.Owner]++
		p.owned[a.Owner]++
		for _, f := range a.Followers {
			p.load[f]++
		}
	}
	return p
}

// pick returns copies nodes (at most len(p.nodes)), the owner first, and counts them.
func (p *placement) pick(copies int) []uint16 {
	slices.SortFunc(p.nodes, func(x, y uint16) int { return cmp.Or(cmp.Compare(p.load[x], p.load[y]), cmp.Compare(x, y)) })
	out := slices.Clone(p.nodes[:min(copies, len(p.nodes))])
	owner := slices.MinFunc(out, func(x, y uint16) int { return cmp.Or(cmp.Compare(p.owned[x], p.owned[y]), cmp.Compare(x, y)) })
	i := slices.Index(out, owner)
	out[0], out[i] = out[i], out[0]
	for _, n := range out {
		p.load[n]++
	}
	p.owned[owner]++
	return out
}

// delete proposes the deletion of the stream named name at its current incarnation.
func (m *Service) delete(ctx context.Context, rid uint64, name string) []byte {
	var op meta.DeleteStream
	var found bool
	err := m.OnShard0(ctx, func() {
		if s, ok := m.n.meta.State().StreamByName(name); ok {
			op, found = meta.DeleteStream{Stream: s.ID, Incarnation: s.Incarnation}, true
		}
	})
	if err != nil {
		return m.proposeRefusal(rid, err)
	}
	if !found {
		return m.refusal(rid, wire.CodeUnknownStream, fmt.Sprintf("no stream is named %q", name))
	}
	res, err := m.ProposeOp(ctx, op)
	if err != nil {
		return m.proposeRefusal(rid, err)
	}
	if f := m.resultRefusal(rid, res); f != nil {
		return f
	}
	return wire.AppendDeleteStreamReply(nil, m.n.from, &wire.StreamIDReply{RequestID: rid, Stream: op.Stream,
		Incarnation: op.Incarnation})
}

// resultRefusal is the error reply for an op the state refused, nil when it took effect.
func (m *Service) resultRefusal(rid uint64, res metahost.ProposeResult) []byte {
	r, err := meta.DecodeResult(res.Result)
	if err != nil {
		return m.refusal(rid, wire.CodeInternal, fmt.Sprintf("op %d: result does not decode: %v", res.Op, err))
	}
	if r.OK() {
		return nil
	}
	code := resultCode(r.Code)
	if code == wire.CodeUnavailable || code == wire.CodeInvalidRequest {
		return m.refusal(rid, code, r.String())
	}
	return m.refusal(rid, code, r.Message)
}

// resultCode is the client's error code for an op (or a batch entry) the state refused.
func resultCode(c meta.ResultCode) wire.ErrorCode {
	switch c {
	case meta.ResultNameInUse:
		return wire.CodeStreamExists
	case meta.ResultStreamNotFound, meta.ResultIncarnationMismatch:
		return wire.CodeUnknownStream
	case meta.ResultNodeNotRegistered, meta.ResultRecoveryRecorded:
		return wire.CodeUnavailable
	}
	return wire.CodeInvalidRequest
}

// createdReply answers a create with the new stream's id and incarnation, read after the commit.
func (m *Service) createdReply(ctx context.Context, rid uint64, name string) []byte {
	var s meta.Stream
	var ok bool
	if err := m.OnShard0(ctx, func() { s, ok = m.n.meta.State().StreamByName(name) }); err != nil || !ok {
		return m.refusal(rid, wire.CodeUnavailable, fmt.Sprintf("stream %q committed but not readable; look it up", name))
	}
	return wire.AppendCreateStreamReply(nil, m.n.from, &wire.StreamIDReply{RequestID: rid, Stream: s.ID, Incarnation: s.Incarnation})
}

// registerEvery is how often the metadata primary's node checks that every configured node is
// registered at its configured client address.
const registerEvery = 200 * time.Millisecond

// register runs until ctx ends: while this node holds the metadata primary, it registers every node of
// cluster.peers that the state does not list at its client address (meta.RegisterNode), so the
// controller counts their heartbeats and lookups can name their addresses. Once every node is
// registered it looks again only after a view change (addresses come from the configuration, which
// does not change while the node runs).
func (n *node) register(ctx context.Context) {
	if n.meta == nil {
		return
	}
	t := time.NewTicker(registerEvery)
	defer t.Stop()
	doneView, done := uint32(0), false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		st := n.meta.Status()
		if !st.Primary || (done && st.View == doneView) {
			continue
		}
		var ops []meta.RegisterNode
		err := n.metaSvc.OnShard0(ctx, func() {
			state := n.meta.State()
			for _, p := range n.clientAddrs {
				nd, ok := state.Node(p.Node)
				if !ok || (nd.Status == meta.NodeRegistered && nd.Address != p.Addr.String()) {
					ops = append(ops, meta.RegisterNode{Node: p.Node, Address: p.Addr.String()})
				}
			}
		})
		if err != nil {
			continue
		}
		failed := false
		for _, op := range ops {
			res, err := n.metaSvc.ProposeOp(ctx, op)
			if err != nil {
				failed = true
				break
			}
			if r, err := meta.DecodeResult(res.Result); err == nil {
				n.log.Info("node registered", "registered", op.Node, "address", op.Address, "result", r.String())
			}
		}
		done, doneView = !failed, st.View
	}
}

// reachable reports whether node id is this node or one its shard 0 link is up to: a stream is never
// placed on a node the primary cannot reach (its copy would start with a failover).
func (n *node) reachable() func(uint16) bool {
	up := map[uint16]bool{n.id: true}
	for _, l := range n.shard.Status() {
		if l.Shard == 0 && l.Up {
			up[l.Peer] = true
		}
	}
	return func(id uint16) bool { return up[id] }
}
