package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// adminBodyMax bounds what is read from a node's admin HTTP (metrics, status, profiles).
const adminBodyMax = 256 << 20

// admin reads the nodes' admin HTTP: metrics, status and profiles.
type admin struct {
	hc *http.Client
}

func newAdmin() *admin { return &admin{hc: &http.Client{Timeout: 60 * time.Second}} }

// get fetches http://addr/path and returns its body; any status but 200 is an error.
func (a *admin) get(ctx context.Context, addr, path string) ([]byte, error) {
	return a.do(ctx, http.MethodGet, addr, path)
}

// post posts nothing to http://addr/path and returns the answer's body, as get does.
func (a *admin) post(ctx context.Context, addr, path string) ([]byte, error) {
	return a.do(ctx, http.MethodPost, addr, path)
}

func (a *admin) do(ctx context.Context, method, addr, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, "http://"+addr+path, nil)
	if err != nil {
		return nil, fmt.Errorf("bench: admin %s%s: %w", addr, path, err)
	}
	resp, err := a.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("bench: admin %s%s: %w", addr, path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, adminBodyMax))
	if err != nil {
		return nil, fmt.Errorf("bench: admin %s%s: %w", addr, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("bench: admin %s%s: %s: %.200s", addr, path, resp.Status, body)
	}
	return body, nil
}

// Metrics is one scrape of a node's /metrics: each counter, gauge or untyped metric summed over its
// labels (shards, peers, states), by name.
type Metrics map[string]float64

// metrics scrapes addr's /metrics.
func (a *admin) metrics(ctx context.Context, addr string) (Metrics, error) {
	body, err := a.get(ctx, addr, "/metrics")
	if err != nil {
		return nil, err
	}
	return parseMetrics(body)
}

// parseMetrics reads Prometheus text: counters, gauges and untyped samples summed over labels;
// histograms and summaries as their _count and _sum.
func parseMetrics(body []byte) (Metrics, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("bench: metrics: %w", err)
	}
	out := Metrics{}
	for name, f := range families {
		for _, m := range f.GetMetric() {
			switch {
			case m.Counter != nil:
				out[name] += m.Counter.GetValue()
			case m.Gauge != nil:
				out[name] += m.Gauge.GetValue()
			case m.Untyped != nil:
				out[name] += m.Untyped.GetValue()
			case m.Histogram != nil:
				out[name+"_count"] += float64(m.Histogram.GetSampleCount())
				out[name+"_sum"] += m.Histogram.GetSampleSum()
			case m.Summary != nil:
				out[name+"_count"] += float64(m.Summary.GetSampleCount())
				out[name+"_sum"] += m.Summary.GetSampleSum()
			}
		}
	}
	return out, nil
}

// sumMetrics adds the scrapes of several nodes.
func sumMetrics(ms []Metrics) Metrics {
	out := Metrics{}
	for _, m := range ms {
		for k, v := range m {
			out[k] += v
		}
	}
	return out
}

// delta is after - before for every metric of after.
func delta(before, after Metrics) Metrics {
	out := make(Metrics, len(after))
	for _, k := range slices.Sorted(maps.Keys(after)) {
		out[k] = after[k] - before[k]
	}
	return out
}

// scrapeAll scrapes every address and sums the scrapes.
func (a *admin) scrapeAll(ctx context.Context, addrs []string) (Metrics, error) {
	ms := make([]Metrics, 0, len(addrs))
	for _, addr := range addrs {
		m, err := a.metrics(ctx, addr)
		if err != nil {
			return nil, err
		}
		ms = append(ms, m)
	}
	return sumMetrics(ms), nil
}

// profileCPU saves a CPU profile of seconds seconds from addr's /debug/pprof/profile to path.
func (a *admin) profileCPU(ctx context.Context, addr, path string, seconds int) error {
	body, err := a.get(ctx, addr, "/debug/pprof/profile?seconds="+strconv.Itoa(max(seconds, 1)))
	if err != nil {
		return err
	}
	return writeFile(path, body)
}

// profileHeap saves addr's heap profile to path.
func (a *admin) profileHeap(ctx context.Context, addr, path string) error {
	body, err := a.get(ctx, addr, "/debug/pprof/heap")
	if err != nil {
		return err
	}
	return writeFile(path, body)
}

// writeFile writes data to path, making its directory.
func writeFile(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	return nil
}
