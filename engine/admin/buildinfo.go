package admin

import (
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// buildInfo is what ringstream_build_info reports: the main module's version ("(devel)" for a
// build from a work tree), the VCS revision the binary was built from ("unknown" without one, as
// in `go test`), and the Go release that built it.
type buildInfo struct{ version, commit, goVersion string }

func readBuildInfo() buildInfo {
	out := buildInfo{version: "unknown", commit: "unknown", goVersion: "unknown"}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return out
	}
	out.goVersion = bi.GoVersion
	if bi.Main.Version != "" {
		out.version = bi.Main.Version
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && s.Value != "" {
			out.commit = s.Value
		}
	}
	return out
}

// processCollectors are the collectors of the whole process: the Go runtime's (go_*), the process's
// (process_*: descriptors, resident memory, CPU seconds) and ringstream_build_info. They go only on
// a registry the node made itself: an embedder that hands the node its own registry
// (NodeOptions.Registry) registers its process's collectors once, however many nodes it runs.
func processCollectors(labels prometheus.Labels) []prometheus.Collector {
	bi := readBuildInfo()
	build := prometheus.NewGauge(prometheus.GaugeOpts{Name: "ringstream_build_info",
		Help: "Always 1: the version, VCS commit and Go release of the running binary.",
		ConstLabels: mergeLabels(labels, prometheus.Labels{"version": bi.version, "commit": bi.commit,
			"goversion": bi.goVersion})})
	build.Set(1)
	return []prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		build,
	}
}

func mergeLabels(a, b prometheus.Labels) prometheus.Labels {
	out := prometheus.Labels{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}
