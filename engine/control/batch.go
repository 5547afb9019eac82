package control

import (
	"cmp"
	"slices"

	"github.com/ringstream/ringstream/engine/meta"
)

// For returns every stream the proposal is for: its stream, or a batch op's streams in entry order.
func (p Proposal) For() []uint64 {
	if p.Streams != nil {
		return p.Streams
	}
	return []uint64{p.Stream}
}

// ProposalApplied reports the outcome of a proposal that was committed and applied with result r,
// for the streams it was for (Proposal.For): each stream gets its entry's code when r names one (a
// batch op), else r itself (a single op, or a batch refused whole). It is ProposalDone per stream, so a
// refused entry backs off and is looked at again as a refused single op is.
func (c *Controller) ProposalApplied(streams []uint64, r meta.Result) {
	for i, s := range streams {
		if len(r.Entries) == 0 {
			c.ProposalDone(s, r)
			continue
		}
		e, ok := meta.EntryResult{}, false
		if i < len(r.Entries) && r.Entries[i].Stream == s {
			e, ok = r.Entries[i], true
		} else {
			e, ok = r.Entry(s)
		}
		if !ok {
			c.ProposalDone(s, meta.Result{Code: meta.ResultMalformed, Message: "the result names no entry for the stream"})
			continue
		}
		c.ProposalDone(s, meta.Result{Code: e.Code, Message: r.Message})
	}
}

// batchProposals turns the single ops of one kind gathered in one Ready (every RecordRecovery, every
// CommitRecovery, every SetAssignment) into batch ops of at most meta.BatchEntriesMax entries each, so
// a failover of many streams takes two metadata ops per BatchEntriesMax streams, not two per stream,
// and does not wait for room in the metadata pipeline. A kind (or the last part of a split) with one
// op stays a single op. Other ops stay as they are, ahead of the batches. The per-stream proposal
// slots do not change: a batch holds one entry per stream, and each entry's outcome comes back
// through ProposalApplied.
func (fx *Effects) batchProposals() {
	var records, commits, sets []Proposal
	kept := fx.Proposals[:0]
	for _, p := range fx.Proposals {
		switch p.Op.(type) {
		case meta.RecordRecovery:
			records = append(records, p)
		case meta.CommitRecovery:
			commits = append(commits, p)
		case meta.SetAssignment:
			sets = append(sets, p)
		default:
			kept = append(kept, p)
		}
	}
	fx.Proposals = kept
	fx.Proposals = appendBatches(fx.Proposals, records, func(e []meta.RecordRecovery) meta.Op {
		return meta.RecordRecoveries{Entries: e}
	})
	fx.Proposals = appendBatches(fx.Proposals, sets, func(e []meta.SetAssignment) meta.Op {
		return meta.SetAssignments{Entries: e}
	})
	fx.Proposals = appendBatches(fx.Proposals, commits, func(e []meta.CommitRecovery) meta.Op {
		return meta.CommitRecoveries{Entries: e}
	})
}

// appendBatches appends singles, sorted by stream, to dst as batch ops of up to meta.BatchEntriesMax
// entries (a part of one entry stays single).
func appendBatches[E meta.Op](dst, singles []Proposal, batch func([]E) meta.Op) []Proposal {
	slices.SortFunc(singles, func(x, y Proposal) int { return cmp.Compare(x.Stream, y.Stream) })
	for len(singles) > 0 {
		part := singles[:min(len(singles), meta.BatchEntriesMax)]
		singles = singles[len(part):]
		if len(part) == 1 {
			dst = append(dst, part[0])
			continue
		}
		entries := make([]E, len(part))
		streams := make([]uint64, len(part))
		for i, p := range part {
			entries[i], streams[i] = p.Op.(E), p.Stream
		}
		dst = append(dst, Proposal{Streams: streams, Op: batch(entries)})
	}
	return dst
}
