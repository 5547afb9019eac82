package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringstream/ringstream/client"
	"github.com/ringstream/ringstream/engine/adminapi"
	"github.com/ringstream/ringstream/engine/config"
	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/internal/monoclock"
	"github.com/ringstream/ringstream/localcluster"
	"github.com/ringstream/ringstream/wire"
)

// Time bounds of a run's steps after the load.
const (
	drainTimeout  = 10 * time.Second // a producer's Close, for the confirmations of what it holds
	verifyTimeout = 60 * time.Second // reading every stream back
	placeAttempts = 20               // streams created to find one owned by the metadata primary
	// requestTimeout is how long the bench's client waits on a node that answers nothing (a stopped
	// owner) before it retries elsewhere: short, so that a stall measures the cluster, not the client.
	requestTimeout = 2 * time.Second
	// dialTimeout bounds a connect and handshake: a stopped node's kernel still accepts the connection,
	// and its handshake then waits out the whole timeout.
	dialTimeout = time.Second
)

// run is one bench run's state.
type run struct {
	cfg     Config
	lc      *localcluster.Cluster // nil with --cluster
	cl      *client.Client
	admin   *admin
	admins  []string // admin addresses of every node
	events  *events
	watches *watches
	log     *slog.Logger
	// paused is the node id of a node SIGSTOPped now (0: none): its admin HTTP answers nothing, so it
	// is left out of liveAdmins.
	paused atomic.Uint32
}

// Run runs one bench: it starts a local cluster (or dials cfg.Addrs), creates the streams, drives
// the load with the faults, reads every stream back, and returns the report. progress, if not nil,
// receives the live progress line. An error means the run could not be carried out; a run that was
// carried out and failed (a missing record, no failover) returns a Report whose Failures say why.
func Run(ctx context.Context, cfg Config, progress io.Writer, log *slog.Logger) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.StreamPrefix = cfg.streamPrefix(time.Now())
	r := &run{cfg: cfg, admin: newAdmin(), watches: &watches{}, log: log}
	if err := r.connect(ctx); err != nil {
		return nil, err
	}
	defer r.close()
	names, err := r.createStreams(ctx)
	if err != nil {
		return nil, err
	}
	return r.drive(ctx, names, progress)
}

// connect starts the local cluster (or takes cfg.Addrs) and dials it.
func (r *run) connect(ctx context.Context) error {
	addrs, secret, clusterID := r.cfg.Addrs, r.cfg.Secret, uint64(1)
	r.admins = r.cfg.Admins
	if addrs == nil {
		opts := localcluster.Options{Binary: r.cfg.Binary, Dir: r.cfg.Dir, Nodes: r.cfg.Nodes, Shards: r.cfg.Shards,
			Logger: r.log}
		if r.cfg.Launch != nil {
			r.cfg.Launch(&opts)
		}
		lc, err := localcluster.Start(ctx, opts)
		if err != nil {
			return err
		}
		r.lc = lc
		addrs, secret, clusterID = lc.ClientAddrs(), lc.Secret(), lc.ClusterID()
		for _, n := range lc.Nodes() {
			r.admins = append(r.admins, n.AdminAddr)
		}
	}
	cl, err := client.Dial(ctx, client.Config{Addrs: addrs, Cluster: clusterID, Secret: []byte(secret),
		RequestTimeout: requestTimeout, DialTimeout: dialTimeout, Logger: r.log})
	if err != nil {
		return fmt.Errorf("bench: connect to the cluster: %w", err)
	}
	r.cl = cl
	return nil
}

func (r *run) close() {
	if r.cl != nil {
		r.cl.Close()
	}
	if r.lc != nil {
		r.lc.Close()
	}
}

// liveAdmins is the admin addresses of the nodes running now.
func (r *run) liveAdmins() []string {
	if r.lc == nil {
		return r.admins
	}
	var out []string
	for _, n := range r.lc.Nodes() {
		if n.Running() && uint32(n.ID) != r.paused.Load() {
			out = append(out, n.AdminAddr)
		}
	}
	return out
}

// clientPolicy is the stream policy for cfg.Policy.
func clientPolicy(s string) (client.Policy, error) {
	p, err := config.ParsePolicy(s)
	if err != nil {
		return client.Policy{}, err
	}
	switch p.Kind {
	case meta.PolicyMajorityDurable:
		return client.Policy{Kind: wire.PolicyMajority}, nil
	case meta.PolicyLocalDurable:
		return client.Policy{Kind: wire.PolicyAll}, nil
	case meta.PolicyCountDurable:
		return client.Policy{Kind: wire.PolicyCount, Count: p.Count}, nil
	}
	return client.Policy{}, fmt.Errorf("%w: --policy %s: streams are created with majority_durable, "+
		"local_durable or count_durable(N)", ErrConfig, s)
}

// createStreams creates PREFIX-0 .. PREFIX-N-1 and waits until each has an owner. With
// --owner-on-metadata-primary, the first stream is created again under new names until its owner is
// the metadata primary's node.
func (r *run) createStreams(ctx context.Context) ([]string, error) {
	pol, err := clientPolicy(r.cfg.Policy)
	if err != nil {
		return nil, err
	}
	opts := client.StreamOptions{Copies: uint8(r.cfg.Copies), Policy: pol}
	names := make([]string, r.cfg.Streams)
	for i := range names {
		names[i] = r.cfg.StreamPrefix + "-" + strconv.Itoa(i)
		if r.cfg.Client == ClientKafka {
			names[i] = kafkaStreamName(names[i])
		}
	}
	results, err := r.cl.CreateStreams(ctx, names, opts)
	if err == nil {
		err = results.Err()
	}
	if err != nil {
		return nil, fmt.Errorf("bench: create streams: %w", err)
	}
	for _, name := range names {
		if _, err := r.cl.Lookup(ctx, name); err != nil {
			return nil, fmt.Errorf("bench: stream %s has no owner: %w", name, err)
		}
	}
	if r.cfg.OwnerOnMetaPrimary || r.cfg.OwnerOffMetaPrimary {
		name, err := r.place(ctx, names[0], opts, r.cfg.OwnerOnMetaPrimary)
		if err != nil {
			return nil, err
		}
		names[0] = name
	}
	return names, nil
}

// place returns a stream owned by the metadata primary's node (onPrimary) or by another node: first,
// if it already is, or first-1, first-2, ... Placement puts a stream's owner on the node owning the
// fewest streams among those holding the fewest copies (then the lowest id), so each miss deletes
// the stream and creates a 1-copy filler stream, which lands on the least loaded node and moves the
// next owner along; the fillers are deleted once the stream is placed.
func (r *run) place(ctx context.Context, first string, opts client.StreamOptions, onPrimary bool) (string, error) {
	primary, err := r.admin.metaPrimary(ctx, r.liveAdmins())
	if err != nil {
		return "", err
	}
	var fillers []string
	defer func() {
		for _, name := range fillers {
			if err := r.cl.DeleteStream(ctx, name); err != nil && r.log != nil {
				r.log.Warn("bench: delete of a placement filler failed", "stream", name, "err", err)
			}
		}
	}()
	name := first
	for i := 1; i <= placeAttempts; i++ {
		route, err := r.cl.Lookup(ctx, name)
		if err != nil {
			return "", fmt.Errorf("bench: stream %s has no owner: %w", name, err)
		}
		if (route.Owner == primary) == onPrimary {
			return name, nil
		}
		if err := r.cl.DeleteStream(ctx, name); err != nil {
			return "", fmt.Errorf("bench: delete stream %s: %w", name, err)
		}
		filler := first + "-filler-" + strconv.Itoa(i)
		if _, err := r.cl.CreateStream(ctx, filler, client.StreamOptions{Copies: 1, Policy: opts.Policy}); err != nil {
			return "", fmt.Errorf("bench: create stream %s: %w", filler, err)
		}
		fillers = append(fillers, filler)
		name = first + "-" + strconv.Itoa(i)
		if _, err := r.cl.CreateStream(ctx, name, opts); err != nil {
			return "", fmt.Errorf("bench: create stream %s: %w", name, err)
		}
	}
	return "", fmt.Errorf("bench: no stream of %d created had its owner on the metadata primary's node %d "+
		"(wanted: %v)", placeAttempts, primary, onPrimary)
}

// drive runs the load and the faults, then verifies and reports.
func (r *run) drive(ctx context.Context, names []string, progress io.Writer) (*Report, error) {
	codec, err := client.ParseCodec(r.cfg.Compression)
	if err != nil {
		return nil, fmt.Errorf("%w: --compression: %w", ErrConfig, err)
	}
	kcodec, err := kafkaCompression(r.cfg.Compression)
	if err != nil && r.cfg.Client == ClientKafka {
		return nil, err
	}
	before, _ := r.admin.scrapeAll(ctx, r.liveAdmins())
	cpuBefore := r.sampleCPU()
	start := time.Now()
	r.events = &events{start: start}
	var prodErrors atomic.Int64
	live := newLiveStats()
	count := r.cfg.Producers * r.cfg.InFlight
	pad := newPad(r.cfg.RecordSize - recordHeaderBytes)
	var traces *clientTraces
	var stageFailures []string
	if r.cfg.TraceStages {
		traces = &clientTraces{clock: monoclock.New()}
		traces.from = traces.clock.Nanos(start.Add(r.cfg.Warmup))
		stageFailures = r.startStages(ctx)
	}
	prods := make([]*producer, count)
	for i := range prods {
		prods[i] = &producer{index: uint32(i), stream: names[i%len(names)], cl: r.cl, cfg: &r.cfg, pad: pad,
			rec: newRecorder(start, r.cfg.Warmup, live), watch: r.watches, errors: &prodErrors, traces: traces}
	}
	loadCtx, stopLoad := context.WithTimeout(ctx, r.cfg.Duration)
	defer stopLoad()
	f := &faults{r: r, stream: names[0]}
	if r.lc != nil {
		f.schedule(loadCtx, start)
	}
	prof := r.startProfiles(ctx)
	var wg sync.WaitGroup
	for _, p := range prods {
		pc := newPacer(start, r.cfg.Rate/float64(count))
		if r.cfg.Client == ClientKafka {
			wg.Go(func() { p.runKafka(loadCtx, r.kafkaEnv(), kcodec, pc, drainTimeout) })
			continue
		}
		wg.Go(func() { p.run(loadCtx, codec, pc, drainTimeout) })
	}
	consumed := r.startConsumers(loadCtx, names, &wg)
	stopProgress := showProgress(progress, r.cfg.ProgressBar, start, r.cfg.Duration, r.cfg.Warmup, live, r.events)
	wg.Wait()
	cpuAfter := r.sampleCPU()
	stopProgress()
	elapsed := time.Since(start)
	var nodeTraces []adminapi.StageTrace
	if traces != nil {
		var failures []string
		nodeTraces, failures = r.readStages(ctx)
		stageFailures = append(stageFailures, failures...)
	}
	f.wait()
	rep := r.report(ctx, prods, f, elapsed)
	if traces != nil {
		rep.StageBudget = budget(traces.all(), nodeTraces)
		rep.StageBudget.Failures = stageFailures
	}
	rep.setCPU(cpuPerRecord(cpuBefore, cpuAfter, rep.Confirmed))
	rep.ProduceErrors = prodErrors.Load()
	rep.Consumed = consumed.Load()
	if after, err := r.admin.scrapeAll(ctx, r.liveAdmins()); err == nil && before != nil {
		rep.FailoverGapPartsMs = gapParts(delta(before, after))
	}
	prof.finish(ctx, rep)
	r.deleteStreams(ctx, names, rep)
	return rep, nil
}

// deleteStreams deletes, on a running cluster (--cluster) and without KeepStreams, the streams the run
// created, once they are verified; a delete that fails is an event of the report, not a failure of
// the run (the records were verified), and names the stream left behind.
func (r *run) deleteStreams(ctx context.Context, names []string, rep *Report) {
	if r.lc != nil || r.cfg.KeepStreams {
		return
	}
	results, err := r.cl.DeleteStreams(ctx, names)
	if err != nil {
		rep.Events = append(rep.Events, Event{Name: EventStreamNotDeleted, AtMs: msSince(r.events.start, time.Now()),
			Note: fmt.Sprintf("%d streams: %v", len(names), err)})
		return
	}
	for _, res := range results {
		if res.Err != nil {
			rep.Events = append(rep.Events, Event{Name: EventStreamNotDeleted, AtMs: msSince(r.events.start, time.Now()),
				Note: fmt.Sprintf("%s: %v", res.Info.Name, res.Err)})
		}
	}
}

// report merges the producers' measures, reads the streams back and fills in the report.
func (r *run) report(ctx context.Context, prods []*producer, f *faults, elapsed time.Duration) *Report {
	recs := make([]*recorder, len(prods))
	ledgers := map[string]*ledger{}
	for i, p := range prods {
		recs[i] = p.rec
		l := ledgers[p.stream]
		if l == nil {
			l = &ledger{stream: p.stream}
			ledgers[p.stream] = l
		}
		l.confirmed = append(l.confirmed, p.confirmed...)
	}
	m := merge(recs, r.cfg.Duration)
	rep := &Report{Config: r.cfg, DurationS: elapsed.Seconds(), LatencyMs: latency(m.hist), Timeline: m.timeline}
	loadS := r.cfg.Duration.Seconds()
	rep.ThroughputRecordsPerS = float64(m.records) / loadS
	rep.ThroughputMiBPerS = float64(m.bytes) / loadS / mib
	rep.RejoinedWithoutRecovery = f.rejoined(ctx)
	f.mu.Lock()
	if f.gap != nil {
		rep.FailoverGapMs = f.gap.gapMs()
		if rep.FailoverGapMs == nil {
			f.failures = append(f.failures, "owner kill: no produce was confirmed at a newer epoch after the kill")
		}
	}
	if f.stall != nil {
		rep.StallMs = f.stall.gapMs()
	}
	rep.NewAssignmentMs, rep.CatchUpMs = f.assignMs, f.catchUpMs
	rep.Failures = append(rep.Failures, f.failures...)
	f.mu.Unlock()
	rep.Verification = r.verify(ctx, ledgers)
	v := rep.Verification
	rep.Confirmed, rep.ReadBack, rep.Missing, rep.Misplaced, rep.Duplicated = v.Confirmed, v.ReadBack, v.Missing,
		v.Misplaced, v.Duplicated
	if err := v.Err(); err != nil {
		rep.Failures = append(rep.Failures, err.Error())
	}
	if v.Confirmed == 0 {
		rep.Failures = append(rep.Failures, "no produce was confirmed")
	}
	rep.Events = r.events.all()
	rep.Nodes = r.nodeUsage()
	return rep
}

// nodeUsage reads each running node's CPU time and peak RSS.
func (r *run) nodeUsage() []NodeUsage {
	if r.lc == nil {
		return nil
	}
	var out []NodeUsage
	for _, n := range r.lc.Nodes() {
		u := NodeUsage{Node: n.ID, Restarts: n.Starts() - 1}
		if pid := n.PID(); pid != 0 && n.Running() {
			if pu, err := readProcUsage(pid); err == nil {
				u.CPUSeconds, u.RSSMaxMiB = pu.cpuSeconds, pu.rssMaxMiB
			}
		}
		out = append(out, u)
	}
	return out
}

// profileFile is where --profile puts one node's profile of kind (cpu, heap): named by its node id,
// or by its admin address when the node's id is unknown.
func profileFile(dir string, t profileTarget, kind string) string {
	if t.node == 0 {
		return filepath.Join(dir, fmt.Sprintf("admin-%s-%s.pprof", strings.ReplaceAll(t.addr, ":", "_"), kind))
	}
	return filepath.Join(dir, fmt.Sprintf("node%d-%s.pprof", t.node, kind))
}
