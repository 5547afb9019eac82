package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringstream/ringstream/engine/admin"
	"github.com/ringstream/ringstream/engine/adminapi"
	"github.com/ringstream/ringstream/engine/clientreq"
	"github.com/ringstream/ringstream/engine/config"
	"github.com/ringstream/ringstream/engine/controlhost"
	"github.com/ringstream/ringstream/engine/kafka"
	"github.com/ringstream/ringstream/engine/metahost"
	"github.com/ringstream/ringstream/engine/nodebeat"
	"github.com/ringstream/ringstream/engine/stagetrace"
	"github.com/ringstream/ringstream/engine/stream"
	"github.com/ringstream/ringstream/engine/streamhost"
	"github.com/ringstream/ringstream/ring"
	"github.com/ringstream/ringstream/shard"
	"github.com/ringstream/ringstream/wire"
)

// Node errors. Each has one meaning.
var (
	// ErrNodeState: Start, Stop or SetPeer called in the wrong order (started twice, after Stop).
	ErrNodeState = errors.New("engine: node started twice, or used after Stop")
	// ErrIdentity: the data directory belongs to another cluster or node (the message names both).
	ErrIdentity = errors.New("engine: data directory identity mismatch")
)

// Node states, as Status reports them.
const (
	nodeNew      = int32(admin.StateNew)
	nodeServing  = int32(admin.StateServing)
	nodeStopping = int32(admin.StateStopping)
	nodeStopped  = int32(admin.StateStopped)
)

// NodeOptions are the parts of a node that are not configuration: test seams and shared registries.
type NodeOptions struct {
	// DrainTimeout is shard.Config.DrainTimeout (0: the shard's default, 5 s). Tests that kill nodes
	// set it short, so Kill abandons what is in flight with the ring.
	DrainTimeout time.Duration
	// WrapRing is shard.Config.WrapRing (a storage fault model in tests).
	WrapRing func(shard int, r ring.Ring) ring.Ring
	// Registry receives the node's metrics (nil: a registry of the node's own, served by /metrics).
	Registry *prometheus.Registry
	// MetaRequestTimeout bounds one metadata request (a create, a forward to the primary) before it is
	// answered CodeUnavailable (default 10 s).
	MetaRequestTimeout time.Duration
}

// Node is one ringstream node in this process: its shards and peer links, its metadata replica and
// controller host when it is a metadata member, its node heartbeat sender, its stream copies, the
// client request handler (engine/clientreq) and the admin HTTP listener (engine/admin).
//
// Decisions where the design is silent:
//   - The data directory records its cluster and node (IdentityFile, written durably at the first
//     boot that could build the node); a directory of another cluster or node is refused naming both. The metadata replica's directory
//     (data_dir/meta) must have been made by `ringstream format`: a node never formats itself.
//   - Client requests (metadata and data) are engine/clientreq's: its package comment lists its
//     decisions.
//   - Shutdown (SIGTERM): new produces are refused CodeUnavailable, produces already handed to a copy
//     are waited for (until ctx ends), then requests still arriving are read and answered until the
//     connections were quiet for three ticks (at most drainQuietMax), the shutdown notice goes to the
//     controller (eager failover), then the shards stop and the copies close their logs while the
//     rings drain. A request the node never read is not answered: it was not taken either. Kill
//     skips the waits and the notice.
//   - The node heartbeat goes every tenth of node_liveness_timeout (at least one tick).
//   - A committed stream delete is carried out by every node that holds a metadata replica: every
//     reapEvery it compares its serving copies with its replica's applied state and deletes each
//     copy of an incarnation the state records as deleted (meta.State.Deleted: the stream's id is
//     retired or lives at a later incarnation; an id the replica has not seen is never taken for
//     deleted) through streamhost.Host.DeleteIncarnation. Requests for the stream are then
//     answered from the state: CodeUnknownStream. A node without a replica keeps its copies of a
//     deleted stream until an operator removes them; a copy not open when its node looked (the
//     node was down, the copy failed to open) keeps its directory.
//   - The node's metrics, probes and admin HTTP API are engine/admin's: its package comment lists
//     its decisions.
type Node struct {
	cfg   *config.Config
	opts  NodeOptions
	log   *slog.Logger
	reg   *prometheus.Registry
	id    uint16
	from  wire.From
	peers []shard.Peer // every other node, sorted by id
	// clientAddrs is every node's client address (cluster.clients), sorted by id.
	clientAddrs []shard.Peer

	shard   *shard.Node
	meta    *metahost.Group   // nil: this node holds no metadata replica
	ctl     *controlhost.Host // nil with meta
	beat    *nodebeat.Beat
	streams *streamhost.Host
	clients *clientreq.Handler
	kafka   *kafka.Handler // nil: no Kafka listener
	metaSvc *clientreq.Service
	admin   *admin.Server
	reaper  *reaper

	replicas []uint16 // the metadata group's nodes, member index order

	state      atomic.Int32
	mu         sync.Mutex
	stopDone   chan struct{}
	cancel     context.CancelFunc
	background sync.WaitGroup
}

// NewNode builds node cfg.File.Node.ID from its configuration: it checks the data directory's
// identity, binds the peer, client and admin listeners, opens the metadata replica (a directory
// `ringstream format` made) and puts every group on the shards. Nothing runs until Start.
func NewNode(cfg *config.Config, logger *slog.Logger) (*Node, error) {
	return NewNodeWithOptions(cfg, logger, NodeOptions{})
}

// NewNodeWithOptions is NewNode with the options tests and embedders need.
func NewNodeWithOptions(cfg *config.Config, logger *slog.Logger, opts NodeOptions) (*Node, error) {
	if logger == nil {
		logger = slog.Default()
	}
	if opts.MetaRequestTimeout == 0 {
		opts.MetaRequestTimeout = 10 * time.Second
	}
	f := &cfg.File
	n := &Node{cfg: cfg, opts: opts, id: f.Node.ID, replicas: slices.Clone(f.Metadata.Replicas),
		from: wire.From{Cluster: f.Cluster.ID, Node: f.Node.ID}, peers: cfg.Peers(),
		clientAddrs: slices.Clone(cfg.ClientAddrs), stopDone: make(chan struct{})}
	n.log = logger.With("node", n.id)
	recorded, err := VerifyIdentity(f.Node.DataDir, f.Cluster.ID, n.id)
	if err != nil {
		return nil, err
	}
	n.reg = opts.Registry
	if n.reg == nil {
		n.reg = prometheus.NewRegistry()
	}
	sc := cfg.Shard()
	sc.Logger, sc.Registry, sc.DrainTimeout, sc.WrapRing = n.log, n.reg, opts.DrainTimeout, opts.WrapRing
	sn, err := shard.NewNode(sc)
	if err != nil {
		return nil, fmt.Errorf("engine: node %d: %w", n.id, err)
	}
	n.shard = sn
	err = n.compose()
	if err == nil && !recorded {
		// Recorded once the node could be built (its metadata replica opened): a first start with a
		// mistyped cluster id leaves nothing behind that the corrected one would be refused for.
		err = WriteIdentity(f.Node.DataDir, Identity{Cluster: f.Cluster.ID, Node: n.id})
	}
	if err != nil {
		_ = sn.Stop() // closes the listeners bound by NewNode
		if n.admin != nil {
			n.admin.Close()
		}
		if n.metaSvc != nil {
			n.metaSvc.Close()
		}
		if n.meta != nil {
			n.meta.Close()
		}
		return nil, err
	}
	return n, nil
}

// compose makes the groups and handlers of the node and puts them on the shards (before Start).
func (n *Node) compose() error {
	cfg, sn := n.cfg, n.shard
	n.reaper = newReaper(n)
	storage := admin.NewStorageMetrics(n.metricLabels(), clientreq.LatencyBuckets())
	var recoveries *admin.RecoveryMetrics
	var self func(h *wire.Header, body []byte)
	if mc, ok := cfg.MetaGroup(); ok {
		mc.Logger = n.log
		g, err := metahost.New(metahost.Config(mc))
		if err != nil {
			return fmt.Errorf("engine: node %d: metadata replica: %w", n.id, err)
		}
		n.meta = g
		g.SetWake(func() { sn.Wake(0) })
		g.SetPersistObserver(storage.ObservePersist)
		if err := sn.AddGroup(g); err != nil {
			return fmt.Errorf("engine: node %d: %w", n.id, err)
		}
		ctl, err := controlhost.New(controlhost.Config{Control: cfg.Control(), LocalFrame: n.localControlFrame,
			Next: nodeFrames{n}, Logger: n.log}, g, sn)
		if err != nil {
			return fmt.Errorf("engine: node %d: controller: %w", n.id, err)
		}
		n.ctl, self = ctl, ctl.LocalHeartbeat
		recoveries = admin.NewRecoveryMetrics(n.metricLabels())
		ctl.SetObserver(recoveries.Observe)
	} else if err := sn.SetNodeHandler(nodeFrames{n}); err != nil {
		return fmt.Errorf("engine: node %d: %w", n.id, err)
	}
	seg := cfg.Segment()
	seg.CommitObserver = storage.ObserveCommit
	data := admin.NewDataMetrics(n.metricLabels())
	replies := func(id uint64, r *stream.Reply) { data.Count(r); n.clients.StreamReply(id, r) }
	stages := stagetrace.New(cfg.ShardCount)
	retainBytes, retainAgeMs := cfg.Retention()
	host, err := streamhost.New(sn, streamhost.Config{Dir: cfg.File.Node.DataDir, Cluster: cfg.File.Cluster.ID,
		Node: n.id, Shards: cfg.ShardCount, Segment: seg, RetainBytes: retainBytes, RetainAgeMs: retainAgeMs,
		Stream:  stream.Config{TickMs: uint32(cfg.File.Cluster.TickMs)},
		Replies: replies, SealReplies: n.sealReply, IdleCloseTicks: cfg.IdleCloseTicks(), Stages: stages, Logger: n.log})
	if err != nil {
		return fmt.Errorf("engine: node %d: stream host: %w", n.id, err)
	}
	n.streams = host
	n.clients = clientreq.New(clientreq.Config{Node: cfg, ClientAddrs: n.clientAddrs,
		MetaRequestTimeout: n.opts.MetaRequestTimeout, Shards: sn, Meta: n.meta, Streams: host, Stages: stages,
		Labels: n.metricLabels(), Logger: n.log})
	n.metaSvc = n.clients.Service()
	for i := range cfg.ShardCount { // ids below the stream host's, so their hooks run first (clientreq.Group)
		if err := sn.AddGroup(n.clients.Group(i)); err != nil {
			return fmt.Errorf("engine: node %d: client group of shard %d: %w", n.id, i, err)
		}
	}
	beat, err := nodebeat.New(nodebeat.Config{Cluster: cfg.File.Cluster.ID, Node: n.id, Shards: cfg.ShardCount,
		To: n.replicas, IntervalTicks: beatIntervalTicks(cfg), Copies: host, Failures: nodebeat.HostFailures(host), Self: self,
		Logger: n.log})
	if err != nil {
		return fmt.Errorf("engine: node %d: %w", n.id, err)
	}
	if err := sn.AddGroup(beat); err != nil {
		return fmt.Errorf("engine: node %d: node heartbeat: %w", n.id, err)
	}
	n.beat = beat
	if err := sn.SetClientHandler(n.clients); err != nil {
		return fmt.Errorf("engine: node %d: %w", n.id, err)
	}
	if cfg.KafkaListen.IsValid() {
		kh, err := kafka.New(kafka.Config{Node: cfg, Shards: sn, Meta: n.meta, Registry: n.reg, Labels: n.metricLabels(),
			Logger: n.log})
		if err != nil {
			return fmt.Errorf("engine: node %d: kafka: %w", n.id, err)
		}
		if _, listed := cfg.File.Cluster.Kafka[strconv.Itoa(int(n.id))]; !listed && sn.KafkaAddr().Port() != 0 &&
			!sn.KafkaAddr().Addr().IsUnspecified() {
			kh.SetBroker(n.id, sn.KafkaAddr()) // kafka.listen on port 0: the port bound
		}
		if err := sn.SetKafkaHandler(kh); err != nil {
			return fmt.Errorf("engine: node %d: %w", n.id, err)
		}
		n.kafka = kh
	}
	a, err := admin.New(admin.Config{Node: cfg, Registry: n.reg, OwnRegistry: n.opts.Registry == nil,
		MetaRequestTimeout: n.opts.MetaRequestTimeout, State: func() admin.State { return admin.State(n.state.Load()) },
		Shards: sn, Meta: n.meta, Ctl: n.ctl, Beat: beat, Streams: host, Clients: n.clients, Stages: stages,
		Storage: storage, Recoveries: recoveries, Data: data, Labels: n.metricLabels(), Logger: n.log})
	if err != nil {
		return err
	}
	n.admin = a
	return nil
}

// beatIntervalTicks is the node heartbeat interval: a tenth of the liveness timeout, at least one
// tick, so the controller hears several heartbeats per liveness window.
func beatIntervalTicks(cfg *config.Config) uint32 {
	return max(1, cfg.NodeLivenessTimeoutTicks/10)
}

// SetPeer changes the addresses of node id (before Start): its peer address (ignored for this node)
// and its client address. Tests bind every listener to port 0 and tell each node the others' ports
// once they are known.
func (n *Node) SetPeer(id uint16, peer, client netip.AddrPort) error {
	if n.state.Load() != nodeNew {
		return ErrNodeState
	}
	found := false
	for i := range n.clientAddrs {
		if n.clientAddrs[i].Node == id {
			n.clientAddrs[i].Addr, found = client, true
		}
	}
	for i := range n.peers {
		if n.peers[i].Node == id {
			n.peers[i].Addr = peer
		}
	}
	if !found {
		return fmt.Errorf("%w: node %d is not in cluster.peers of node %d", ErrNodeState, id, n.id)
	}
	return nil
}

// Start runs the shards, links to every peer, and starts the metadata request workers, the node's
// registration (its client address, through the metadata group) and the admin HTTP listener.
func (n *Node) Start(ctx context.Context) error {
	if !n.state.CompareAndSwap(nodeNew, nodeServing) {
		return ErrNodeState
	}
	if err := n.shard.Start(n.peers); err != nil {
		// The shards closed their rings and the listeners; the rest goes now, and Stop returns at once.
		n.admin.Close()
		n.metaSvc.Close()
		if n.meta != nil {
			n.meta.Close()
		}
		n.state.Store(nodeStopped)
		close(n.stopDone)
		return fmt.Errorf("engine: node %d: start: %w", n.id, err)
	}
	bg, cancel := context.WithCancel(context.WithoutCancel(ctx))
	n.cancel = cancel
	n.background.Add(3)
	go func() { defer n.background.Done(); n.metaSvc.Register(bg) }()
	go func() { defer n.background.Done(); n.reaper.run(bg) }()
	go func() { defer n.background.Done(); n.admin.Serve() }()
	n.log.Info("node serving", "peer", n.shard.Addr(), "client", n.ClientAddr(), "kafka", n.KafkaAddr(), "admin", n.AdminAddr(),
		"shards", n.cfg.ShardCount, "metadata_replica", n.meta != nil)
	return nil
}

// Shutdown is the clean stop (SIGTERM): the node refuses new produces, waits until every produce it
// accepted was answered (or ctx ends), sends the controller its shutdown notice (eager failover of the
// streams it owns), and stops. Its copies close their logs while the shards drain.
func (n *Node) Shutdown(ctx context.Context) error {
	if !n.state.CompareAndSwap(nodeServing, nodeStopping) {
		return n.Stop(ctx)
	}
	if err := n.clients.Drain(ctx); err != nil {
		n.log.Warn("shutdown: produces still unanswered", "err", err)
	}
	if err := n.beat.Shutdown(n.shard); err != nil {
		n.log.Warn("shutdown notice not sent", "err", err)
	}
	return n.stop(ctx)
}

// Stop stops the node without the shutdown notice or the produce drain: what is in flight on the
// rings drains for the shard's DrainTimeout. Stop after Stop waits for the first.
func (n *Node) Stop(ctx context.Context) error {
	for {
		switch n.state.Load() {
		case nodeNew:
			if !n.state.CompareAndSwap(nodeNew, nodeStopping) {
				continue
			}
			err := n.shard.Stop()
			n.admin.Close()
			n.metaSvc.Close()
			if n.meta != nil {
				n.meta.Close()
			}
			n.state.Store(nodeStopped)
			close(n.stopDone)
			return err
		case nodeServing:
			if !n.state.CompareAndSwap(nodeServing, nodeStopping) {
				continue
			}
			return n.stop(ctx)
		}
		select { // stopping or stopped: wait for the stop under way
		case <-n.stopDone:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Kill stops the node abruptly, as a crash would look to its peers: no shutdown notice, no drain of
// produces; links drop at once and what the rings hold in flight is abandoned after DrainTimeout.
func (n *Node) Kill() { _ = n.Stop(context.Background()) }

// stop ends the background work, the shards (groups hear OnStop and their rings drain) and the files.
func (n *Node) stop(ctx context.Context) error {
	n.mu.Lock()
	cancel := n.cancel
	n.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	n.metaSvc.Close()
	n.admin.Close()
	err := n.shard.Stop()
	n.background.Wait()
	n.metaSvc.Wait()
	if n.meta != nil {
		n.meta.Close()
	}
	n.state.Store(nodeStopped)
	close(n.stopDone)
	_ = ctx
	if err != nil {
		return fmt.Errorf("engine: node %d: stop: %w", n.id, err)
	}
	n.log.Info("node stopped")
	return nil
}

// ID is the node id.
func (n *Node) ID() uint16 { return n.id }

// PeerAddr is the address peer links connect to.
func (n *Node) PeerAddr() netip.AddrPort { return n.shard.Addr() }

// ClientAddr is the address clients connect to, as bound.
func (n *Node) ClientAddr() netip.AddrPort { return n.shard.ClientAddr() }

// KafkaAddr is the address Kafka clients connect to (the zero value without kafka.listen).
func (n *Node) KafkaAddr() netip.AddrPort { return n.shard.KafkaAddr() }

// AdminAddr is the admin HTTP listener's address, as bound.
func (n *Node) AdminAddr() netip.AddrPort { return n.admin.Addr() }

// Meta is the node's metadata replica (nil when it holds none).
func (n *Node) Meta() *metahost.Group { return n.meta }

// Controller is the controller host on the node's metadata replica (nil when it holds none).
func (n *Node) Controller() *controlhost.Host { return n.ctl }

// Streams is the node's stream host.
func (n *Node) Streams() *streamhost.Host { return n.streams }

// Shards is the node's shard runtime.
func (n *Node) Shards() *shard.Node { return n.shard }

// metaDir is the metadata replica's directory.
func (n *Node) metaDir() string { return filepath.Join(n.cfg.File.Node.DataDir, "meta") }

// metricLabels are the constant labels of every node metric.
func (n *Node) metricLabels() prometheus.Labels {
	return prometheus.Labels{"node": strconv.Itoa(int(n.id))}
}

// Status is /v1/status: the node, its metadata replica and controller, its links, the streams of its
// applied metadata state and its own copies. Safe from any goroutine.
func (n *Node) Status() adminapi.Status { return n.admin.Status() }

// Attention is /v1/attention: the active controller's attention list.
func (n *Node) Attention() adminapi.Attention { return n.admin.Attention() }

// Readiness is /readyz's answer (admin.Readiness): whether the node finished its start.
func (n *Node) Readiness(ctx context.Context) Readiness { return n.admin.Readiness(ctx) }

// Readiness is the admin package's readiness answer.
type Readiness = admin.Readiness
