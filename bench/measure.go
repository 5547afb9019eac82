package bench

import (
	"slices"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// mib is the unit of every byte figure the bench reports, in memory (RSS) and on the wire (throughput)
// alike: MiB and MiB/s, 2^20 bytes.
const mib = 1 << 20

// BucketWidth is the width of one point of the throughput and latency timeline.
const BucketWidth = 100 * time.Millisecond

// Latencies are recorded in microseconds, from 1 µs to 10 minutes, with 3 significant digits.
const (
	latencyMinUs   = 1
	latencyMaxUs   = int64(10 * time.Minute / time.Microsecond)
	latencySigFigs = 3
)

// recorder collects one producer's confirmations: an HDR histogram of produce-to-confirm latency and a
// timeline of 100 ms buckets. Each producer owns one (no lock on the hot path); merge combines them at
// the end. live is every producer's confirmations for the progress line.
type recorder struct {
	start   time.Time
	warmup  time.Duration
	hist    *hdrhistogram.Histogram
	buckets []bucket
	live    *liveStats
}

// bucket is one 100 ms point of the timeline: what was confirmed in it and the latencies (µs) of those
// confirmations, kept raw so that each point's p99 is exact.
type bucket struct {
	records int64
	bytes   int64
	latUs   []uint32
}

func newRecorder(start time.Time, warmup time.Duration, live *liveStats) *recorder {
	return &recorder{start: start, warmup: warmup, live: live,
		hist: hdrhistogram.New(latencyMinUs, latencyMaxUs, latencySigFigs)}
}

// confirm records count records of bytes bytes confirmed at now, produced (or due, with --rate) at sent.
// Confirmations inside the warmup count toward the timeline and verification, not the histogram.
func (r *recorder) confirm(sent, now time.Time, count, bytes int) {
	lat := now.Sub(sent)
	us := min(max(lat.Microseconds(), latencyMinUs), latencyMaxUs)
	at := now.Sub(r.start)
	if at >= r.warmup {
		r.hist.RecordValues(us, int64(count))
	}
	i := int(max(at, 0) / BucketWidth)
	if i >= len(r.buckets) {
		r.buckets = slices.Grow(r.buckets, i+1-len(r.buckets))[:i+1]
	}
	b := &r.buckets[i]
	b.records += int64(count)
	b.bytes += int64(bytes)
	b.latUs = append(b.latUs, uint32(min(us, int64(^uint32(0)))))
	r.live.add(us, count)
}

// Point is one 100 ms point of the timeline. P99Ms is the p99 latency of the confirmations in it,
// null when nothing was confirmed in it: an interval without a confirmation has no latency, and a 0
// would draw an outage as the best latency of the run.
type Point struct {
	AtMs          float64  `json:"at_ms"`
	RecordsPerSec float64  `json:"records_per_s"`
	MiBPerSec     float64  `json:"mib_per_s"`
	P99Ms         *float64 `json:"p99_ms"`
}

// Latency is a latency summary in milliseconds.
type Latency struct {
	P50  float64 `json:"p50"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p999"`
	Max  float64 `json:"max"`
	Mean float64 `json:"mean"`
}

// merged is every producer's recorders combined.
type merged struct {
	hist     *hdrhistogram.Histogram
	timeline []Point
	records  int64
	bytes    int64
}

// merge combines recorders (their producers have stopped). The timeline covers at least span, so that
// an outage lasting to the end of the load shows as points with nothing confirmed.
func merge(rs []*recorder, span time.Duration) merged {
	m := merged{hist: hdrhistogram.New(latencyMinUs, latencyMaxUs, latencySigFigs)}
	n := int((span + BucketWidth - 1) / BucketWidth)
	for _, r := range rs {
		m.hist.Merge(r.hist)
		n = max(n, len(r.buckets))
	}
	secs := BucketWidth.Seconds()
	var lat []uint32
	for i := range n {
		var records, bytes int64
		lat = lat[:0]
		for _, r := range rs {
			if i < len(r.buckets) {
				b := &r.buckets[i]
				records += b.records
				bytes += b.bytes
				lat = append(lat, b.latUs...)
			}
		}
		m.records += records
		m.bytes += bytes
		pt := Point{
			AtMs:          float64(time.Duration(i)*BucketWidth) / float64(time.Millisecond),
			RecordsPerSec: float64(records) / secs,
			MiBPerSec:     float64(bytes) / secs / mib,
		}
		if len(lat) > 0 {
			pt.P99Ms = ptr(quantileUs(lat, 0.99) / 1000)
		}
		m.timeline = append(m.timeline, pt)
	}
	return m
}

// quantileUs is the q-quantile of lat (µs), sorting it in place; 0 for none.
func quantileUs(lat []uint32, q float64) float64 {
	if len(lat) == 0 {
		return 0
	}
	slices.Sort(lat)
	i := int(q * float64(len(lat)))
	return float64(lat[min(i, len(lat)-1)])
}

// latency is the histogram's summary in milliseconds.
func latency(h *hdrhistogram.Histogram) Latency {
	ms := func(us int64) float64 { return float64(us) / 1000 }
	return Latency{P50: ms(h.ValueAtQuantile(50)), P99: ms(h.ValueAtQuantile(99)),
		P999: ms(h.ValueAtQuantile(99.9)), Max: ms(h.Max()), Mean: h.Mean() / 1000}
}

// Event is a fault or a change the run saw, at a time since the start of load.
type Event struct {
	Name string  `json:"name"`
	Node uint16  `json:"node,omitempty"`
	AtMs float64 `json:"at_ms"`
	Note string  `json:"note,omitempty"`
}

// events is the run's event log, safe for concurrent use.
type events struct {
	start time.Time
	mu    sync.Mutex
	list  []Event
}

func (e *events) add(name string, node uint16, at time.Time, note string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.list = append(e.list, Event{Name: name, Node: node, AtMs: msSince(e.start, at), Note: note})
}

func (e *events) all() []Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.list)
}

// msSince is t - start in milliseconds.
func msSince(start, t time.Time) float64 { return float64(t.Sub(start)) / float64(time.Millisecond) }

// ownerKillNote begins the note of an owner's kill (a follower's or a node's kill says so instead).
const ownerKillNote = "owner of "

// Event names.
const (
	EventKill       = "kill"
	EventAssignment = "new assignment"
	EventRestart    = "restart"
	EventPause      = "pause"
	EventResume     = "resume"
	EventCaughtUp   = "caught up"
	// EventFirstConfirm: the first confirmation that ends a fault's gap (at a newer epoch after an
	// owner kill; of a record appended after the SIGSTOP of a pause).
	EventFirstConfirm = "first confirm"
	// EventRejoined: the old owner, restarted or resumed, is a follower without another recovery.
	EventRejoined = "rejoined"
	// EventStreamNotDeleted: with --cluster, a stream of the run could not be deleted after it.
	EventStreamNotDeleted = "stream not deleted"
	// EventProfileNotSaved: a node's --profile could not be saved (killed during its CPU profile).
	EventProfileNotSaved = "profile not saved"
)
