package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ringstream/ringstream/engine/adminapi"
)

// Server is the node's admin HTTP listener: /metrics, /healthz, /readyz, /debug/pprof/,
// /v1/status, /v1/attention, the operator's recovery actions (POST /v1/recovery/accept-loss and
// /v1/recovery/withdraw), the retry of a failed copy (POST /v1/copies/{stream}/retry) and the stage
// trace (GET /v1/stages, POST /v1/stages/start and /v1/stages/stop; engine/stagetrace). It is bound
// in NewNode (so its address is known before Start) and served from Start.
type Server struct {
	n   *node
	ln  net.Listener
	srv *http.Server
	// ready latches the first time engine.Node.Readiness found the node ready (probe.go).
	ready atomic.Bool
}

// newServer binds addr (admin.listen). The zero address means no admin listener.
func newServer(n *node, addr netip.AddrPort) (*Server, error) {
	a := &Server{n: n}
	if !addr.IsValid() {
		return a, nil
	}
	ln, err := net.Listen("tcp", addr.String())
	if err != nil {
		return nil, fmt.Errorf("engine: admin listener %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(n.reg, promhttp.HandlerOpts{ErrorLog: nil}))
	mux.HandleFunc("GET /healthz", n.serveHealth)
	mux.HandleFunc("GET /readyz", n.serveReady)
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, n.Status()) })
	mux.HandleFunc("GET /v1/attention", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, n.Attention()) })
	mux.HandleFunc("POST /v1/recovery/accept-loss", n.serveRecovery("accept-loss"))
	mux.HandleFunc("POST /v1/recovery/withdraw", n.serveRecovery("withdraw"))
	mux.HandleFunc("POST /v1/copies/{stream}/retry", n.serveCopyRetry)
	if n.stages != nil {
		mux.HandleFunc("GET /v1/stages", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, n.stages.Snapshot(n.id)) })
		mux.HandleFunc("POST /v1/stages/start", func(w http.ResponseWriter, _ *http.Request) {
			n.stages.Start()
			writeJSON(w, n.stages.Snapshot(n.id))
		})
		mux.HandleFunc("POST /v1/stages/stop", func(w http.ResponseWriter, _ *http.Request) {
			n.stages.Stop()
			writeJSON(w, n.stages.Snapshot(n.id))
		})
	}
	a.ln = ln
	a.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	return a, nil
}

func writeJSON(w http.ResponseWriter, v any) { writeStatusJSON(w, http.StatusOK, v) }

func writeStatusJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// serve serves until close.
func (a *Server) serve() {
	if a.srv == nil {
		return
	}
	if err := a.srv.Serve(a.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		a.n.log.Error("admin listener failed", "err", err)
	}
}

// close stops the listener; requests in progress get a second to finish.
func (a *Server) close() {
	if a.srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := a.srv.Shutdown(ctx); err != nil {
		_ = a.srv.Close()
	}
	_ = a.ln.Close()
}

func (a *Server) addr() netip.AddrPort {
	if a.ln == nil {
		return netip.AddrPort{}
	}
	return a.ln.Addr().(*net.TCPAddr).AddrPort()
}

// Attention is /v1/attention: the active controller's attention list.
func (n *node) Attention() adminapi.Attention {
	out := adminapi.Attention{Node: n.id, Entries: []adminapi.AttentionEntry{}}
	if n.ctl == nil {
		return out
	}
	st := n.ctl.Status()
	out.Active = st.Primary
	if ms := n.meta.Status(); ms.Normal {
		out.Primary = n.replicas[int(ms.View)%len(n.replicas)]
	}
	for _, a := range st.Attention {
		out.Entries = append(out.Entries, adminapi.AttentionEntry{Kind: a.Kind.String(), Stream: a.Stream,
			Incarnation: a.Incarnation, Recovery: a.Recovery, Node: a.Node, Answers: a.Answers, Needed: a.Needed,
			StartEpoch: a.Start.Epoch, StartNode: a.Start.Node, StartRecord: a.Start.RecordStart,
			StartCursor: a.Start.CursorStart, Why: a.Why})
	}
	return out
}
