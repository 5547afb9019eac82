package admin

import (
	"context"
	"time"

	"github.com/ringstream/ringstream/engine/adminapi"
	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/engine/stream"
	"github.com/ringstream/ringstream/engine/streamhost"
	"github.com/ringstream/ringstream/shard"
	"github.com/ringstream/ringstream/wire"
)

// statusWait bounds how long Status waits for a shard to answer its part.
const statusWait = 2 * time.Second

// Status is /v1/status: the node, its metadata replica and controller, its links, the streams of its
// applied metadata state and its own copies. Safe from any goroutine.
func (n *node) Status() adminapi.Status {
	st := adminapi.Status{Node: n.id, Cluster: n.from.Cluster, PeerAddr: n.PeerAddr().String(),
		ClientAddr: n.ClientAddr().String(), Shards: n.cfg.ShardCount, State: n.stateName(),
		Links: []adminapi.Link{}, Streams: []adminapi.Stream{}, Copies: []adminapi.Copy{}}
	if a := n.AdminAddr(); a.IsValid() {
		st.AdminAddr = a.String()
	}
	for _, l := range n.shard.Status() {
		st.Links = append(st.Links, adminapi.Link{Shard: l.Shard, Peer: l.Peer, Up: l.Up})
	}
	for _, f := range n.streams.Status() {
		st.Failures = append(st.Failures, adminapi.Failure{Stream: f.Stream, Incarnation: f.Incarnation, Dir: f.Dir,
			Error: f.Err.Error(), Cause: f.Cause.String(), Retrying: f.Retrying, Attempts: f.Attempts,
			Role: f.Role.String(), Epoch: f.Epoch})
	}
	st.Heartbeats = adminapi.Heartbeats{Sent: n.beat.Sent(), Failures: n.beat.Failures()}
	st.Retention = adminapi.Retention{Bytes: n.cfg.File.Storage.RetentionBytes, AgeMs: int64(n.cfg.File.Storage.RetentionAge)}
	if n.meta != nil {
		n.metaStatus(&st)
	}
	if n.state() == StateServing {
		ctx, cancel := context.WithTimeout(context.Background(), statusWait)
		defer cancel()
		n.copyStatus(ctx, &st)
	}
	return st
}

func (n *node) stateName() string {
	switch n.state() {
	case StateNew:
		return "starting"
	case StateServing:
		return "serving"
	case StateStopping:
		return "stopping"
	}
	return "stopped"
}

// metaStatus fills in the replica, the controller, and (read on shard 0) streams and nodes.
func (n *node) metaStatus(st *adminapi.Status) {
	ms := n.meta.Status()
	st.Meta = &adminapi.Meta{View: ms.View, Op: ms.Op, Commit: ms.Commit, Primary: ms.Primary,
		PrimaryID: n.replicas[int(ms.View)%len(n.replicas)], Normal: ms.Normal, Recovering: ms.Recovering,
		EagerFailovers: ms.EagerFailovers}
	if ms.PersistErr != nil {
		st.Meta.PersistError = ms.PersistErr.Error()
	}
	cs := n.ctl.Status()
	st.Controller = &adminapi.Controller{Active: cs.Primary, Heartbeats: cs.Stats.Heartbeats,
		NodesLost: cs.Stats.NodesLost, Proposals: cs.Stats.Proposals, ProposalsRefused: cs.Stats.ProposalsRefused,
		ProposalsDropped: cs.Stats.ProposalsDropped,
		Seals:            cs.Stats.Seals, SealReplies: cs.Stats.SealReplies, Attention: len(cs.Attention),
		FramesDropped: cs.FramesDropped, SendFailures: cs.SendFailures}
	if n.state() != StateServing {
		return
	}
	up := map[uint16]bool{n.id: true}
	for _, l := range st.Links {
		if l.Shard == 0 && l.Up {
			up[l.Peer] = true
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), statusWait)
	defer cancel()
	_ = n.metaSvc.OnShard0(ctx, func() {
		state := n.meta.State()
		for _, nd := range state.Nodes() {
			st.Heartbeats.Nodes = append(st.Heartbeats.Nodes, adminapi.NodeBeat{Node: nd.ID, Address: nd.Address,
				Status: nd.Status.String(), LinkUp: up[nd.ID]})
			if nd.ID == n.id && nd.Status == meta.NodeRegistered {
				st.Registered = true
			}
		}
		for _, s := range state.Streams() {
			st.Streams = append(st.Streams, streamStatus(state, s))
		}
	})
}

func streamStatus(state *meta.State, s meta.Stream) adminapi.Stream {
	a, _ := state.Assignment(s.ID)
	out := adminapi.Stream{ID: s.ID, Name: s.Name, Incarnation: s.Incarnation, Copies: s.Copies,
		Policy: s.Policy.String(), Epoch: a.Epoch, Owner: a.Owner, Followers: a.Followers, Stamped: a.Policy.String()}
	if out.Followers == nil {
		out.Followers = []uint16{}
	}
	if r, ok := state.RecoveryOf(s.ID); ok {
		out.Recovery, out.RecoveryID = r.Status.String(), r.ID
	}
	return out
}

// copyStatus lists this node's serving copies (as the stream host last published them for the node
// heartbeats), each read again on its shard for its tails.
func (n *node) copyStatus(ctx context.Context, st *adminapi.Status) {
	shards := n.shard.Shards()
	for _, t := range n.streams.AppendCopyTails(nil) {
		i := shard.ShardOf(t.Stream, len(shards))
		var cs streamhost.CopyState
		done := make(chan struct{})
		if err := n.shard.Run(i, func(sh *shard.Shard) { cs = n.streams.State(sh, t.Stream); close(done) }); err != nil {
			return
		}
		select {
		case <-done:
		case <-ctx.Done():
			return
		}
		st.Copies = append(st.Copies, adminapi.Copy{Stream: t.Stream, Incarnation: t.Incarnation, Shard: i, Open: cs.Open,
			Role: roleName(cs.Role, cs.Open), Epoch: t.Epoch, Appended: cs.Appended, Durable: cs.Durable,
			Confirmed: cs.Confirmed, CursorTail: t.CursorTail, Head: cs.Head, RecordBytes: cs.RecordBytes,
			CursorBytes: cs.CursorBytes, OwnerSilent: t.Flags&wire.CopyOwnerSilent != 0,
			OwnerRestarted: t.Flags&wire.CopyOwnerRestarted != 0})
	}
}

// roleName names a copy's role for status.
func roleName(r stream.Role, open bool) string {
	if !open {
		return "closed"
	}
	return r.String()
}
