package bench

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeNodeAdmin is an admin HTTP server on 127.0.0.1 that reports node id in /v1/status, serves a
// heap profile, and answers a CPU profile after cpuAfter with 200 (ok) or 503 (as a node killed
// mid-profile leaves the request failed).
func fakeNodeAdmin(t *testing.T, id int, cpuAfter time.Duration, ok bool) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/status", func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte(`{"node":` + string(rune('0'+id)) + `}`))
	})
	mux.HandleFunc("/debug/pprof/profile", func(w http.ResponseWriter, _ *http.Request) {
		time.Sleep(cpuAfter)
		if !ok {
			http.Error(w, "gone", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("cpu"))
	})
	mux.HandleFunc("/debug/pprof/heap", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("heap")) })
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// A profile that could not be saved is reported as an event of the node it belongs to, at the time
// it failed, not as "node 0 at 0.0 ms"; the saved ones are named by node id.
func TestProfileFailureNamesItsNodeAndTime(t *testing.T) {
	good := fakeNodeAdmin(t, 2, 0, true)
	bad := fakeNodeAdmin(t, 3, 150*time.Millisecond, false)
	dir := filepath.Join(t.TempDir(), "made") // a directory --profile names but that is not there yet
	cfg := DefaultConfig()
	cfg.ProfileDir, cfg.Duration = dir, time.Second
	strip := func(u string) string { return strings.TrimPrefix(u, "http://") }
	r := &run{cfg: cfg, admin: newAdmin(), admins: []string{strip(good.URL), strip(bad.URL)},
		events: &events{start: time.Now()}}
	ctx := context.Background()
	p := r.startProfiles(ctx)
	rep := &Report{Events: []Event{{Name: EventKill, Node: 3, AtMs: 100}}}
	p.finish(ctx, rep)
	if len(rep.Events) != 2 {
		t.Fatalf("events %+v, want the kill and node 3's CPU profile", rep.Events)
	}
	e := rep.Events[1]
	if e.Name != EventProfileNotSaved || e.Node != 3 || e.AtMs < 150 || !strings.HasPrefix(e.Note, "cpu: ") {
		t.Fatalf("event %+v, want node 3's cpu profile not saved at 150 ms or later", e)
	}
	for _, name := range []string{"node2-cpu.pprof", "node2-heap.pprof", "node3-heap.pprof", selfProfileName} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}
