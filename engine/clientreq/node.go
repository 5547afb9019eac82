package clientreq

import (
	"log/slog"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringstream/ringstream/engine/config"
	"github.com/ringstream/ringstream/engine/metahost"
	"github.com/ringstream/ringstream/engine/stagetrace"
	"github.com/ringstream/ringstream/engine/streamhost"
	"github.com/ringstream/ringstream/shard"
	"github.com/ringstream/ringstream/wire"
)

// Config is what the node hands the client request handler: its configuration and the parts the
// requests reach.
type Config struct {
	Node *config.Config
	// ClientAddrs is every node's client address (cluster.clients), sorted by id. The slice is the
	// node's own: engine.Node.SetPeer edits its entries in place before Start.
	ClientAddrs []shard.Peer
	// MetaRequestTimeout bounds one metadata request (a create, a forward to the primary) before it
	// is answered CodeUnavailable.
	MetaRequestTimeout time.Duration
	Shards             *shard.Node
	Meta               *metahost.Group // nil: this node holds no metadata replica
	Streams            *streamhost.Host
	// Stages, if set, hears each produce's receive and reply while it is switched on
	// (engine/stagetrace).
	Stages *stagetrace.Tracer
	// Labels are the constant labels of the handler's metrics.
	Labels prometheus.Labels
	Logger *slog.Logger
}

// node is the handler's view of the node, under the names the node's own code used for them.
type node struct {
	cfg         *config.Config
	log         *slog.Logger
	id          uint16
	from        wire.From
	clientAddrs []shard.Peer
	replicas    []uint16 // the metadata group's nodes, member index order

	metaRequestTimeout time.Duration

	shard   *shard.Node
	meta    *metahost.Group
	streams *streamhost.Host
	stages  *stagetrace.Tracer
	clients *Handler
	metaSvc *Service
	metrics *Metrics
}

// New builds the handler of cfg.Node's client requests and its metadata service. Set the handler
// with shard.Node.SetClientHandler and add Group(i) to every shard i.
func New(cfg Config) *Handler {
	f := &cfg.Node.File
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MetaRequestTimeout == 0 {
		cfg.MetaRequestTimeout = 10 * time.Second
	}
	n := &node{cfg: cfg.Node, log: cfg.Logger, id: f.Node.ID, from: wire.From{Cluster: f.Cluster.ID, Node: f.Node.ID},
		clientAddrs: cfg.ClientAddrs, replicas: slices.Clone(f.Metadata.Replicas),
		metaRequestTimeout: cfg.MetaRequestTimeout, shard: cfg.Shards, meta: cfg.Meta, streams: cfg.Streams,
		stages: cfg.Stages}
	n.metrics = newMetrics(cfg.Labels)
	n.clients = newHandler(n)
	n.metaSvc = newService(n)
	return n.clients
}

// Service is the metadata service of the handler.
func (c *Handler) Service() *Service { return c.n.metaSvc }

// Metrics are the handler's metrics.
func (c *Handler) Metrics() *Metrics { return c.n.metrics }

// Group is the client group of shard i (it hands the turn's held produces to the copies).
func (c *Handler) Group(i int) shard.Group {
	return &clientGroup{c: c, index: i, id: clientGroupID(i, c.n.cfg.ShardCount),
		members: []shard.Member{{Index: 0, Node: c.n.id}}}
}
