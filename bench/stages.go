package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/ringstream/ringstream/client"
	"github.com/ringstream/ringstream/engine/adminapi"
	"github.com/ringstream/ringstream/internal/monoclock"
)

// The latency budget of one record (--trace-stages): the bench switches every node's stage trace on
// before the load (POST /v1/stages/start), its client producers report each confirmed batch's client
// marks (client.ProducerConfig.OnTrace), and after the load it reads every node's traces (GET
// /v1/stages) and lines each batch's marks up on CLOCK_MONOTONIC, which every process of the machine
// shares.
//
// Decisions where the design is silent:
//   - A batch is in the budget only when every process traced it: the client, the owner's client
//     handler (request), the owner's copy, and the follower whose answer made the quorum (the W-1-th
//     to arrive). The nodes trace every batch while their tables have room (engine/stagetrace), so
//     with one record at a time every batch after the warmup is in it; under heavy load only some.
//   - The top-level stages are consecutive marks on one batch's path, so they add up to its end to
//     end (the client's append to the producer's wake) exactly; StageRow.Part names the top-level
//     stage a detail row splits (replicate and confirm: the owner's commit and the quorum follower's
//     path, which run side by side). Shares are of the end-to-end p50; the p50s of the stages need
//     not add up to it, their means do.
//   - Marks are taken by different processes that read one clock, so a stage is never negative but
//     for the clock's noise (stageClockNoise); a row's MinUs shows it.
//   - The end to end here starts at the batch's first append, as the bench's latency does in a closed
//     loop; with --rate the bench's latency starts at the record's due time, so it can be longer.

// stageClockNoise is how far two processes' readings of CLOCK_MONOTONIC may disagree: the error of
// each one's anchor (internal/monoclock), a microsecond or two; ten times that for safety.
const stageClockNoise = 20 * time.Microsecond

// Stage names: the top-level stages in path order, then the parts of stageReplicate.
const (
	StageClientTake   = "client: sender takes the batch"
	StageClientSend   = "client: encode, start write"
	StageToOwner      = "client -> owner: write, socket, shard read"
	StageOwnerStep    = "owner: held to turn end, stepped, append queued"
	StageReplicate    = "owner: replicate and confirm"
	StageOwnerReply   = "owner: reply handed to the connection"
	StageToClient     = "owner -> client: socket write, client read"
	StageClientWake   = "client: producer woken"
	StageOwnerQueue   = "owner: group commit queued"
	StageOwnerSync    = "owner: write + fdatasync"
	StagePrepare      = "prepare -> follower"
	StageFollowQueue  = "follower: group commit queued"
	StageFollowSync   = "follower: write + fdatasync"
	StageFollowAnswer = "follower: answer queued"
	StageAnswer       = "answer -> owner"
	StageConfirm      = "owner: confirm after the last needed"
)

// StageBudget is the latency budget of one batch, stage by stage, over the batches traced end to end.
type StageBudget struct {
	// Batches is how many batches every process traced (after the warmup); ClientBatches how many
	// the client traced. Dropped counts the nodes' traces lost to full tables.
	Batches       int        `json:"batches"`
	ClientBatches int        `json:"client_batches"`
	Dropped       uint64     `json:"dropped"`
	EndToEnd      StageRow   `json:"end_to_end"`
	Stages        []StageRow `json:"stages"`
	// Failures say why nodes' traces could not be read (the budget is then over the others).
	Failures []string `json:"failures,omitempty"`
}

// StageRow is one stage's durations over the budget's batches, in microseconds.
type StageRow struct {
	Name string `json:"name"`
	// Part is the top-level stage this row details; empty for a top-level stage.
	Part       string  `json:"part,omitempty"`
	Count      int     `json:"count"`
	P50Us      float64 `json:"p50_us"`
	P99Us      float64 `json:"p99_us"`
	MeanUs     float64 `json:"mean_us"`
	MinUs      float64 `json:"min_us"`
	MaxUs      float64 `json:"max_us"`
	ShareOfP50 float64 `json:"share_of_p50"` // P50Us over the end-to-end p50
}

// clientTrace is one batch's client marks, CLOCK_MONOTONIC ns.
type clientTrace struct {
	producer, seq                           uint64
	appended, taken, sent, replyRead, woken int64
}

// clientTraces gathers the producers' traces (their senders call add).
type clientTraces struct {
	clock monoclock.Clock
	from  int64 // traces of batches appended before this (the warmup) are left out
	mu    sync.Mutex
	list  []clientTrace
}

func (c *clientTraces) add(t client.BatchTrace) {
	ct := clientTrace{producer: t.ProducerID, seq: t.Sequence, appended: c.clock.Nanos(t.Appended),
		taken: c.clock.Nanos(t.Taken), sent: c.clock.Nanos(t.Sent), replyRead: c.clock.Nanos(t.ReplyRead),
		woken: c.clock.Nanos(t.Woken)}
	if ct.appended < c.from {
		return
	}
	c.mu.Lock()
	c.list = append(c.list, ct)
	c.mu.Unlock()
}

func (c *clientTraces) all() []clientTrace {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.list)
}

// startStages switches every node's stage trace on; it returns the failures.
func (r *run) startStages(ctx context.Context) []string {
	var failures []string
	for _, addr := range r.liveAdmins() {
		if _, err := r.admin.post(ctx, addr, "/v1/stages/start"); err != nil {
			failures = append(failures, fmt.Sprintf("stage trace not started: %v", err))
		}
	}
	return failures
}

// readStages reads every running node's stage traces and switches them off.
func (r *run) readStages(ctx context.Context) ([]adminapi.StageTrace, []string) {
	var out []adminapi.StageTrace
	var failures []string
	for _, addr := range r.liveAdmins() {
		body, err := r.admin.post(ctx, addr, "/v1/stages/stop")
		if err != nil {
			failures = append(failures, fmt.Sprintf("stage trace not read: %v", err))
			continue
		}
		var st adminapi.StageTrace
		if err := json.Unmarshal(body, &st); err != nil {
			failures = append(failures, fmt.Sprintf("stage trace of %s: %v", addr, err))
			continue
		}
		out = append(out, st)
	}
	return out, failures
}

// batchKey names a produced batch.
type batchKey struct{ producer, seq uint64 }

// followerKey names a follower copy: its node and stream.
type followerKey struct {
	node   uint16
	stream uint64
}

// stageSpan is one stage of one batch: from one mark to the next.
type stageSpan struct {
	name, part string
	from, to   int64
}

// budget joins the client's traces with the nodes' and sums them up per stage.
func budget(clients []clientTrace, nodes []adminapi.StageTrace) *StageBudget {
	reqs := map[batchKey]adminapi.StageEntry{}
	owners := map[batchKey]adminapi.StageEntry{}
	follows := map[followerKey][]adminapi.StageEntry{}
	b := &StageBudget{ClientBatches: len(clients)}
	for _, nt := range nodes {
		b.Dropped += nt.Dropped
		for _, e := range nt.Entries {
			switch e.Kind {
			case adminapi.StageRequest:
				reqs[batchKey{e.Producer, e.Sequence}] = e
			case adminapi.StageOwner:
				owners[batchKey{e.Producer, e.Sequence}] = e
			case adminapi.StageFollower:
				k := followerKey{nt.Node, e.Stream}
				follows[k] = append(follows[k], e)
			}
		}
	}
	durs := map[string][]float64{}
	var order []stageSpan // the rows, in the order of the first batch's spans
	var e2e []float64
	for _, ct := range clients {
		spans, ok := batchSpans(ct, reqs, owners, follows)
		if !ok {
			continue
		}
		b.Batches++
		e2e = append(e2e, us(ct.woken-ct.appended))
		for _, s := range spans {
			if _, seen := durs[s.name]; !seen {
				order = append(order, s)
			}
			durs[s.name] = append(durs[s.name], us(s.to-s.from))
		}
	}
	if b.Batches == 0 {
		return b
	}
	b.EndToEnd = stageRow("end to end: client append -> producer woken", "", e2e, 0)
	for _, s := range order {
		b.Stages = append(b.Stages, stageRow(s.name, s.part, durs[s.name], b.EndToEnd.P50Us))
	}
	b.EndToEnd.ShareOfP50 = 1
	return b
}

// batchSpans is one client batch's stages, false when some process did not trace it.
func batchSpans(ct clientTrace, reqs, owners map[batchKey]adminapi.StageEntry,
	follows map[followerKey][]adminapi.StageEntry) ([]stageSpan, bool) {
	k := batchKey{ct.producer, ct.seq}
	req, ok1 := reqs[k]
	own, ok2 := owners[k]
	if !ok1 || !ok2 || own.Submitted == 0 || own.Durable == 0 || own.Confirmed == 0 {
		return nil, false
	}
	spans := []stageSpan{
		{StageClientTake, "", ct.appended, ct.taken},
		{StageClientSend, "", ct.taken, ct.sent},
		{StageToOwner, "", ct.sent, req.Received},
		{StageOwnerStep, "", req.Received, own.Appended},
		{StageReplicate, "", own.Appended, own.Confirmed},
		{StageOwnerQueue, StageReplicate, own.Appended, own.Submitted},
		{StageOwnerSync, StageReplicate, own.Submitted, own.Durable},
	}
	last := own.Durable // the last thing the confirm waited for
	if own.Quorum >= 2 {
		answers := slices.Clone(own.Answers)
		slices.SortFunc(answers, func(a, b adminapi.StageAnswer) int { return cmpInt64(a.At, b.At) })
		if len(answers) < own.Quorum-1 {
			return nil, false
		}
		qa := answers[own.Quorum-2]
		fe, ok := coveringPrepare(follows[followerKey{qa.Node, own.Stream}], own)
		if !ok {
			return nil, false
		}
		spans = append(spans,
			stageSpan{StagePrepare, StageReplicate, own.Appended, fe.Received},
			stageSpan{StageFollowQueue, StageReplicate, fe.Received, fe.Submitted},
			stageSpan{StageFollowSync, StageReplicate, fe.Submitted, fe.Durable},
			stageSpan{StageFollowAnswer, StageReplicate, fe.Durable, fe.Answered},
			stageSpan{StageAnswer, StageReplicate, fe.Answered, qa.At})
		last = max(last, qa.At)
	}
	spans = append(spans,
		stageSpan{StageConfirm, StageReplicate, last, own.Confirmed},
		stageSpan{StageOwnerReply, "", own.Confirmed, req.Replied},
		stageSpan{StageToClient, "", req.Replied, ct.replyRead},
		stageSpan{StageClientWake, "", ct.replyRead, ct.woken})
	return spans, true
}

// coveringPrepare is the follower's first prepare received after the owner appended the batch that
// holds all of it.
func coveringPrepare(list []adminapi.StageEntry, own adminapi.StageEntry) (adminapi.StageEntry, bool) {
	for _, fe := range list {
		if fe.Base <= own.Base && fe.End >= own.End && fe.Received >= own.Appended-int64(stageClockNoise) &&
			fe.Submitted != 0 && fe.Durable != 0 && fe.Answered != 0 {
			return fe, true
		}
	}
	return adminapi.StageEntry{}, false
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func us(ns int64) float64 { return float64(ns) / 1e3 }

// stageRow sums up durations (us) of one stage.
func stageRow(name, part string, d []float64, e2eP50 float64) StageRow {
	slices.Sort(d)
	row := StageRow{Name: name, Part: part, Count: len(d), MinUs: d[0], MaxUs: d[len(d)-1],
		P50Us: d[len(d)/2], P99Us: d[min(len(d)*99/100, len(d)-1)]}
	var sum float64
	for _, v := range d {
		sum += v
	}
	row.MeanUs = sum / float64(len(d))
	if e2eP50 > 0 {
		row.ShareOfP50 = row.P50Us / e2eP50
	}
	return row
}

// writeStages writes the budget's rows into the end-of-run table.
func (r *Report) writeStages(row func(k, format string, args ...any)) {
	b := r.StageBudget
	if b.Batches == 0 {
		row("stage budget", "- (no batch traced by every process: %d traced by the client; %v)", b.ClientBatches,
			b.Failures)
		return
	}
	row("stage budget", "%d batches traced end to end (of %d); p50, p99 and the share of the end-to-end p50",
		b.Batches, b.ClientBatches)
	line := func(indent string, s StageRow) {
		row(indent+s.Name, "p50 %8.1f us  p99 %8.1f us  %5.1f%%", s.P50Us, s.P99Us, 100*s.ShareOfP50)
	}
	line("  ", b.EndToEnd)
	for _, s := range b.Stages {
		if s.Part == "" {
			line("  ", s)
		} else {
			line("    ", s)
		}
	}
	for _, f := range b.Failures {
		row("  trace failure", "%s", f)
	}
}
