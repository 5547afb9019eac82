package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/ringstream/ringstream/client"
	"github.com/ringstream/ringstream/wire"
)

// trafficWindow is the unit the traffic scenario reports in (the commit-batching spec's 5 s).
const trafficWindow = 5 * time.Second

// TrafficConfig is `bench traffic`: Groups streams, idle or busy, and the peer traffic they cost.
type TrafficConfig struct {
	Nodes  int `json:"nodes"`
	Shards int `json:"shards"`
	Groups int `json:"groups"`
	Copies int `json:"copies"`
	// Busy produces to every group (RatePerGroup records/s each); idle produces nothing.
	Busy         bool    `json:"busy"`
	RatePerGroup float64 `json:"rate_per_group"`
	// Settle is the wait after the groups exist and before the measure: past commit_heartbeat_timeout
	// (5 s by default), after which a group with nothing to commit turns idle.
	Settle time.Duration `json:"settle_ns"`
	// Window is how long the traffic is measured; figures are scaled to 5 s.
	Window time.Duration `json:"window_ns"`
	Binary string        `json:"-"`
}

// DefaultTrafficConfig is 1000 idle groups of 3 copies on 3 nodes.
func DefaultTrafficConfig() TrafficConfig {
	return TrafficConfig{Nodes: 3, Shards: 1, Groups: 1000, Copies: 3, RatePerGroup: 5,
		Settle: 6 * time.Second, Window: 10 * time.Second}
}

// Frames is peer traffic per 5 s.
type Frames struct {
	CommitFramesPer5s  float64 `json:"commit_frames_per_5s"`
	ReplyFramesPer5s   float64 `json:"reply_frames_per_5s"`
	CommitEntriesPer5s float64 `json:"commit_entries_per_5s"`
	ReplyEntriesPer5s  float64 `json:"reply_entries_per_5s"`
	BytesPer5s         float64 `json:"bytes_per_5s"`
}

// TrafficReport is the outcome of `bench traffic`.
type TrafficReport struct {
	Config TrafficConfig `json:"config"`
	Mode   string        `json:"mode"`
	Frames
	// Unbatched is the same entries sent one frame each, as without the commit batching: a frame per
	// Commit and per CommitReply entry, each with its own header.
	Unbatched Frames `json:"unbatched"`
	// FrameRatio is unbatched frames over batched frames (Commit plus reply).
	FrameRatio float64 `json:"frame_ratio"`
	// GroupsIdle and GroupsBusy are the stream groups in each state at the end, summed over the nodes:
	// the shards' groups_idle and groups_busy gauges count every group a shard leads, the metadata
	// group included, so its primary (MetadataGroupsLed, one while a primary is in normal status) is
	// taken off. It is taken off the idle count while there is one: the metadata group commits nothing
	// while the streams only exist or are produced to, so it sits idle.
	GroupsIdle        float64 `json:"groups_idle"`
	GroupsBusy        float64 `json:"groups_busy"`
	MetadataGroupsLed float64 `json:"metadata_groups_led"`
	// Metrics is every metric's change over the window, summed over the nodes.
	Metrics Metrics `json:"metrics"`
}

// RunTraffic starts a local cluster, creates the groups, settles, and measures the peer traffic
// over the window from the nodes' metrics.
func RunTraffic(ctx context.Context, tc TrafficConfig, log *slog.Logger) (*TrafficReport, error) {
	if tc.Groups < 1 || tc.Nodes < 3 || tc.Copies < 1 || tc.Copies > tc.Nodes || tc.Window <= 0 {
		return nil, fmt.Errorf("%w: traffic: --groups %d, --nodes %d, --copies %d, --window %v: want at least 1 "+
			"group, 3 nodes, 1 to nodes copies and a window", ErrConfig, tc.Groups, tc.Nodes, tc.Copies, tc.Window)
	}
	cfg := DefaultConfig()
	cfg.Nodes, cfg.Shards, cfg.Binary, cfg.Copies = tc.Nodes, tc.Shards, tc.Binary, tc.Copies
	r := &run{cfg: cfg, admin: newAdmin(), watches: &watches{}, log: log}
	if err := r.connect(ctx); err != nil {
		return nil, err
	}
	defer r.close()
	names, err := r.createGroups(ctx, tc)
	if err != nil {
		return nil, err
	}
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	var wg sync.WaitGroup
	if tc.Busy {
		r.produceToAll(loadCtx, names, tc.RatePerGroup, &wg)
	}
	if err := sleepCtx(ctx, tc.Settle); err != nil {
		return nil, err
	}
	before, err := r.admin.scrapeAll(ctx, r.admins)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	if err := sleepCtx(ctx, tc.Window); err != nil {
		return nil, err
	}
	after, err := r.admin.scrapeAll(ctx, r.admins)
	if err != nil {
		return nil, err
	}
	window := time.Since(start)
	metaLed := r.metadataPrimaries(ctx)
	stopLoad()
	wg.Wait()
	return trafficReport(tc, delta(before, after), after, window, metaLed), nil
}

// metadataPrimaries counts the nodes whose metadata replica is the primary in normal status: each
// leads the metadata group on one of its shards.
func (r *run) metadataPrimaries(ctx context.Context) int {
	n := 0
	for _, addr := range r.admins {
		if st, err := r.admin.status(ctx, addr); err == nil && st.Meta != nil && st.Meta.Primary && st.Meta.Normal {
			n++
		}
	}
	return n
}

// trafficReport turns the window's metric deltas into frames per 5 s beside the unbatched baseline;
// metaLed is the metadata groups led at the end (counted in the shards' group gauges).
func trafficReport(tc TrafficConfig, d, after Metrics, window time.Duration, metaLed int) *TrafficReport {
	scale := trafficWindow.Seconds() / window.Seconds()
	const p = "ringstream_shard_"
	cb, ce := d[p+"commit_batches_sent_total"], d[p+"commit_entries_sent_total"]
	rb, re := d[p+"reply_batches_sent_total"], d[p+"reply_entries_sent_total"]
	bytes := d[p+"bytes_sent_total"]
	rep := &TrafficReport{Config: tc, Mode: "idle", Metrics: d, MetadataGroupsLed: float64(metaLed),
		GroupsIdle: after[p+"groups_idle"], GroupsBusy: after[p+"groups_busy"]}
	for range metaLed {
		if rep.GroupsIdle > 0 {
			rep.GroupsIdle--
		} else if rep.GroupsBusy > 0 {
			rep.GroupsBusy--
		}
	}
	if tc.Busy {
		rep.Mode = "busy"
	}
	rep.Frames = Frames{CommitFramesPer5s: cb * scale, ReplyFramesPer5s: rb * scale, CommitEntriesPer5s: ce * scale,
		ReplyEntriesPer5s: re * scale, BytesPer5s: bytes * scale}
	extraHeaders := (ce - cb) + (re - rb) // one more frame header per entry beyond the batch frames
	rep.Unbatched = Frames{CommitFramesPer5s: ce * scale, ReplyFramesPer5s: re * scale, CommitEntriesPer5s: ce * scale,
		ReplyEntriesPer5s: re * scale, BytesPer5s: (bytes + max(extraHeaders, 0)*wire.HeaderSize) * scale}
	if frames := cb + rb; frames > 0 {
		rep.FrameRatio = (ce + re) / frames
	}
	return rep
}

// createGroups creates tc.Groups streams in batched creates and waits until each has an owner, 16
// lookups at a time.
func (r *run) createGroups(ctx context.Context, tc TrafficConfig) ([]string, error) {
	names := make([]string, tc.Groups)
	for i := range names {
		names[i] = "group-" + strconv.Itoa(i)
	}
	opts := client.StreamOptions{Copies: uint8(tc.Copies), Policy: client.Policy{Kind: wire.PolicyMajority}}
	results, err := r.cl.CreateStreams(ctx, names, opts)
	if err == nil {
		err = results.Err()
	}
	if err != nil {
		return nil, fmt.Errorf("bench: traffic: %w", err)
	}
	errs := make(chan error, 1)
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for _, name := range names {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if _, err := r.cl.Lookup(ctx, name); err != nil {
				select {
				case errs <- fmt.Errorf("bench: traffic: stream %s: %w", name, err):
				default:
				}
			}
		})
	}
	wg.Wait()
	select {
	case err := <-errs:
		return nil, err
	default:
	}
	return names, nil
}

// produceToAll produces rate records/s of 64 bytes to every stream until ctx ends.
func (r *run) produceToAll(ctx context.Context, names []string, rate float64, wg *sync.WaitGroup) {
	start := time.Now()
	for _, name := range names {
		wg.Go(func() {
			prod, err := r.cl.Producer(client.ProducerConfig{Stream: name, BatchBytes: 4096})
			if err != nil {
				return
			}
			defer prod.Close(context.WithoutCancel(ctx))
			pc := newPacer(start, rate)
			rec := make([]byte, 64)
			for {
				if _, ok := pc.next(ctx); !ok {
					return
				}
				if prod.Append(ctx, rec) != nil {
					return
				}
			}
		})
	}
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// WriteJSON writes the report as indented JSON.
func (t *TrafficReport) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(t)
}

// WriteTable writes the traffic table: batched beside unbatched, per 5 s.
func (t *TrafficReport) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "traffic: %d %s groups of %d copies on %d nodes x %d shards; per 5 s over a %.1f s window\n",
		t.Config.Groups, t.Mode, t.Config.Copies, t.Config.Nodes, t.Config.Shards, t.Config.Window.Seconds())
	fmt.Fprintf(tw, "\tbatched\tunbatched\tratio\t\n")
	row := func(name string, a, b float64) {
		ratio := 0.0
		if a > 0 {
			ratio = b / a
		}
		fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%.1fx\t\n", name, a, b, ratio)
	}
	row("commit frames", t.CommitFramesPer5s, t.Unbatched.CommitFramesPer5s)
	row("reply frames", t.ReplyFramesPer5s, t.Unbatched.ReplyFramesPer5s)
	row("commit entries", t.CommitEntriesPer5s, t.Unbatched.CommitEntriesPer5s)
	row("reply entries", t.ReplyEntriesPer5s, t.Unbatched.ReplyEntriesPer5s)
	row("bytes", t.BytesPer5s, t.Unbatched.BytesPer5s)
	fmt.Fprintf(tw, "stream groups idle / busy\t%.0f\t%.0f\t\t\n", t.GroupsIdle, t.GroupsBusy)
	return tw.Flush()
}
