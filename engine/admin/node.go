package admin

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringstream/ringstream/engine/adminapi"
	"github.com/ringstream/ringstream/engine/clientreq"
	"github.com/ringstream/ringstream/engine/config"
	"github.com/ringstream/ringstream/engine/controlhost"
	"github.com/ringstream/ringstream/engine/metahost"
	"github.com/ringstream/ringstream/engine/nodebeat"
	"github.com/ringstream/ringstream/engine/stagetrace"
	"github.com/ringstream/ringstream/engine/streamhost"
	"github.com/ringstream/ringstream/shard"
	"github.com/ringstream/ringstream/wire"
)

// State is the node's lifecycle state (engine.Node's), as the admin API reads it.
type State int32

// The node's states, in the order a node goes through them.
const (
	StateNew State = iota
	StateServing
	StateStopping
	StateStopped
)

// Config is what the node hands its admin API: its configuration and its parts, each built before.
type Config struct {
	Node *config.Config
	// Registry receives the node's metrics and is served by /metrics. OwnRegistry says the node made
	// it itself (no NodeOptions.Registry): the Go and process collectors go only on such a registry.
	Registry    *prometheus.Registry
	OwnRegistry bool
	// MetaRequestTimeout bounds a recovery action's proposal.
	MetaRequestTimeout time.Duration
	// State reads the node's lifecycle state (any goroutine).
	State   func() State
	Shards  *shard.Node
	Meta    *metahost.Group   // nil: this node holds no metadata replica
	Ctl     *controlhost.Host // nil with Meta
	Beat    *nodebeat.Beat
	Streams *streamhost.Host
	Clients *clientreq.Handler
	// Stages is the node's stage tracing, switched and read by /v1/stages (nil: those answer 404).
	Stages *stagetrace.Tracer
	// Storage, Recoveries (nil without a metadata replica) and Data are the metrics the node's
	// groups feed, made before them (NewStorageMetrics, NewRecoveryMetrics, NewDataMetrics).
	Storage    *StorageMetrics
	Recoveries *RecoveryMetrics
	Data       *DataMetrics
	// Labels are the constant labels of every node metric.
	Labels prometheus.Labels
	Logger *slog.Logger
}

// node is the admin API's view of the node, under the names the node's own code used for them.
type node struct {
	cfg      *config.Config
	log      *slog.Logger
	reg      *prometheus.Registry
	ownReg   bool
	labels   prometheus.Labels
	id       uint16
	from     wire.From
	replicas []uint16 // the metadata group's nodes, member index order

	metaRequestTimeout time.Duration
	state              func() State

	shard   *shard.Node
	meta    *metahost.Group
	ctl     *controlhost.Host
	beat    *nodebeat.Beat
	streams *streamhost.Host
	clients *clientreq.Handler
	stages  *stagetrace.Tracer
	metaSvc *clientreq.Service
	metrics *nodeMetrics
	admin   *Server
}

// New registers the node's metrics on cfg.Registry and binds the admin listener on
// cfg.Node.AdminListen (the zero address: none); Serve serves it.
func New(cfg Config) (*Server, error) {
	f := &cfg.Node.File
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	n := &node{cfg: cfg.Node, log: cfg.Logger, reg: cfg.Registry, ownReg: cfg.OwnRegistry, labels: cfg.Labels,
		id: f.Node.ID, from: wire.From{Cluster: f.Cluster.ID, Node: f.Node.ID},
		replicas: slices.Clone(f.Metadata.Replicas), metaRequestTimeout: cfg.MetaRequestTimeout, state: cfg.State,
		shard: cfg.Shards, meta: cfg.Meta, ctl: cfg.Ctl, beat: cfg.Beat, streams: cfg.Streams, clients: cfg.Clients,
		stages: cfg.Stages, metaSvc: cfg.Clients.Service()}
	n.metrics = newNodeMetrics(n, cfg.Storage, cfg.Recoveries)
	if err := n.reg.Register(n.metrics); err != nil {
		return nil, fmt.Errorf("engine: register node metrics: %w", err)
	}
	if err := n.registerObservability(cfg.Data); err != nil {
		return nil, err
	}
	a, err := newServer(n, cfg.Node.AdminListen)
	if err != nil {
		return nil, err
	}
	n.admin = a
	return a, nil
}

// Serve serves the admin listener until Close.
func (a *Server) Serve() { a.serve() }

// Close stops the listener; requests in progress get a second to finish.
func (a *Server) Close() { a.close() }

// Addr is the admin listener's address, as bound (the zero address: none).
func (a *Server) Addr() netip.AddrPort { return a.addr() }

// Status is /v1/status (engine.Node.Status).
func (a *Server) Status() adminapi.Status { return a.n.Status() }

// Attention is /v1/attention (engine.Node.Attention).
func (a *Server) Attention() adminapi.Attention { return a.n.Attention() }

// Readiness is /readyz's answer (engine.Node.Readiness).
func (a *Server) Readiness(ctx context.Context) Readiness { return a.n.Readiness(ctx) }

func (n *node) metricLabels() prometheus.Labels { return n.labels }

func (n *node) ID() uint16                 { return n.id }
func (n *node) PeerAddr() netip.AddrPort   { return n.shard.Addr() }
func (n *node) ClientAddr() netip.AddrPort { return n.shard.ClientAddr() }
func (n *node) AdminAddr() netip.AddrPort  { return n.admin.addr() }
func (n *node) Meta() *metahost.Group      { return n.meta }

// Handler is the admin API's HTTP handler (nil when the node has no admin listener).
func (a *Server) Handler() http.Handler {
	if a.srv == nil {
		return nil
	}
	return a.srv.Handler
}
