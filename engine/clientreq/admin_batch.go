package clientreq

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"unicode/utf8"

	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/engine/metahost"
	"github.com/ringstream/ringstream/wire"
)

// Batched creates and deletes (issue 25 item 2): one request names up to wire.StreamsPerRequestMax
// streams and is answered with one outcome per name, in its order. The names are placed (or looked
// up) in one read of the state, proposed as meta.CreateStreams or meta.DeleteStreams ops of at most
// meta.BatchEntriesMax entries and batchOpBytesMax bytes each, batchOpsInFlight of them at a time,
// and an entry refused by its guard is refused alone. Decisions:
//   - One set of copies and policy for every name of a create (a Kafka CreateTopics of one topic is
//     one request: its partitions share them).
//   - An op that fails as a whole (the primary changed, its pipeline full, its time out) gives each of
//     its names the code a single create would have got (not yet, overloaded, unavailable): the
//     client retries those names; names of the other ops keep their outcomes.
//   - batchOpsInFlight (4) leaves most of the metadata pipeline (32 ops) to the controller: a burst
//     of batched creates never delays a failover's ops by more than a few commits.

const (
	// batchOpBytesMax keeps an op of creates within one superblock copy (vsr.InlineMax, 8096 bytes,
	// less its record header): the op persists with one fsync whatever its names' lengths.
	batchOpBytesMax  = 7 << 10
	batchOpsInFlight = 4
	// outcomeMessageMax bounds the message of one name's outcome, so a reply of a thousand refusals
	// stays small.
	outcomeMessageMax = 256
)

// createMany places and proposes the streams req names.
func (m *Service) createMany(ctx context.Context, req wire.CreateStreams) []byte {
	rid := req.RequestID
	if err := wire.ValidateCopies(req.Copies, len(m.n.clientAddrs)); err != nil {
		return m.refusal(rid, wire.CodeOf(err), err.Error())
	}
	policy := metaPolicy(req.Policy, req.ConfirmCount)
	stamped := policy
	if req.Copies > 1 {
		stamped = m.n.cfg.Policy
	}
	names := make([]string, 0, req.Names.Len())
	for n := range req.Names.All {
		names = append(names, string(n))
	}
	outcomes := make([]wire.StreamOutcome, len(names))
	index := make(map[string]int, len(names)) // name -> its place in the request
	var entries []meta.CreateStream
	var refusal []byte
	err := m.OnShard0(ctx, func() {
		st := m.n.meta.State()
		p := newPlacement(st, m.n.reachable())
		if len(p.nodes) < int(req.Copies) {
			refusal = m.refusal(rid, wire.CodeUnavailable, fmt.Sprintf("%d copies asked, %d registered nodes reachable",
				req.Copies, len(p.nodes)))
			return
		}
		for i, name := range names {
			index[name] = i
			if _, ok := st.StreamByName(name); ok {
				outcomes[i] = refused(wire.CodeStreamExists, fmt.Sprintf("a stream is named %q already", name))
				continue
			}
			nodes := p.pick(int(req.Copies))
			entries = append(entries, meta.CreateStream{Name: name, Copies: req.Copies, Policy: policy,
				Owner: nodes[0], Followers: slices.Sorted(slices.Values(nodes[1:])), Stamped: stamped})
		}
	})
	if err != nil {
		return m.proposeRefusal(rid, err)
	}
	if refusal != nil {
		return refusal
	}
	ops := chunkOps(entries, func(es []meta.CreateStream) meta.Op { return meta.CreateStreams{Entries: es} })
	m.proposeAll(ctx, ops, func(op meta.Op, r meta.Result, failed wire.StreamOutcome) {
		for j, e := range op.(meta.CreateStreams).Entries {
			outcomes[index[e.Name]] = entryOutcome(r, j, failed, e.Name, func(er meta.EntryResult) wire.StreamOutcome {
				return wire.StreamOutcome{Stream: er.Stream}
			})
		}
	})
	// The incarnation of each stream created: read after the commits, as a single create's reply is.
	if err := m.OnShard0(ctx, func() {
		st := m.n.meta.State()
		for i, name := range names {
			if o := &outcomes[i]; o.OK() {
				if s, ok := st.StreamByName(name); ok && s.ID == o.Stream {
					o.Incarnation = s.Incarnation
				} else {
					*o = refused(wire.CodeUnavailable, fmt.Sprintf("stream %q committed but not readable; look it up", name))
				}
			}
		}
	}); err != nil {
		return m.proposeRefusal(rid, err)
	}
	m.countOutcomes(outcomes)
	return wire.AppendCreateStreamsReply(nil, m.n.from, &wire.StreamsReply{RequestID: rid}, outcomes)
}

// deleteMany proposes the deletion of the streams req names, each at its current incarnation.
func (m *Service) deleteMany(ctx context.Context, req wire.DeleteStreams) []byte {
	rid := req.RequestID
	var names []string
	for n := range req.Names.All {
		names = append(names, string(n))
	}
	outcomes := make([]wire.StreamOutcome, len(names))
	index := make(map[uint64]int, len(names)) // stream id -> its name's place in the request
	var entries []meta.DeleteStream
	if err := m.OnShard0(ctx, func() {
		st := m.n.meta.State()
		for i, name := range names {
			s, ok := st.StreamByName(name)
			if !ok {
				outcomes[i] = refused(wire.CodeUnknownStream, fmt.Sprintf("no stream is named %q", name))
				continue
			}
			index[s.ID] = i
			entries = append(entries, meta.DeleteStream{Stream: s.ID, Incarnation: s.Incarnation})
		}
	}); err != nil {
		return m.proposeRefusal(rid, err)
	}
	slices.SortFunc(entries, func(a, b meta.DeleteStream) int { return cmp.Compare(a.Stream, b.Stream) })
	ops := chunkOps(entries, func(es []meta.DeleteStream) meta.Op { return meta.DeleteStreams{Entries: es} })
	m.proposeAll(ctx, ops, func(op meta.Op, r meta.Result, failed wire.StreamOutcome) {
		for j, e := range op.(meta.DeleteStreams).Entries {
			i := index[e.Stream]
			outcomes[i] = entryOutcome(r, j, failed, names[i], func(meta.EntryResult) wire.StreamOutcome {
				return wire.StreamOutcome{Stream: e.Stream, Incarnation: e.Incarnation}
			})
		}
	})
	m.countOutcomes(outcomes)
	return wire.AppendDeleteStreamsReply(nil, m.n.from, &wire.StreamsReply{RequestID: rid}, outcomes)
}

// entryOutcome is the outcome of entry j (named name) of a batch op: failed when the op failed
// whole, the entry's refusal, or took's outcome when it took effect.
func entryOutcome(r meta.Result, j int, failed wire.StreamOutcome, name string,
	took func(meta.EntryResult) wire.StreamOutcome) wire.StreamOutcome {
	switch {
	case failed.Code != 0:
		return failed
	case j >= len(r.Entries):
		return refused(wire.CodeInternal, fmt.Sprintf("op result has %d entries, the op %d", len(r.Entries), j+1))
	case !r.Entries[j].OK():
		return refused(resultCode(r.Entries[j].Code), fmt.Sprintf("%q: %s", name, r.Entries[j].Code))
	}
	return took(r.Entries[j])
}

// chunkOps cuts entries, in order, into batch ops of at most meta.BatchEntriesMax entries and
// batchOpBytesMax encoded bytes.
func chunkOps[E meta.Op](entries []E, batch func([]E) meta.Op) []meta.Op {
	var ops []meta.Op
	start, size := 0, 0
	for i, e := range entries {
		n := len(meta.AppendOp(nil, e))
		if i > start && (i-start == meta.BatchEntriesMax || size+n > batchOpBytesMax) {
			ops = append(ops, batch(entries[start:i]))
			start, size = i, 0
		}
		size += n
	}
	if start < len(entries) {
		ops = append(ops, batch(entries[start:]))
	}
	return ops
}

// proposeAll proposes ops, batchOpsInFlight at a time, and calls done once for each with its
// decoded result, or with the refusal (failed.Code set) a single request would have got when it
// failed whole. done runs on this goroutine, one op at a time.
func (m *Service) proposeAll(ctx context.Context, ops []meta.Op, done func(op meta.Op, r meta.Result, failed wire.StreamOutcome)) {
	type answer struct {
		op  meta.Op
		res metahost.ProposeResult
		err error
	}
	answers := make(chan answer, len(ops))
	sem := make(chan struct{}, batchOpsInFlight)
	for _, op := range ops {
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			res, err := m.ProposeOp(ctx, op)
			answers <- answer{op, res, err}
		}()
	}
	for range ops {
		a := <-answers
		if a.err != nil {
			done(a.op, meta.Result{}, refused(proposeError(a.err)))
			continue
		}
		r, err := meta.DecodeResult(a.res.Result)
		switch {
		case err != nil:
			done(a.op, meta.Result{}, refused(wire.CodeInternal, fmt.Sprintf("op %d: result does not decode: %v", a.res.Op, err)))
		case !r.OK():
			done(a.op, meta.Result{}, refused(resultCode(r.Code), r.String()))
		default:
			done(a.op, r, wire.StreamOutcome{})
		}
	}
}

// refused is one name's refusal, its message cut to outcomeMessageMax (at a character's start).
func refused(code wire.ErrorCode, msg string) wire.StreamOutcome {
	if len(msg) > outcomeMessageMax {
		cut := outcomeMessageMax
		for cut > 0 && !utf8.RuneStart(msg[cut]) {
			cut--
		}
		msg = msg[:cut]
	}
	return wire.StreamOutcome{Code: code, Message: []byte(msg)}
}

// countOutcomes counts each refused name as the error its single request would have been.
func (m *Service) countOutcomes(outcomes []wire.StreamOutcome) {
	for _, o := range outcomes {
		if !o.OK() {
			m.n.metrics.countError(o.Code)
		}
	}
}
