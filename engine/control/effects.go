package control

import (
	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/wire"
)

// Effects is what the controller asks its host (the metadata primary's shard, or engine/sim) to do.
// Ready returns it. The host:
//
//  1. Proposes every op in Proposals to the metadata group, in order, and reports each outcome with
//     ProposalApplied (applied, with its Result, for the streams Proposal.For lists) or
//     ProposalDropped for each of those streams (never proposed, or lost in a view change). Each
//     stream has at most one proposal out at a time, single or as a batch entry.
//  2. Sends every seal in Seals to its node as a wire.StreamSeal frame carrying Starts. A seal to a
//     node whose links are down may be dropped: the worker seals again.
//  3. Sends every assignment in Assignments to its node as a wire.StreamAssignment frame carrying
//     Starts. One may be dropped too: it is sent again while the node's heartbeats show the copy
//     below the assignment's epoch.
//
// The slices alias memory the controller reuses: use them before the next call into the controller.
type Effects struct {
	Proposals   []Proposal
	Seals       []Seal
	Assignments []Assignment

	starts []wire.HistoryStart // the Starts of Seals
}

// Proposal is one metadata op the controller wants committed: a single op for one stream, or a
// batch op (meta.RecordRecoveries, CommitRecoveries, SetAssignments) with one entry per stream. For
// lists the streams either way.
type Proposal struct {
	Stream  uint64   // a single op's stream; 0 for a batch op
	Streams []uint64 // a batch op's streams, in entry order; nil for a single op
	Op      meta.Op
}

// Seal is one stream seal for node To: fence the copy at Seal.FenceEpoch for transition
// Seal.TransitionID, cut it onto Starts, and answer with its tails.
type Seal struct {
	To     uint16
	Seal   wire.StreamSeal
	Starts []wire.HistoryStart
}

func (fx *Effects) reset() {
	fx.Proposals = fx.Proposals[:0]
	fx.Seals = fx.Seals[:0]
	fx.Assignments = fx.Assignments[:0]
	fx.starts = fx.starts[:0]
}

// wireStarts appends starts in wire form to the effects' buffer and returns them.
func (fx *Effects) wireStarts(starts []meta.HistoryStart) []wire.HistoryStart {
	n := len(fx.starts)
	for _, s := range starts {
		fx.starts = append(fx.starts, wire.HistoryStart{Epoch: s.Epoch, Node: s.Node,
			RecordStart: s.RecordStart, CursorStart: s.CursorStart})
	}
	return fx.starts[n:len(fx.starts):len(fx.starts)]
}
