package streamhost

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/engine/stagetrace"
	"github.com/ringstream/ringstream/engine/stream"
	"github.com/ringstream/ringstream/segment"
	"github.com/ringstream/ringstream/shard"
	"github.com/ringstream/ringstream/wire"
)

var (
	// ErrConfig: a Config or Spec is invalid.
	ErrConfig = errors.New("streamhost: invalid configuration")
	// ErrUnknownStream: no copy of that stream is open on this node.
	ErrUnknownStream = errors.New("streamhost: no copy of that stream here")
	// ErrDamaged: a copy's directory did not open (its cause is wrapped beside it).
	ErrDamaged = errors.New("streamhost: copy did not open")
	// ErrLogFailed: a serving copy's storage failed (its cause is wrapped beside it).
	ErrLogFailed = errors.New("streamhost: copy's storage failed")
	// ErrNotFailed: a retry names a copy whose storage has not failed.
	ErrNotFailed = errors.New("streamhost: the copy has not failed")
)

// Config sets up the stream copies of one node.
type Config struct {
	// Dir is the node's data directory; copies live in Dir/streams/<id>-<incarnation>.
	Dir     string
	Cluster uint64 // stamped on every frame
	Node    uint16 // this node's id
	Shards  int    // the node's shard count (shard.Config.Shards; default 1)
	// Segment configures each copy's logs; Stream is the template of each copy's protocol
	// configuration (Self, Stream, Incarnation, Decode and BatchHeaderBytes are filled in).
	Segment segment.Config
	Stream  stream.Config
	// Replies receives every client reply, on the shard goroutine of the stream's copy. The reply's
	// slices (Fetch.Batches, Error.Message) alias buffers the host reuses: use or copy them before
	// returning. Nil drops replies.
	Replies func(stream uint64, r *stream.Reply)
	// Opened hears each copy's open end (nil: opened and serving), on the shard goroutine: at boot,
	// and again each time an assignment reopened it in its new role.
	Opened func(stream uint64, err error)
	// SealReplies receives the seal replies that reach this node (addressed to a stream's group, so
	// they land on the stream's shard) and the replies of this node's own copies to seals from this
	// node, on a shard goroutine: controlhost.Host.OnSealReply on a metadata member. Nil drops them.
	SealReplies func(from uint16, m wire.StreamSealReply)
	// RetainEveryTicks is how often each copy runs retention when its Spec sets a limit
	// (default 1000 ticks).
	RetainEveryTicks uint64
	// RetainBytes and RetainAgeMs are the node's retention (storage.retention_bytes and
	// storage.retention_age; 0: no limit): the Spec of every copy an assignment creates takes them.
	RetainBytes int64
	RetainAgeMs int64
	// IdleCloseTicks: a copy with no append, read or seal for this many ticks is parked
	// (segment.Copy.Park: its four descriptors closed until it is used again). 0: the default,
	// 1000 ticks; negative: never. Copies park right after their open either way unless negative.
	IdleCloseTicks int64
	// HealBaseTicks and HealMaxTicks: a copy whose storage failed is closed and reopened through
	// recovery after HealBaseTicks, the wait doubling after each reopen that fails up to HealMaxTicks
	// (defaults 100 and 3000 ticks: 1 s and 30 s at the default tick).
	HealBaseTicks uint64
	HealMaxTicks  uint64
	// Stages, if set, hears the stages of the batches its copies append, replicate and confirm while
	// it is switched on (engine/stagetrace): owner and follower marks, on the copies' shards.
	Stages *stagetrace.Tracer
	Logger *slog.Logger // nil: slog.Default()
}

// Spec names one copy to open on this node: the stream, its incarnation, the assignment this node
// holds a copy under, and its retention (0: no limit).
type Spec struct {
	Stream      uint64
	Incarnation uint32
	Assignment  meta.Assignment
	RetainBytes int64
	RetainAgeMs int64
}

// Failure is a copy whose storage did not open or failed while it served, as reported by Status
// (the node's status, its metrics and its heartbeats read it).
type Failure struct {
	Stream      uint64
	Incarnation uint32
	Dir         string
	Err         error // wraps ErrDamaged (the open or its scan failed) or ErrLogFailed, and the cause
	Cause       Cause
	// Retrying: the host reopens it by itself, with a backoff; false: corrupt data, which waits for
	// an operator's retry (RetryCopy) after a repair, or a delete.
	Retrying bool
	Attempts int         // reopens tried since it failed
	Role     stream.Role // the role it had when it failed (RoleOpening: it failed opening)
	Epoch    uint32      // the epoch of its assignment
}

// Host runs the stream copies of one node on its shards. Open, Delete and Status are safe from any
// goroutine; Step runs on the shard goroutine of the stream's copy.
type Host struct {
	cfg    Config
	node   *shard.Node
	shards []*shardHost
	log    *slog.Logger

	mu       sync.Mutex
	failures []Failure // sorted by stream

	failCounts   [CauseCount]atomic.Uint64
	healAttempts atomic.Uint64
	heals        atomic.Uint64
}

// New makes the host of node's stream copies: it creates Dir/streams (a plain mkdir, before the
// node starts) and puts one host group on every shard (see the package doc). Call before
// node.Start.
func New(node *shard.Node, cfg Config) (*Host, error) {
	switch {
	case cfg.Dir == "":
		return nil, fmt.Errorf("%w: no Dir", ErrConfig)
	case cfg.Node == 0:
		return nil, fmt.Errorf("%w: Node is 0", ErrConfig)
	}
	if err := cfg.Segment.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if cfg.Shards == 0 {
		cfg.Shards = 1
	}
	if cfg.RetainEveryTicks == 0 {
		cfg.RetainEveryTicks = 1000
	}
	if cfg.IdleCloseTicks == 0 {
		cfg.IdleCloseTicks = 1000
	}
	if cfg.HealBaseTicks == 0 {
		cfg.HealBaseTicks = 100
	}
	if cfg.HealMaxTicks == 0 {
		cfg.HealMaxTicks = 3000
	}
	if cfg.HealMaxTicks < cfg.HealBaseTicks {
		return nil, fmt.Errorf("%w: HealMaxTicks %d below HealBaseTicks %d", ErrConfig, cfg.HealMaxTicks, cfg.HealBaseTicks)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if err := os.MkdirAll(filepath.Join(cfg.Dir, "streams"), 0o755); err != nil {
		return nil, fmt.Errorf("streamhost: %w", err)
	}
	h := &Host{cfg: cfg, node: node, log: cfg.Logger}
	n := cfg.Shards
	for i := range n {
		sh := newShardHost(h, i, hostGroupID(i, n))
		if err := node.AddGroup(sh); err != nil {
			return nil, fmt.Errorf("streamhost: host group of shard %d: %w", i, err)
		}
		h.shards = append(h.shards, sh)
	}
	return h, nil
}

// hostGroupID is the id of shard i's host group: the highest id below the metadata group's that
// ShardOf puts on shard i. Stream ids never come that close to 2^64.
func hostGroupID(i, shards int) uint64 {
	for id := uint64(math.MaxUint64 - 1); ; id-- {
		if shard.ShardOf(id, shards) == i {
			return id
		}
	}
}

// segIndexBytes is how far below an offset a read may start (segment's sparse index spacing).
func (h *Host) segIndexBytes() int64 {
	if h.cfg.Segment.IndexIntervalBytes > 0 {
		return h.cfg.Segment.IndexIntervalBytes
	}
	return 4 << 10
}

// Dir is the directory of a copy of stream at incarnation.
func (h *Host) Dir(stream uint64, incarnation uint32) string {
	return filepath.Join(h.cfg.Dir, "streams", fmt.Sprintf("%d-%d", stream, incarnation))
}

// Open adds a copy for each spec to the shard that owns its stream and opens it there (creating
// its directory when new). The opens run at once on each shard's ring, interleaved; each copy serves
// once its open ended (Config.Opened). A copy whose directory is damaged is reported (Status) and
// left closed; the others serve. Call after node.Start.
func (h *Host) Open(specs ...Spec) error {
	if n := len(h.node.Shards()); n != len(h.shards) {
		return fmt.Errorf("%w: the node runs %d shards, the host was made for %d (Config.Shards), or it has not started", ErrConfig, n, len(h.shards))
	}
	for _, sp := range specs {
		if sp.Stream == 0 || sp.Incarnation == 0 || !sp.Assignment.Includes(h.cfg.Node) {
			return fmt.Errorf("%w: spec %d-%d holds no copy on node %d", ErrConfig, sp.Stream, sp.Incarnation, h.cfg.Node)
		}
		cg, err := h.newCopy(sp)
		if err != nil {
			return err
		}
		if err := h.node.AddGroup(cg); err != nil {
			return fmt.Errorf("streamhost: stream %d: %w", sp.Stream, err)
		}
	}
	return nil
}

// Delete closes the copy of stream and removes its files on the ring (segment.Copy.Delete), then
// takes its group off the shard. done hears the outcome on the shard goroutine.
func (h *Host) Delete(streamID uint64, done func(error)) error {
	i := shard.ShardOf(streamID, len(h.shards))
	return h.node.Run(i, func(*shard.Shard) {
		cg := h.shards[i].copies[streamID]
		if cg == nil {
			done(fmt.Errorf("%w: %d", ErrUnknownStream, streamID))
			return
		}
		cg.delete(done)
	})
}

// Step hands one client request (produce, fetch, cursor commit or read) to the copy of m's stream
// on shard s, and carries out what it asks at once: m's slices may be reused when Step returns.
// Replies go to Config.Replies. It runs on s's goroutine (Node.Run, or a frame handler).
func (h *Host) Step(s *shard.Shard, streamID uint64, m *stream.Message) error {
	cg, err := h.serving(s, streamID)
	if err != nil {
		return err
	}
	cg.c.Step(m)
	cg.carryOut()
	return nil
}

// StepAll is Step for several requests to one stream, carried out together: the owner's appends of
// all of them go to each follower as one prepare (one data frame) instead of one per request.
func (h *Host) StepAll(s *shard.Shard, streamID uint64, ms []stream.Message) error {
	cg, err := h.serving(s, streamID)
	if err != nil {
		return err
	}
	for i := range ms {
		cg.c.Step(&ms[i])
	}
	cg.carryOut()
	return nil
}

// serving is the copy of streamID on shard s, serving and told its head.
func (h *Host) serving(s *shard.Shard, streamID uint64) (*copyGroup, error) {
	cg := h.shards[s.Index()].copies[streamID]
	if cg == nil || cg.c == nil || cg.state != stateServing {
		return nil, fmt.Errorf("%w: %d", ErrUnknownStream, streamID)
	}
	cg.wake()
	cg.syncHead()
	return cg, nil
}

// CopyState is one copy's state as its host sees it.
type CopyState struct {
	Open      bool
	Role      stream.Role
	Epoch     uint32 // the assignment's
	Fence     uint32 // storage's fence epoch
	Confirmed uint64 // owner: the confirmed tail
	Appended  uint64
	Durable   uint64
	InSync    int // owner: copies whose durable tail reached the confirmed tail (stream.Copy.InSync)
	// Head is the record log's retained head; RecordBytes and CursorBytes the logs' durable sizes on
	// disk (segment.Log.SizeBytes).
	Head                     uint64
	RecordBytes, CursorBytes int64
	Stats                    stream.Stats
}

// State is the state of the copy of streamID on shard s (on s's goroutine).
func (h *Host) State(s *shard.Shard, streamID uint64) CopyState {
	cg := h.shards[s.Index()].copies[streamID]
	if cg == nil || cg.c == nil || cg.state != stateServing {
		return CopyState{}
	}
	st := CopyState{Open: true, Role: cg.c.Role(), Confirmed: cg.c.Confirmed(), Stats: cg.c.Stats(),
		Epoch: cg.spec.Assignment.Epoch, Fence: uint32(cg.seg.FenceEpoch())}
	st.Appended, st.Durable = cg.c.Tails()
	st.InSync = cg.c.InSync()
	if cg.seg != nil {
		st.Head = cg.seg.Records().Head()
		st.RecordBytes, st.CursorBytes = cg.seg.Records().SizeBytes(), cg.seg.Cursors().SizeBytes()
	}
	return st
}

// Stats returns shard s's counters (on s's goroutine).
func (h *Host) Stats(s *shard.Shard) Stats {
	sh := h.shards[s.Index()]
	st := sh.stats
	st.Parked = int(sh.parkedNow.Load())
	return st
}

// Status lists, sorted by stream, the copies whose storage did not open or failed and that have not
// healed (reopened and serving again) or been deleted since: with the cause, whether the host
// retries them by itself, and the role they had. The node's status, metrics and heartbeats read it.
// Safe from any goroutine.
func (h *Host) Status() []Failure { return h.AppendFailures(nil) }

// AppendFailures appends Status's list to dst (for the node heartbeats, which reuse their buffer).
// Safe from any goroutine.
func (h *Host) AppendFailures(dst []Failure) []Failure {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append(dst, h.failures...)
}

// newCopy makes the group of one copy (its protocol state is made when its storage opened).
func (h *Host) newCopy(sp Spec) (*copyGroup, error) {
	cfg := h.cfg.Stream
	cfg.Self, cfg.Stream, cfg.Incarnation = h.cfg.Node, sp.Stream, sp.Incarnation
	cfg.Decode, cfg.DecodeHeader, cfg.BatchHeaderBytes = decodeBatch, decodeBatchHeader, segment.BatchHeaderSize
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	sh := h.shards[shard.ShardOf(sp.Stream, len(h.shards))]
	cg := &copyGroup{h: sh, spec: sp, cfg: cfg, dir: h.Dir(sp.Stream, sp.Incarnation), stagger: uint8(sp.Stream % parkCheckTicks)}
	cg.spec.Assignment.Followers = slices.Clone(sp.Assignment.Followers)
	cg.members = append(cg.members, shard.Member{Index: 0, Node: sp.Assignment.Owner})
	for i, f := range cg.spec.Assignment.Followers {
		cg.members = append(cg.members, shard.Member{Index: uint8(i + 1), Node: f})
	}
	for _, m := range cg.members {
		if m.Node == h.cfg.Node {
			cg.self = m.Index
		}
	}
	return cg, nil
}

// decodeBatch is the copies' batch decoder: segment's format, with the epoch checked to fit 32 bits.
func decodeBatch(b []byte) (stream.BatchHeader, int, error) {
	h, _, n, err := segment.DecodeBatch(b)
	return checkedHeader(&h, n, err)
}

// decodeBatchHeader decodes a prepare's batch, whose payload the frame's body checksum covered: the
// header checked whole, the payload not hashed again.
func decodeBatchHeader(b []byte) (stream.BatchHeader, int, error) {
	h, _, n, err := segment.DecodeBatchHeader(b)
	return checkedHeader(&h, n, err)
}

func checkedHeader(h *segment.BatchHeader, n int, err error) (stream.BatchHeader, int, error) {
	if err != nil {
		return stream.BatchHeader{}, 0, err
	}
	if h.Epoch > math.MaxUint32 {
		return stream.BatchHeader{}, 0, fmt.Errorf("streamhost: batch at %d has epoch %d, above 32 bits", h.BaseOffset, h.Epoch)
	}
	return headerOf(h), n, nil
}

func headerOf(h *segment.BatchHeader) stream.BatchHeader {
	return stream.BatchHeader{BaseOffset: h.BaseOffset, Count: h.RecordCount, PayloadLen: h.PayloadLen,
		Epoch: uint32(h.Epoch), ProducerID: h.ProducerID, Sequence: h.ProducerSeq, Codec: h.Codec,
		Format: uint8(h.Version)}
}
