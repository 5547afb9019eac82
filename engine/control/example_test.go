package control_test

import (
	"fmt"

	"github.com/ringstream/ringstream/engine/control"
	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/wire"
)

// The host's side of the contract, on the metadata primary: feed ticks and messages, propose what
// Ready returns and report each outcome, send the seals and assignments. Here the metadata group is
// a bare meta.State and the network is left out.
func Example() {
	state := meta.NewState()
	opNumber := uint64(0)
	apply := func(op meta.Op) meta.Result {
		opNumber++
		r, _ := meta.DecodeResult(state.Apply(meta.AppendOp(nil, op), opNumber, nil))
		return r
	}
	for id := uint16(1); id <= 3; id++ {
		apply(meta.RegisterNode{Node: id, Address: fmt.Sprintf("127.0.0.1:%d", 7000+id)})
	}
	majority := meta.Policy{Kind: meta.PolicyMajorityDurable}
	apply(meta.CreateStream{Name: "orders", Copies: 3, Policy: majority, Owner: 1, Followers: []uint16{2, 3},
		Stamped: majority})

	c, err := control.New(control.DefaultConfig(), state)
	if err != nil {
		panic(err)
	}
	c.BecomePrimary()
	// Once per turn: act on the effects; proposals are applied, and each outcome reported back.
	turn := func() *control.Effects {
		fx := c.Ready()
		for _, p := range fx.Proposals {
			r := apply(p.Op)
			c.ProposalDone(p.Stream, r)
			fmt.Printf("%s: %s\n", p.Op.Kind(), r.Code)
		}
		if len(fx.Proposals) > 0 {
			c.StateChanged()
		}
		return fx
	}
	for _, n := range []uint16{1, 2, 3} {
		c.OnHeartbeat(n, wire.NodeHeartbeat{}, wire.CopyTails{})
	}
	turn()
	// Node 1 stops cleanly: eager failover records a recovery; the next turn seals every copy.
	c.OnHeartbeat(1, wire.NodeHeartbeat{Flags: wire.FlagShuttingDown}, wire.CopyTails{})
	turn()
	fx := turn()
	for _, s := range fx.Seals {
		if s.To == 1 {
			continue // node 1 is down; the frame would be dropped
		}
		c.OnSealReply(s.To, wire.StreamSealReply{Stream: s.Seal.Stream, Incarnation: s.Seal.Incarnation,
			FenceEpoch: s.Seal.FenceEpoch, Status: wire.SealSealed, TransitionID: s.Seal.TransitionID,
			RecordTail: uint64(100 + s.To)})
	}
	turn()
	a, _ := state.Assignment(1)
	fmt.Printf("epoch %d owner %d followers %v\n", a.Epoch, a.Owner, a.Followers)
	// Output:
	// record_recovery: ok
	// commit_recovery: ok
	// epoch 2 owner 3 followers [2]
}
